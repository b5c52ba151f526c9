"""Training-loop contracts: the learning rate each step used, the clipping of the gradients
the optimizer was handed, the AdamW steps themselves, gradient accumulation against none,
and tensor parallel (and fewer ranks) against no tensor parallel.

Each expected value comes from outside the run's own bookkeeping: the schedule is computed
from the run's configuration with the suite's arithmetic (``fixtures.oracles.lr_schedule``, written
from torchtitan's documented schedule); the clipping rule is torch's documented
``clip_grad_norm_`` (scale by ``max_norm / (norm + 1e-6)`` when that is below 1) applied to
the configured ``max_norm``; the AdamW steps are torch's own single-tensor ``AdamW`` on a plain
copy of the starting weights fed the recorded gradients, with the configured param groups;
the accumulated run is held to a run reading the same global batch in one microbatch; the
TP=2 run is held to the TP=1 run of the same global batch. What the run did is observed from inside it
by global optimizer hooks and the final-state probe (``fixtures.rank.probes``).
"""

from __future__ import annotations

import math
import re

import pytest

from fixtures.oracles import adamw, lr_schedule, training_settings
from fixtures.contract import expect, expect_close_series, expect_equal, fail, require_trained
from fixtures.rank import probes
from fixtures.runs.catalogue import (DENSE_NATIVE_NO_AC, DENSE_NATIVE, DENSE_NATIVE_OPTIMIZER_TENSORS, MICROBATCHES,
                                      SCHEDULE_AND_CLIP, accumulation, clipping_run, rank_scaling,
                                      tensor_parallel,
                                      tensor_parallel_reference, two_nodes, uninterrupted)

pytestmark = [pytest.mark.training_loop, pytest.mark.slow]

# torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
CLIP_EPS = 1e-6


def _lr_series(run) -> list[float]:
    return [rec["groups"][0]["lr"] for rec in run.probe(probes.optimizer, 0)]


def _expect_configured_schedule(run, tier, record_property) -> None:
    __tracebackhide__ = True
    config = run.resolved_config()
    settings = training_settings.schedule(config)
    base = training_settings.param_groups(config)[0].lr  # the probe's group 0
    expected = lr_schedule.learning_rates(base, settings, run.spec.steps)
    actual = _lr_series(run)
    expect_close_series(actual, expected, tier.numerics.schedule_rtol,
                        "the learning rate of each step is the configured schedule's", run,
                        record_property, detail=f"schedule settings {settings}, base lr {base}")


# Every decay type torchtitan offers, each on a run the tier launches for another contract.
SCHEDULE_RUNS = {"warmup_only": lambda tier: DENSE_NATIVE, "warmup_stable_cosine_decay": lambda tier: SCHEDULE_AND_CLIP,
                 "linear_decay_to_floor": uninterrupted, "sqrt_decay_to_floor": accumulation}


@pytest.mark.parametrize("which", list(SCHEDULE_RUNS))
def test_learning_rate_follows_the_configured_schedule(tier, titan_runs, record_property, which):
    """The learning rate the optimizer used at each step (read by a pre-step hook inside the
    run) equals the schedule computed from the configuration alone (``fixtures.oracles.
    lr_schedule``, written from torchtitan's documented schedule), from step 1.
    ``warmup_only``: the write-up's schedule (warmup 600, clamped to the run's 10 steps);
    ``warmup_stable_cosine_decay``: warmup 3, a stable phase, and a cosine decay over the
    last half to 0.1 of the base rate (``SCHEDULE_AND_CLIP``); ``linear_decay_to_floor``:
    warmup 2, then linear to 0.2 (the resume contracts' run); ``sqrt_decay_to_floor``: warmup 1,
    then square root to 0.3 (the accumulation contract's run). A schedule that ignored the
    floor, or took another decay type, errs by 1e-1 of the rate or more at the last steps."""
    _expect_configured_schedule(require_trained(titan_runs.get(SCHEDULE_RUNS[which](tier))), tier, record_property)


def _clipping_series(run):
    """(pre-clip norm torchtitan reported, norm of the gradients the optimizer was handed)
    per step, the latter summed over every rank's local shards."""
    per_rank = [run.probe(probes.optimizer, r) for r in range(run.world_size)]
    steps = min(len(r) for r in per_rank)
    handed = [math.sqrt(sum(r[i]["grad_sumsq_local"] for r in per_rank)) for i in range(steps)]
    return run.grad_norms()[:steps], handed


