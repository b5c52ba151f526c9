"""Training-loop contracts: the learning rate each step used, the clipping of the gradients
the optimizer was handed, the AdamW step itself, and tensor parallel against no tensor
parallel.

Each expected value comes from outside the run's own bookkeeping: the schedule is computed
from the run's configuration with the suite's arithmetic (``fixtures.lr_schedule``, written
from torchtitan's documented schedule); the clipping rule is torch's documented
``clip_grad_norm_`` (scale by ``max_norm / (norm + 1e-6)`` when that is below 1) applied to
the configured ``max_norm``; the AdamW step is torch's own single-tensor ``AdamW`` on a plain
copy of what the optimizer was handed, with the configured hyper-parameters; the TP=2 run is
held to the TP=1 run of the same global batch. What the run did is observed from inside it
by global optimizer hooks and the final-state probe (``fixtures.rank.titan.probes``).
"""

from __future__ import annotations

import math

import pytest

from fixtures import lr_schedule, training_settings
from fixtures.contract import expect, expect_close_series, fail, require_trained
from fixtures.runs.catalogue import (DENSE_NATIVE, DENSE_NATIVE_OPTIMIZER_TENSORS, SCHEDULE_AND_CLIP,
                                      clipping_run, rank_scaling, tensor_parallel,
                                      tensor_parallel_reference, two_nodes)

pytestmark = [pytest.mark.training_loop, pytest.mark.slow]

# torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
CLIP_EPS = 1e-6


def _lr_series(run) -> list[float]:
    return [rec["groups"][0]["lr"] for rec in run.optimizer_steps(0)]


def _expect_configured_schedule(run, tier, record_property) -> None:
    __tracebackhide__ = True
    config = run.resolved_config()
    settings = training_settings.schedule(config)
    base = training_settings.optimizer(config).lr
    expected = lr_schedule.learning_rates(base, settings, run.spec.steps)
    actual = _lr_series(run)
    expect_close_series(actual, expected, tier.numerics.schedule_rtol,
                        "the learning rate of each step is the configured schedule's", run,
                        record_property, detail=f"schedule settings {settings}, base lr {base}")


@pytest.mark.parametrize("which", ["warmup_only", "warmup_stable_cosine_decay"])
def test_learning_rate_follows_the_configured_schedule(tier, titan_runs, record_property, which):
    """The learning rate the optimizer used at each step (read by a pre-step hook inside the
    run) equals the schedule computed from the configuration alone, from step 1.
    ``warmup_only``: the write-up's schedule (warmup 600, clamped to the run's 10 steps);
    ``warmup_stable_cosine_decay``: warmup 3, a stable phase, and a cosine decay over the
    last half to 0.1 of the base rate (``SCHEDULE_AND_CLIP``)."""
    spec = DENSE_NATIVE if which == "warmup_only" else SCHEDULE_AND_CLIP
    _expect_configured_schedule(require_trained(titan_runs.get(spec)), tier, record_property)


def _clipping_series(run):
    """(pre-clip norm torchtitan reported, norm of the gradients the optimizer was handed)
    per step, the latter summed over every rank's local shards."""
    per_rank = [run.optimizer_steps(r) for r in range(run.world_size)]
    steps = min(len(r) for r in per_rank)
    handed = [math.sqrt(sum(r[i]["grad_sumsq_local"] for r in per_rank)) for i in range(steps)]
    return run.grad_norms()[:steps], handed


@pytest.mark.parametrize("path", ["eager", "compiled"])
def test_optimizer_gets_the_clipped_gradients(tier, titan_runs, record_property, path):
    """With ``max_norm`` from the configuration, the gradients the optimizer is handed at each
    step have norm ``min(1, max_norm / (norm + 1e-6)) x norm`` of the pre-clip norm, on the
    eager path and with ``grad_clip`` compiled. The runs have steps above and below
    ``max_norm`` (``clipping_run``), so a loop that does not clip, or clips when it should
    not, fails."""
    spec = clipping_run(tier, compiled=path == "compiled")
    run = require_trained(titan_runs.get(spec))
    limit = training_settings.max_norm(run.resolved_config())
    pre, handed = _clipping_series(run)
    expect(len(pre) == run.spec.steps and len(handed) == run.spec.steps,
           "every step's gradients were observed", run.spec.steps, (len(pre), len(handed)), run)
    expect(any(g > limit for g in pre) and any(g < limit for g in pre),
           "the run has steps above and below max_norm (else one branch of clipping is not exercised)",
           f"norms on both sides of {limit}", pre, run)
    expected = [g * min(1.0, limit / (g + CLIP_EPS)) for g in pre]
    expect_close_series(handed, expected, tier.numerics.clip_rtol,
                        f"the optimizer is handed gradients clipped to max_norm {limit}", run,
                        record_property, detail=f"pre-clip norms (torchtitan's): {pre}")


def test_first_adamw_step_is_torchs_adamw(tier, titan_runs, record_property):
    """Step 1 from the weights and gradients the optimizer was handed, with the configured
    AdamW hyper-parameters and the schedule's step-1 rate, equals torch's single-tensor
    ``AdamW`` on a plain float32 copy, on every rank's shards (AdamW is elementwise), within
    the tier's ``optimizer_ulps`` units in the last place of each weight (before or after
    the step, the larger). At step 1 Adam's
    update is ``lr * g / (|g| + eps)`` whatever the betas, so this sees a wrong rate, eps or
    weight decay reaching the optimizer (a weight decay of 0.01 for 0.1 moves the write-up's
    weights by tens of ulps) and a changed fused kernel."""
    import torch

    run = require_trained(titan_runs.get(DENSE_NATIVE_OPTIMIZER_TENSORS))
    config = run.resolved_config()
    opt = training_settings.optimizer(config)
    lr = lr_schedule.learning_rates(opt.lr, training_settings.schedule(config), 1)[0]
    worst, worst_at, compared = 0.0, None, 0
    for rank in range(run.world_size):
        state = run.first_optimizer_step(rank)
        names = sorted({k.rsplit(".", 1)[0] for k in state}, key=lambda n: int(n[5:]))
        for name in names:
            before = state[f"{name}.before"]
            if f"{name}.grad" not in state or before.numel() == 0:
                continue
            param = torch.nn.Parameter(before.clone())
            param.grad = state[f"{name}.grad"].clone()
            torch.optim.AdamW([param], lr=lr, betas=opt.betas, eps=opt.eps,
                              weight_decay=opt.weight_decay, foreach=False, fused=False).step()
            expected = param.detach()
            # ulp at the operands' scale: where the update cancels a small weight the result's
            # own ulp is far finer than the arithmetic that produced it
            scale = torch.maximum(before.abs(), expected.abs())
            ulp = torch.nextafter(scale, torch.tensor(float("inf"))) - scale
            ulps = ((state[f"{name}.after"] - expected).abs() / ulp).max().item()
            compared += 1
            if ulps > worst:
                worst, worst_at = ulps, f"rank {rank} {name} ({tuple(before.shape)})"
    record_property("adamw_step1_max_ulps", worst)
    expect(compared > 0, "the first step's parameters were recorded", "at least one", compared, run)
    if worst > tier.numerics.optimizer_ulps:
        fail("the first optimizer step equals torch's AdamW with the configured hyper-parameters",
             f"within {tier.numerics.optimizer_ulps} ulp of every weight", f"{worst:.3g} ulp at {worst_at}",
             run, detail=f"expected from the config: lr {lr} (step 1 of the schedule), {opt}\n"
                         f"  the param groups the optimizer stepped with (probe): "
                         f"{run.optimizer_steps(0)[0]['groups'] if run.optimizer_steps(0) else 'not recorded'}")


def test_tensor_parallel_trains_like_no_tensor_parallel(tier, titan_runs, record_property):
    """A TP=2 run with sequence parallel (FSDP N/2 x TP 2 over N ranks) has the per-step loss
    and grad norm of the TP=1 run over N/2 ranks (the same FSDP degree, so the same global
    batch) from the same checkpoint, within the tier's ``tp_rtol``, for all 10 steps."""
    tp = require_trained(titan_runs.get(tensor_parallel(tier)))
    plain = require_trained(titan_runs.get(tensor_parallel_reference(tier)))
    dp_tp, dp_plain = tp.placements(0)["parallel_dims"]["dp_shard"], plain.placements(0)["parallel_dims"]["dp_shard"]
    expect(dp_tp == dp_plain, "both runs shard the data over the same FSDP degree (same global batch)",
           dp_plain, dp_tp, tp)
    steps = tp.spec.steps
    expect_close_series(tp.losses(), plain.losses()[:steps], tier.numerics.tp_rtol,
                        "TP=2 trains like TP=1 (loss)", tp, record_property, detail=f"TP=1 run: {plain.run_dir}")
    expect_close_series(tp.grad_norms(), plain.grad_norms()[:steps], tier.numerics.tp_rtol,
                        "TP=2 trains like TP=1 (grad norm)", tp, record_property, detail=f"TP=1 run: {plain.run_dir}")