@pytest.mark.parametrize("path", ["eager", "compiled"])
def test_optimizer_gets_the_clipped_gradients(tier, titan_runs, record_property, path):
    """With ``max_norm`` from the configuration, the gradients the optimizer is handed at each
    step have norm ``min(1, max_norm / (norm + 1e-6)) x norm`` of the pre-clip norm, on the
    eager path and with ``grad_clip`` compiled. ``max_norm`` is the median of the same model's
    unclipped norms (``clipping_run``), so the runs have steps above and below it on any model
    size, and a loop that does not clip, or clips when it should not, fails."""
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
                        "the optimizer is handed gradients clipped to the configured max_norm", run,
                        record_property, detail=f"max_norm {limit}; pre-clip norms (torchtitan's): {pre}")


def test_each_parameter_is_stepped_with_its_configured_param_group(tier, titan_runs):
    """Every parameter of every rank is in the optimizer param group the config's patterns
    give it ("Patterns are checked in order; first match wins": torchtitan's ParamGroupConfig),
    and that group holds the config's settings for it (base lr, betas, eps, weight decay), read inside
    the run at the first optimizer step. The run configures two groups as users do (the norms
    without weight decay: ``fixtures.rank.titan.suite_settings.no_decay_on_norms``), so a
    pattern matched in the wrong order, or a group given another's settings, shows. The AdamW
    contracts then replay each parameter with its own group's settings."""
    run = require_trained(titan_runs.get(DENSE_NATIVE_OPTIMIZER_TENSORS))
    groups = training_settings.param_groups(run.resolved_config())
    expect(len(groups) > 1, "the run configures more than one param group", "> 1", len(groups), run)
    used = set()
    for rank in range(run.world_size):
        first = run.probe(probes.optimizer, rank)[0]
        names, index, held = first["param_names"], first.get("param_group_index"), first["groups"]
        expect(index is not None and len(index) == len(names), f"rank {rank} recorded each parameter's group",
               f"{len(names)} indices", index, run)
        wrong = []
        for name, i in zip(names, index):
            configured = training_settings.group_of(name, groups)
            used.add(configured.pattern)
            want = configured.expected_in_optimizer()
            got = {k: held[i].get(k) for k in want}
            if got != want:
                wrong.append(f"{name}: pattern {configured.pattern!r} wants {want}, its group holds {got}")
        expect(not wrong, f"rank {rank}: every parameter is stepped with its configured group's settings",
               "none different", wrong[:5], run, detail=f"{len(wrong)} of {len(names)} parameters")
    expect(used == {g.pattern for g in groups}, "every configured group holds some parameter",
           sorted(g.pattern for g in groups), sorted(used), run)


# torchtitan's ``optimizer.implementation`` -> torch's AdamW flags for the same arithmetic
# (torchtitan/components/optimizer: "fused" sets fused=True, "foreach" foreach=True, "for-loop"
# neither). torch's fused and single-tensor AdamW round differently (measured on cpu: 2 ulp
# at step 1, 16 to 48 ulp by step 4 depending on the weights), so the reference takes the
# configured form and is then exact.
ADAMW_FORMS = {"fused": {"fused": True, "foreach": False}, "foreach": {"fused": False, "foreach": True},
               "for-loop": {"fused": False, "foreach": False}}


def _adamw_form(config: dict) -> dict:
    implementation = config["optimizer"].get("implementation", "for-loop")
    if implementation not in ADAMW_FORMS:
        pytest.fail(f"optimizer.implementation={implementation!r} has no torch AdamW form to compare with "
                    f"(known: {sorted(ADAMW_FORMS)})")
    return ADAMW_FORMS[implementation]