def _expect_same_global_batch(wide, narrow) -> None:
    """Each rank of ``narrow`` read, as its first batch, the first rows of its group of
    ``wide``'s ranks in rank order (both recorded inside the runs): the two runs were handed
    the same global batch, and the wide run's ranks read different rows."""
    __tracebackhide__ = True
    import torch

    wide_rows = [wide.first_batch(r)["inputs"] for r in range(wide.world_size)]
    expect(len({tuple(t.flatten().tolist()) for t in wide_rows}) == len(wide_rows),
           "every rank of the wide run reads different rows", "distinct batches",
           [t[:, :6].tolist() for t in wide_rows], wide)
    group = wide.world_size // narrow.world_size
    for q in range(narrow.world_size):
        expected = torch.cat(wide_rows[q * group:(q + 1) * group])
        actual = narrow.first_batch(q)["inputs"]
        if actual.shape != expected.shape or not torch.equal(actual, expected):
            fail(f"rank {q} of the {narrow.world_size}-rank run reads the rows ranks {q * group}.."
                 f"{(q + 1) * group - 1} of the {wide.world_size}-rank run read (the same global batch)",
                 f"{tuple(expected.shape)} {expected[:, :6].tolist()}", f"{tuple(actual.shape)} {actual[:, :6].tolist()}",
                 narrow, detail=f"dataset {narrow.resolved_config()['dataloader']['dataset_path']} "
                                "(fixtures.aligned_rows: one document per row); wide run: " + wide.run_dir)


@pytest.mark.parametrize("nodes", [1, 2], ids=["one_node", "two_nodes"])
def test_all_ranks_train_like_fewer_ranks(tier, titan_runs, record_property, nodes):
    """A run on all the tier's ranks (FSDP over every rank; ``two_nodes``: as two torchrun
    agents of half the ranks each) has, at every one of its 6 steps, the loss and grad norm
    of a run on ``tier.fewer_ranks`` ranks (cpu: 1) reading the same global batch from the
    same checkpoint, within the tier's ``rank_scaling_rtol``. The global batch is held the
    same by the data (every document one row, ``fixtures.aligned_rows``) and checked from
    the batches recorded inside both runs. A gradient averaged over the wrong number of ranks
    (summed, or divided twice), a loss averaged over one rank, or a rank left out of the
    reduction makes the grad norm (and from step 2 the loss) differ by a factor."""
    wide = require_trained(titan_runs.get(rank_scaling(tier) if nodes == 1 else two_nodes(tier)))
    narrow = require_trained(titan_runs.get(rank_scaling(tier, fewer=True)))
    expect(wide.world_size > narrow.world_size, "the wide run has more ranks than the narrow one",
           f"> {narrow.world_size}", wide.world_size, wide)
    _expect_same_global_batch(wide, narrow)
    where = f"{nodes} node(s) x {wide.world_size // nodes} ranks vs 1 node x {narrow.world_size} rank(s)"
    expect_close_series(wide.losses(), narrow.losses(), tier.numerics.rank_scaling_rtol,
                        f"{where}: the same loss at every step", wide, record_property,
                        detail=f"{narrow.world_size}-rank run: {narrow.run_dir}")
    expect_close_series(wide.grad_norms(), narrow.grad_norms(), tier.numerics.rank_scaling_rtol,
                        f"{where}: the same grad norm at every step", wide, record_property,
                        detail=f"{narrow.world_size}-rank run: {narrow.run_dir}")


def test_replicated_parameters_agree_across_tp_ranks(tier, titan_runs):
    """After training, every parameter that is replicated over the TP mesh dimension (the
    norm weights among them) is bit-identical on the TP ranks holding the same FSDP shard
    (ranks r and r+1 for r even: torchtitan's mesh puts tp innermost)."""
    import json

    import torch
    from safetensors.torch import load_file

    from fixtures.rank import probe_files

    run = require_trained(titan_runs.get(tensor_parallel(tier)))
    layouts = [json.loads((run.probe_dir / probe_files.final_state_layout(r)).read_text())
               for r in range(run.world_size)]
    shards = [load_file(str(run.probe_dir / probe_files.final_state_shard(r))) for r in range(run.world_size)]
    replicated = [n for n, info in layouts[0].items() if len(info["placements"]) == 2 and info["placements"][1] == "R"]
    expect(any("norm" in n for n in replicated), "the TP run has parameters replicated over tp, norm weights "
           "among them", "norm weights", replicated[:5], run)
    differing = []
    for rank in range(0, run.world_size, 2):
        for name in replicated:
            if not torch.equal(shards[rank][name], shards[rank + 1][name]):
                diff = (shards[rank][name] - shards[rank + 1][name]).abs().max().item()
                differing.append(f"{name} (ranks {rank}/{rank + 1}, max diff {diff:.3g})")
    expect(not differing, "replicated parameters are identical across TP ranks after training",
           "none differ", differing[:10], run, detail=f"{len(replicated)} replicated tensors compared")