def _adamw_reference(run, rank: int, steps: int, groups: list[training_settings.GroupSettings], schedule, **changed):
    """(index -> [the reference's weights after each step]) for rank ``rank``: torch's
    AdamW, in the form the config's ``optimizer.implementation`` names, on plain float32
    copies of the weights the run started from, fed the gradients the run recorded at each
    step, with each parameter's configured group's hyper-parameters (``changed`` overrides
    them, to measure what each one moves) and the schedule's rate at that step."""
    import torch

    names = run.probe(probes.optimizer, rank)[0]["param_names"]
    first = run.probe(probes.optimizer_tensors, rank, step=1)
    form = _adamw_form(run.resolved_config())
    out = {}
    for i in sorted({int(k.split(".")[0][5:]) for k in first}):
        before = first[f"param{i}.before"]
        if before.numel() == 0 or f"param{i}.grad" not in first:
            continue
        group = training_settings.group_of(names[i], groups)
        param = torch.nn.Parameter(before.clone())
        optimizer = torch.optim.AdamW([param], lr=group.lr, **form, **{**group.adamw_kwargs(), **changed})
        rates = lr_schedule.learning_rates(group.lr, schedule, steps)
        trajectory = []
        for step in range(1, steps + 1):
            param.grad = run.probe(probes.optimizer_tensors, rank, step=step)[f"param{i}.grad"].clone()
            optimizer.param_groups[0]["lr"] = rates[step - 1]
            optimizer.step()
            trajectory.append(param.detach().clone())
        out[i] = trajectory
    return out


def _worst_ulps(run, rank: int, steps: int, reference: dict) -> tuple[float, str]:
    """The largest distance, in units in the last place of the weight (before or after the
    step, the larger: where the update cancels a small weight the result's own ulp is far finer
    than the arithmetic that produced it), between the run's weights after each step and the
    reference's, and where it is."""
    import torch

    names = run.probe(probes.optimizer, rank)[0]["param_names"]
    worst, where = 0.0, "nowhere"
    for step in range(1, steps + 1):
        recorded = run.probe(probes.optimizer_tensors, rank, step=step)
        for i, trajectory in reference.items():
            before = trajectory[step - 2] if step > 1 else recorded[f"param{i}.before"]
            expected, actual = trajectory[step - 1], recorded[f"param{i}.after"]
            scale = torch.maximum(before.abs(), expected.abs())
            ulp = torch.nextafter(scale, torch.tensor(float("inf"))) - scale
            ulps = ((actual - expected).abs() / ulp).max().item()
            if ulps > worst:
                worst, where = ulps, f"rank {rank} step {step} {names[i]} ({tuple(expected.shape)})"
    return worst, where




def _adamw_run(titan_runs):
    """The run whose first optimizer steps are recorded, its configured param groups, its
    schedule's settings and the number of recorded steps."""
    run = require_trained(titan_runs.get(DENSE_NATIVE_OPTIMIZER_TENSORS))
    config = run.resolved_config()
    return run, training_settings.param_groups(config), training_settings.schedule(config), run.spec.record_optimizer_steps

def _expect_adamw_within(run, contract: str, tolerance: float, unit: str, worst: float, worst_at: str,
                         compared: int, detail: str) -> None:
    """Fail ``contract`` when the largest distance of the run's weights from a reference
    exceeds ``tolerance``, saying where, with the config's param groups and schedule."""
    __tracebackhide__ = True
    expect(compared > 0, "the optimizer steps' parameters were recorded", "at least one", compared, run)
    if worst > tolerance:
        config = run.resolved_config()
        fail(contract, f"within {tolerance} {unit} of every weight", f"{worst:.3g} {unit} at {worst_at}", run,
             detail=f"expected from the config: param groups {config['optimizer']['param_groups']}, schedule "
                    f"{training_settings.schedule(config)}\n{detail}")

# What a regression of each hyper-parameter plausibly gives: torch's AdamW defaults for betas
# and weight decay; for eps, which the write-up sets to torch's default, a hundredfold one.
IGNORED_HYPERPARAMETERS = {"betas": {"betas": (0.9, 0.999)}, "weight_decay": {"weight_decay": 0.01},
                           "eps": {"eps": 1e-6}}


def test_adamw_steps_are_torchs_adamw(tier, titan_runs, record_property):
    """Steps 1 to ``ADAMW_STEPS`` of the run equal torch's ``AdamW`` (in the form the config's
    ``optimizer.implementation`` names, ``ADAMW_FORMS``) run on a plain float32 copy of the weights the run started from, fed the gradients each rank
    recorded at each step, with each parameter's configured param group (first matching
    ``pattern``: betas, eps, weight decay) and the schedule's rate at each step, on every
    rank's shards (AdamW is elementwise), within the tier's ``optimizer_ulps`` of every weight
    after every step. Past step 1 Adam's update depends on betas (step 1's is about ``lr *
    sign(g)`` whatever they are), so an optimizer ignoring the configured betas, eps or weight
    decay moves the weights measurably: the contract computes what each would have given
    (``IGNORED_HYPERPARAMETERS``) and requires it to be farther than the tolerance, so it could
    see each one. Every parameter the rank holds is in the optimizer."""
    run, groups, schedule, steps = _adamw_run(titan_runs)
    worst, worst_at, compared = 0.0, None, 0
    power = {name: float("inf") for name in IGNORED_HYPERPARAMETERS}
    for rank in range(run.world_size):
        first = run.probe(probes.optimizer, rank)[0]
        expect(first.get("model_params_not_in_optimizer") == [],
               f"rank {rank}'s optimizer holds every parameter of its model", "none left out",
               first.get("model_params_not_in_optimizer"), run)
        reference = _adamw_reference(run, rank, steps, groups, schedule)
        compared += len(reference)
        ulps, where = _worst_ulps(run, rank, steps, reference)
        if ulps > worst:
            worst, worst_at = ulps, where
        if rank == 0:
            for name, change in IGNORED_HYPERPARAMETERS.items():
                power[name] = _worst_ulps(run, rank, steps, _adamw_reference(run, rank, steps, groups,
                                                                            schedule, **change))[0]
    record_property("adamw_max_ulps", worst)
    for name, ulps in power.items():
        record_property(f"adamw_ulps_if_{name}_were_ignored", ulps)
    _expect_adamw_within(run, f"optimizer steps 1..{steps} equal torch's AdamW with the configured param groups",
                         tier.numerics.optimizer_ulps, "ulp", worst, worst_at, compared,
                         f"  the param groups the optimizer stepped with (probe): "
                         f"{[r['groups'] for r in run.probe(probes.optimizer, 0)[:steps]]}\n"
                         f"  distance had each hyper-parameter been ignored: {power}")
    blind = {name: ulps for name, ulps in power.items() if ulps <= tier.numerics.optimizer_ulps}
    expect(not blind, f"over {steps} steps, ignoring betas, eps or weight decay moves some weight by more "
           "than the tolerance (else this contract could not see it)",
           f"> {tier.numerics.optimizer_ulps} ulp for each", blind, run)



def _formula_distance(run, rank: int, steps: int, groups: list[training_settings.GroupSettings], schedule, **changed) -> tuple[float, str, int]:
    """The largest distance (``fixtures.oracles.adamw.distance``) over steps 1..``steps`` between
    rank ``rank``'s weights and AdamW written from its paper in float64 on the same gradients,
    with each parameter's configured group (``changed`` overrides its settings), where it is,
    and how many parameters were compared."""
    names = run.probe(probes.optimizer, rank)[0]["param_names"]
    dumps = [run.probe(probes.optimizer_tensors, rank, step=step) for step in range(1, steps + 1)]
    worst, where, compared = 0.0, "nowhere", 0
    for i in sorted({int(k.split(".")[0][5:]) for k in dumps[0]}):
        before = dumps[0][f"param{i}.before"]
        if before.numel() == 0 or f"param{i}.grad" not in dumps[0]:
            continue
        group = training_settings.group_of(names[i], groups)
        settings = adamw.AdamWSettings(**{**group.adamw_kwargs(), **changed})
        rates = lr_schedule.learning_rates(group.lr, schedule, steps)
        expected = adamw.replay(before, [d[f"param{i}.grad"] for d in dumps], rates, settings)
        compared += 1
        for step, dump in enumerate(dumps, start=1):
            start = dump[f"param{i}.before"] if step == 1 else expected[step - 2]
            distance, at = adamw.distance(dump[f"param{i}.after"], expected[step - 1], start.float(), rates[step - 1])
            if distance > worst:
                worst, where = distance, f"rank {rank} step {step} {names[i]} element {at}"
    return worst, where, compared


def test_adamw_steps_are_the_papers_adamw_in_float64(tier, titan_runs, record_property):
    """Steps 1 to ``ADAMW_STEPS`` of the run equal AdamW as its paper writes it (Loshchilov &
    Hutter, Algorithm 2, in torch's documented form: ``fixtures.oracles.adamw``), computed in
    float64 with elementwise arithmetic from the weights the run started from and the gradients
    each rank recorded, with each parameter's configured group and the schedule's rate: within
    the tier's ``optimizer_formula_ulps`` (units of one ulp of the weight plus 2^-24 of the
    step's learning rate: ``fixtures.oracles.adamw.distance``) on every rank's shards. Unlike ``test_adamw_steps_are_torchs_adamw``, whose
    reference runs torch's own AdamW kernel, this oracle shares no code with the run's
    optimizer, so a regression inside torch's fused AdamW shows here. The contract also
    computes what an optimizer whose second moment used beta1 (a bias-correction or moment
    regression of the kernel) would give, and requires it to be farther than the tolerance."""
    run, groups, schedule, steps = _adamw_run(titan_runs)
    worst, worst_at, compared = 0.0, "nowhere", 0
    for rank in range(run.world_size):
        distance, where, count = _formula_distance(run, rank, steps, groups, schedule)
        compared += count
        if distance > worst:
            worst, worst_at = distance, where
    betas = groups[0].betas
    power = _formula_distance(run, 0, steps, groups, schedule, betas=(betas[0], betas[0]))[0]
    record_property("adamw_formula_max_units", worst)
    record_property("adamw_formula_units_if_beta2_were_beta1", power)
    _expect_adamw_within(run, f"optimizer steps 1..{steps} equal AdamW written from its paper, in float64",
                         tier.numerics.optimizer_formula_ulps, "units", worst, worst_at, compared,
                         "  the oracle shares no kernel with torch.optim (fixtures/oracles/adamw.py)")
    expect(power > tier.numerics.optimizer_formula_ulps, "an AdamW whose second moment used beta1 would be "
           "farther than the tolerance (else this contract could not see such a regression)",
           f"> {tier.numerics.optimizer_formula_ulps}", power, run)


def _microbatches(run, rank: int = 0) -> dict[int, list[dict]]:
    """Rank ``rank``'s forwards by step."""
    by_step: dict[int, list[dict]] = {}
    for record in run.probe(probes.batches, rank):
        by_step.setdefault(record["step"], []).append(record)
    return by_step


def test_accumulation_trains_like_one_microbatch(tier, titan_runs, record_property):
    """A global batch read as ``MICROBATCHES`` microbatches per rank per step (gradient
    accumulation) trains like the same global batch read as one microbatch of twice the
    rows: at every step each rank reads the same rows (the accumulated microbatches' rows, in
    order, are the single microbatch's), the loss is normalised by the same global token
    count (every rank's valid labels of every microbatch: torchtitan's
    ``global_valid_tokens``), and the loss and grad norm agree within the tier's
    ``accumulation_rtol``. A loss normalised per microbatch makes the gradient scale with the
    number of microbatches, and the grad norm differ by that factor."""
    accumulated = require_trained(titan_runs.get(accumulation(tier)))
    single = require_trained(titan_runs.get(accumulation(tier, microbatches=1)))
    steps = accumulated.spec.steps
    for run, want in ((accumulated, MICROBATCHES), (single, 1)):
        counts = {step: len(records) for step, records in _microbatches(run).items()}
        expect_equal(f"{run.spec.describe()}: microbatches per step on rank 0",
                     {step: want for step in range(1, steps + 1)}, counts, run)
    for rank in range(accumulated.world_size):
        a_rows = {s: [row for r in recs for row in r["rows"]] for s, recs in _microbatches(accumulated, rank).items()}
        s_rows = {s: [row for r in recs for row in r["rows"]] for s, recs in _microbatches(single, rank).items()}
        expect_equal(f"rank {rank}: the accumulated microbatches hold the single microbatch's rows, step by step",
                     s_rows, a_rows, accumulated, detail=f"single-microbatch run: {single.run_dir}")
    for step in range(1, steps + 1):
        def calls(run):
            return [c for r in range(run.world_size) for c in run.probe(probes.loss_calls, r) if c["step"] == step]

        a_calls, s_calls = calls(accumulated), calls(single)
        counted = sum(c["local_tokens"] for c in s_calls)
        expect_equal(f"step {step}: the single-microbatch run normalises by every rank's valid tokens",
                     {float(counted)}, {c["global_tokens"] for c in s_calls}, single)
        expect_equal(f"step {step}: every accumulated microbatch's loss is normalised by the whole step's "
                     "valid tokens, as without accumulation", {float(counted)},
                     {c["global_tokens"] for c in a_calls}, accumulated,
                     detail=f"valid tokens per microbatch: {[c['local_tokens'] for c in a_calls]}")
    expect_close_series(accumulated.losses(), single.losses(), tier.numerics.accumulation_rtol,
                        f"{MICROBATCHES} microbatches per step train like one (loss)", accumulated,
                        record_property, detail=f"single-microbatch run: {single.run_dir}")
    expect_close_series(accumulated.grad_norms(), single.grad_norms(), tier.numerics.accumulation_rtol,
                        f"{MICROBATCHES} microbatches per step train like one (grad norm)", accumulated,
                        record_property, detail=f"single-microbatch run: {single.run_dir}")


def test_tensor_parallel_trains_like_no_tensor_parallel(tier, titan_runs, record_property):
    """A TP=2 run with sequence parallel (FSDP N/2 x TP 2 over N ranks) has the per-step loss
    and grad norm of the TP=1 run over N/2 ranks (the same FSDP degree, so the same global
    batch) from the same checkpoint, within the tier's ``tp_rtol`` (loss) and ``tp_grad_rtol``
    (grad norm), for all 10 steps."""
    tp = require_trained(titan_runs.get(tensor_parallel(tier)))
    plain = require_trained(titan_runs.get(tensor_parallel_reference(tier)))
    dp_tp, dp_plain = tp.probe(probes.parallel, 0)["parallel_dims"]["dp_shard"], plain.probe(probes.parallel, 0)["parallel_dims"]["dp_shard"]
    expect(dp_tp == dp_plain, "both runs shard the data over the same FSDP degree (same global batch)",
           dp_plain, dp_tp, tp)
    steps = tp.spec.steps
    expect_close_series(tp.losses(), plain.losses()[:steps], tier.numerics.tp_rtol,
                        "TP=2 trains like TP=1 (loss)", tp, record_property, detail=f"TP=1 run: {plain.run_dir}")
    expect_close_series(tp.grad_norms(), plain.grad_norms()[:steps], tier.numerics.tp_grad_rtol,
                        "TP=2 trains like TP=1 (grad norm)", tp, record_property, detail=f"TP=1 run: {plain.run_dir}")


def _head(tokens) -> list:
    """The first 6 tokens of each row (``[batch, seq]``), or of the folded stream (``[tokens]``)."""
    return tokens[..., :6].tolist()


def _expect_same_global_batch(wide, narrow) -> None:
    """Each rank of ``narrow`` read, as its first batch, the first rows of its group of
    ``wide``'s ranks in rank order (both recorded inside the runs): the two runs were handed
    the same global batch, and the wide run's ranks read different rows."""
    __tracebackhide__ = True
    import torch

    wide_rows = [wide.probe(probes.batch, r)["inputs"] for r in range(wide.world_size)]
    expect(len({tuple(t.flatten().tolist()) for t in wide_rows}) == len(wide_rows),
           "every rank of the wide run reads different rows", "distinct batches",
           [_head(t) for t in wide_rows], wide)
    group = wide.world_size // narrow.world_size
    for q in range(narrow.world_size):
        expected = torch.cat(wide_rows[q * group:(q + 1) * group])
        actual = narrow.probe(probes.batch, q)["inputs"]
        if actual.shape != expected.shape or not torch.equal(actual, expected):
            fail(f"rank {q} of the {narrow.world_size}-rank run reads the rows ranks {q * group}.."
                 f"{(q + 1) * group - 1} of the {wide.world_size}-rank run read (the same global batch)",
                 f"{tuple(expected.shape)} {_head(expected)}", f"{tuple(actual.shape)} {_head(actual)}",
                 narrow, detail=f"dataset {narrow.resolved_config()['dataloader']['dataset_path']} "
                                "(fixtures.data.aligned_rows: one document per row); wide run: " + wide.run_dir)


@pytest.mark.parametrize("nodes", [1, 2], ids=["one_node", "two_nodes"])
def test_all_ranks_train_like_fewer_ranks(tier, titan_runs, record_property, nodes):
    """A run on all the tier's ranks (FSDP over every rank; ``two_nodes``: as two torchrun
    agents of half the ranks each) has, at every one of its 6 steps, the loss and grad norm
    of a run on ``tier.fewer_ranks`` ranks (cpu: 1) reading the same global batch from the
    same checkpoint, within the tier's ``rank_scaling_rtol``. The global batch is held the
    same by the data (every document one row, ``fixtures.data.aligned_rows``) and checked from
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
    import torch

    run = require_trained(titan_runs.get(tensor_parallel(tier)))
    layouts = [run.probe(probes.final_state.LAYOUT, r)
               for r in range(run.world_size)]
    shards = [run.probe(probes.final_state.SHARD, r) for r in range(run.world_size)]
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


# How an allocation failure reads: torch's ``OutOfMemoryError`` ("... out of memory ..."), the
# rehearsal's per-core cap (neuron_standins) and the Neuron runtime's allocation failures.
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|Failed to allocate", re.IGNORECASE)

# The write-up's native config starts from torchtitan's qwen3_32b(), which sets full activation
# checkpointing (``activation_checkpoint=FullAC.Config()``, torchtitan models/qwen3/config_registry.py;
# CONTRACTS.md "The three paths"): each block keeps only its input and runs its forward again in
# the backward. torch.utils.checkpoint's documented contract: the checkpointed function is re-run
# during the backward pass.
FULL_AC_FORWARDS_PER_MICROBATCH = 2


def test_activation_checkpointing_recomputes_every_block(tier, titan_runs):
    """With full activation checkpointing configured, every transformer block's forward runs
    twice per microbatch on every rank: once in the forward pass, once again in the backward
    (counted inside the ranks on each block's inner module, under its checkpoint wrapper). A
    wrapper that stops recomputing keeps its module names, losses and memory fit; this is what
    it breaks. Eager run: a compiled graph recomputes inside the graph, unseen by the hooks."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    for rank in range(run.world_size):
        steps = run.probe(probes.block_calls, rank)
        expect_equal(f"rank {rank} counted the forward passes of every step", list(range(1, run.spec.steps + 1)),
                     [s["step"] for s in steps], run)
        for record in steps:
            expect(record["model"] > 0 and record["blocks"], f"rank {rank} step {record['step']}: the model and its "
                   "blocks ran forward", "> 0 passes and blocks", record, run)
            wrong = {block: n for block, n in sorted(record["blocks"].items())
                     if n != FULL_AC_FORWARDS_PER_MICROBATCH * record["model"]}
            expect_equal(f"rank {rank} step {record['step']}: every block ran its forward "
                         f"{FULL_AC_FORWARDS_PER_MICROBATCH} times per microbatch (forward, and again in the "
                         "backward: full activation checkpointing)", {}, wrong, run,
                         detail=f"{record['model']} microbatch(es) this step")


def test_activation_checkpointing_saves_less_for_the_backward(titan_runs, record_property):
    """Full activation checkpointing in effect, across two runs: in each rank's first training
    forward, what autograd saves for the backward (its own ``saved_tensors_hooks``, counted
    inside the ranks) is less with the write-up's full AC than in the same run without it
    (``activation_checkpoint=None``), where every block keeps its activations. It sees what
    autograd keeps outside the checkpointed blocks (a wrapper that stops checkpointing, or
    wraps less than the block); tensors a selective-checkpoint policy caches itself are not
    autograd's saved tensors and are not counted. Eager runs: a compiled graph saves its
    tensors itself."""
    with_ac = require_trained(titan_runs.get(DENSE_NATIVE))
    refused = titan_runs.refused_by_plan(DENSE_NATIVE_NO_AC)
    if refused is not None:
        # a model whose activations without AC are planned above a core (Qwen3-4B on a NeuronCore)
        # is refused before launch instead of compiling to run out of memory: the plan's figures,
        # which count every layer's activations, are the evidence that AC is what makes it fit
        record_property("the run without activation checkpointing", refused)
        expect("without full checkpointing" in refused and "activations" in refused,
               "the run without activation checkpointing is refused for its activations, the one with it trains",
               "a refusal naming the activations", refused, with_ac)
        return
    without = titan_runs.get(DENSE_NATIVE_NO_AC)
    if not without.ok and not probes.saved_for_backward.SPEC.path(without.probe_dir, 0).exists():
        # a model that does not fit without AC (a 4B model in a NeuronCore's memory) shows it
        # by running out of memory in that first forward: the evidence, if that is how it died
        failure = without.failure_text()
        expect(OUT_OF_MEMORY.search(failure) is not None, "the run without activation checkpointing recorded "
               "its first forward, or ran out of device memory in it", "a record, or an out-of-memory error",
               failure[:2000], without)
        return
    for rank in range(with_ac.world_size):
        kept, full = with_ac.probe(probes.saved_for_backward, rank)["bytes"], without.probe(probes.saved_for_backward, rank)["bytes"]
        record_property(f"rank {rank}: bytes saved for the backward, full AC / none", f"{kept} / {full}")
        expect(0 < kept < full, f"rank {rank}: full activation checkpointing saves less for the backward than none",
               f"fewer than the {full} bytes saved without it", kept, with_ac,
               detail=f"reference run without AC: {without.run_dir}")
