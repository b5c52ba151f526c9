"""The memory plan (``fixtures.runs.memory_plan``, ``fixtures.runs.model_size``): parameter
counts against transformers' own Qwen3 and the published Qwen3-4B size, the fp32 state per
rank and the refusal of a run that cannot fit, ``--plan``'s memory rows on the hosts of the
rehearsal matrix, and the rehearsal's core planned for the model it runs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fixtures.launch import kernel_worker
from fixtures.rank.model_shapes import QWEN3_4B_INSTRUCT_2507, TINY
from fixtures.repo import REPO_ROOT as REPO
from fixtures.rank.titan import config_shapes
from fixtures.runs import memory_plan, model_size, session_plan
from fixtures.runs.catalogue import CATALOGUE, DENSE_NATIVE, DENSE_NATIVE_NO_AC, HF_BACKEND_LOAD_TIED
from fixtures.tiers import topology
from fixtures.tiers.rehearsal import REHEARSAL_MEMORY_ENV
from fixtures.tiers.tier_profile import on_paper, trn2_profile

pytestmark = pytest.mark.meta

QWEN3_4B_DIR = REPO / "meta_tests" / "models" / "Qwen3-4B-Instruct-2507"
GIB = 2**30
POD_CORES = [16, 17]  # neuron_standins/hosts/eks-pod-two-cores.json


def _transformers_count(hf: dict, moe: bool = False) -> int:
    import torch
    import transformers

    config = (transformers.Qwen3MoeConfig if moe else transformers.Qwen3Config)(**hf)
    with torch.device("meta"):
        model = (transformers.Qwen3MoeForCausalLM if moe else transformers.Qwen3ForCausalLM)(config)
    return sum(p.numel() for p in model.parameters())  # a tied lm_head is the embedding: counted once


TINY_CONFIGS = [
    dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
         num_key_value_heads=2, head_dim=24, tie_word_embeddings=tied, attention_bias=bias)
    for tied in (True, False) for bias in (False, True)
] + [{**TINY.to_hf(), "tie_word_embeddings": True}]


@pytest.mark.parametrize("hf", TINY_CONFIGS, ids=lambda hf: f"tied{hf['tie_word_embeddings']}-bias{hf.get('attention_bias')}"
                         f"-hd{hf['head_dim']}")
def test_the_dense_count_is_transformers_count(hf):
    """Tied or not, with attention biases or not, a head_dim that is not hidden/heads: the
    count from config.json is the number of parameters transformers' Qwen3ForCausalLM builds."""
    assert model_size.dense_parameters(hf) == _transformers_count(hf)


def test_the_moe_count_is_transformers_count():
    """The write-up's MoE shape (4 layers of 64 experts, untied) against Qwen3MoeForCausalLM
    built with the same numbers."""
    hf = dict(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
              num_hidden_layers=model_size.MOE_LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              tie_word_embeddings=False, num_experts=model_size.MOE_EXPERTS,
              num_experts_per_tok=model_size.MOE_TOP_K)
    assert model_size.moe_parameters(hf) == _transformers_count(hf, moe=True)


def test_qwen3_4b_has_its_published_size():
    """Qwen3-4B-Instruct-2507's model card: 4.0 B parameters, 3.6 B without the embedding (the
    GGUF metadata of the same weights: 4.02 B); transformers builds the same count from the
    fixture's config.json; its fp32 state (weights, gradients, two AdamW moments) is 64.4 GB."""
    hf = json.loads((QWEN3_4B_DIR / "config.json").read_text())
    assert hf == QWEN3_4B_INSTRUCT_2507  # the fixture is the suite's recorded config, not a variant
    total = model_size.dense_parameters(hf)
    assert total == 4_022_468_096 == _transformers_count({k: v for k, v in hf.items() if k != "model_type"})
    assert round((total - model_size.embedding_parameters(hf)) / 1e9, 1) == 3.6
    assert round(total * memory_plan.STATE_BYTES_PER_PARAMETER / 1e9, 1) == 64.4


def _trn2(tmp_path, cores=None, instance="trn2.48xlarge"):
    return trn2_profile(instance, 2, QWEN3_4B_DIR, cores=cores)


def test_qwen3_4b_on_two_cores_is_refused_with_the_figures(tmp_path):
    """On two logical cores (the EKS pod of the matrix) every Qwen3-4B run's fp32 state is
    32.2 GB (29.97 GiB) a rank, above the 24 GiB of a core at LNC=2: the run cache's check
    refuses it before launch, naming the figures, the expectation and the culprit."""
    tier = _trn2(tmp_path, cores=POD_CORES)
    assert tier.device_memory_bytes == 24 * GIB == topology.logical_core_memory_bytes(2)
    planned = memory_plan.memory_plan(DENSE_NATIVE, tier, QWEN3_4B_INSTRUCT_2507)
    assert round(planned.state / 1e9, 1) == 32.2 and not planned.fits
    with pytest.raises(memory_plan.DoesNotFit) as refused:
        memory_plan.check_memory(DENSE_NATIVE, tier)
    message = str(refused.value)
    for part in ("dense_native steps=10 was not launched", "16 bytes x 4.022 B parameters = 64.36 GB",
                 "over its 2 ranks is 29.97 GiB a rank, above the 24 GiB of one logical NeuronCore",
                 "expected: state per rank <= core memory", "culprit:", "at least 3 logical cores"):
        assert part in message, message


def test_the_plan_on_each_host_says_which_runs_do_not_fit(tmp_path):
    """trn2.48xlarge (64 ranks): every run fits but the one without activation checkpointing
    (its attention scores, ASSUMED materialised by the Neuron SDPA kernel, and every layer's
    activations: 97 GiB a rank); trn2.3xlarge (4 ranks): the 2-rank runs' state alone does not
    fit, and the MoE, transformers-backend, unaccumulated and no-AC runs are planned above the
    core; the pod's 2 cores: none fits."""
    big = session_plan.plan(CATALOGUE, _trn2(tmp_path))
    assert {n for p in big.not_fitting() for n in p.names} == {"dense_native_no_ac"}
    dense = next(p for p in big.launches if "dense_native" in p.names)
    assert round(dense.memory.state / GIB, 2) == 0.94 and dense.memory.fits
    small = session_plan.plan(CATALOGUE, _trn2(tmp_path, instance="trn2.3xlarge"))
    refused = {n for p in small.not_fitting() for n in p.names}
    assert refused == {"dense_native_no_ac", "hf_backend_as_upstream", "hf_backend_rotary_fixed", "moe_native",
                       "moe_native_validated", "not_accumulated", "rank_scaling_fewer_ranks",
                       "tensor_parallel_reference"}
    assert {n for p in small.launches if not p.memory.state_fits for n in p.names} == {
        "rank_scaling_fewer_ranks", "tensor_parallel_reference"}
    pod = session_plan.plan(CATALOGUE, _trn2(tmp_path, cores=POD_CORES))
    assert len(pod.not_fitting()) == len(pod.launches)
    text = small.text()
    assert ("memory: 8 of 29 launches do not fit and are refused before launch: dense_native_no_ac, "
            "hf_backend_as_upstream, hf_backend_rotary_fixed, moe_native, moe_native_validated, not_accumulated, "
            "rank_scaling_fewer_ranks, tensor_parallel_reference") in text, text
    assert "2 ranks  42.2 GiB a rank of 24 GiB: DOES NOT FIT (its state alone) (runtime 1.5 GiB + state 29.97 GiB" in text, text


def test_each_rank_counts_the_runtimes_own_memory(tmp_path):
    """On a Neuron core the plan adds what the runtime holds outside the tensors (device-memory.rst):
    96 MB of micro-code per physical core (two at LNC=2, one at LNC=1), and the scratchpad,
    constants, DMA rings and collectives, ASSUMED and said so; a rehearsal's own plan adds
    nothing (its stand-in device counts the allocator's bytes only)."""
    from fixtures.runs import runtime_memory

    for lnc in (1, 2):
        tier = trn2_profile("trn2.48xlarge", lnc, QWEN3_4B_DIR)
        planned = memory_plan.memory_plan(DENSE_NATIVE, tier, memory_plan.model_config(tier))
        code = next(c for c in planned.runtime if c.name == "model_code")
        assert code.bytes == lnc * 96 * 2**20 and not code.source.startswith("ASSUMED")
        assert runtime_memory.assumed(planned.runtime) == ["model_shared_scratchpad", "constants", "dma_rings",
                                                           "collectives"]
        without = memory_plan.memory_plan(DENSE_NATIVE, tier, memory_plan.model_config(tier), capacity=0)
        assert planned.total == without.total and planned.runtime_bytes > 0
    text = session_plan.plan(CATALOGUE, _trn2(tmp_path)).text()
    assert ("memory: every rank's plan counts the runtime's 1.5 GiB (micro-code documented; "
            "model_shared_scratchpad, constants, dma_rings, collectives ASSUMED) of its core") in text, text
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps({**TINY.to_hf(), "model_type": "qwen3", "tie_word_embeddings": True}))
    rehearsal = trn2_profile("trn2.48xlarge", 2, tiny, rehearsal=True, seq_len=256)
    assert memory_plan.memory_plan(DENSE_NATIVE, rehearsal, memory_plan.model_config(rehearsal), 1).runtime == ()


@pytest.mark.parametrize("instance,cores", [("trn2.48xlarge", None), ("trn2.3xlarge", None),
                                            ("trn2.48xlarge", POD_CORES)], ids=["48xlarge", "3xlarge", "pod"])
def test_no_run_planned_above_a_core_is_launched(tmp_path, instance, cores):
    """Every launch the plan says does not fit is refused by the check before launch
    (``check_memory``: the run cache calls it before every launch), and every other passes it;
    the refusal names a model of the same width that fits, and that model does fit while one
    more layer would not."""
    tier = _trn2(tmp_path, cores=cores, instance=instance)
    hf = memory_plan.model_config(tier)
    for launch in session_plan.plan(CATALOGUE, tier).launches:
        if launch.memory.fits:
            memory_plan.check_memory(launch.spec, tier)
            continue
        with pytest.raises(memory_plan.DoesNotFit) as refused:
            memory_plan.check_memory(launch.spec, tier)
        fitting = memory_plan.fitting_model(launch.spec, tier, hf, tier.device_memory_bytes)
        assert fitting and fitting in str(refused.value), str(refused.value)
        layers = int(fitting.split("with at most ")[1].split(" layers")[0])
        built = config_shapes.shape_of(launch.spec.config)
        twin = dataclasses.replace(launch.spec, config="dense_native") if built.moe or built.more_layers_than \
            else launch.spec
        assert memory_plan.memory_plan(twin, tier, {**hf, "num_hidden_layers": layers}).fits
        if layers < hf["num_hidden_layers"]:
            assert not memory_plan.memory_plan(twin, tier, {**hf, "num_hidden_layers": layers + 1}).fits


def test_the_transformers_backend_is_planned_by_its_attention_and_selective_checkpointing(tmp_path):
    """The transformers backend's flex attention keeps no scores, and torchtitan's selective AC
    keeps each layer's input, every other matmul output and the attention output: Qwen3-4B on
    the write-up's 64 ranks fits a core (the write-up trained it there), where planning it as
    no AC with materialised scores gave about 100 GiB a rank."""
    tier = _trn2(tmp_path)
    hf = QWEN3_4B_INSTRUCT_2507
    backend = memory_plan.memory_plan(HF_BACKEND_LOAD_TIED, tier, hf)
    h, q, kv, inner = 2560, 32 * 128, 8 * 128, 9728
    kept = 2 * 4096 * (h + (q + kv + inner + h) + q)
    assert memory_plan.layer_selective_bytes(backend.shape) == kept
    assert backend.activations == 36 * kept + memory_plan.layer_activation_bytes(backend.shape)
    assert not backend.shape.attention_scores and backend.fits


def test_full_activation_checkpointing_keeps_one_input_per_layer(tmp_path):
    """With full AC a layer keeps its input (2 * seq * batch * hidden bytes, Korthikanti et al.
    section 4.2) and one layer is recomputed; without, every layer keeps all of its activations."""
    tier = _trn2(tmp_path)
    hf = QWEN3_4B_INSTRUCT_2507
    full = memory_plan.memory_plan(DENSE_NATIVE, tier, hf)
    none = memory_plan.memory_plan(DENSE_NATIVE_NO_AC, tier, hf)
    layer = memory_plan.layer_activation_bytes(full.shape)
    assert full.activations == 36 * 2 * 4096 * 2560 + layer
    assert none.activations == 36 * layer and full.state == none.state


def test_the_rehearsal_core_is_planned_for_the_model_it_runs(tmp_path, monkeypatch):
    """The rehearsal's ranks get twice the largest planned peak of the tiny model's training
    runs on the host (the stand-in device reads it from their environment), so the plan fits
    there and a rank holding more than twice its plan does not; the kernel device worker gets
    a real core's memory (the kernel contracts call the vendor's real shapes)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY.to_hf(), "model_type": "qwen3", "tie_word_embeddings": True}))
    for cores in (None, POD_CORES):
        tier = session_plan.with_rehearsal_memory(trn2_profile("trn2.48xlarge", 2, folder, rehearsal=True, seq_len=256,
                                                               cores=cores))
        planned = session_plan.plan(CATALOGUE, tier)
        peak = max(memory_plan.memory_plan(CATALOGUE.launch_of(e.build(tier), tier), tier, memory_plan.model_config(tier)).total
                   for e in CATALOGUE.entries(tier) if e.trains)
        assert tier.device_memory_bytes == int(2 * peak) == int(dict(tier.rank_env)[REHEARSAL_MEMORY_ENV])
        assert dict(tier.kernel_env)[REHEARSAL_MEMORY_ENV] == str(24 * GIB)
        monkeypatch.setattr(kernel_worker, "_settings", kernel_worker._settings)  # restored after the test
        kernel_worker.configure(tier)  # the worker's environment: the kernel's cap over the ranks'
        assert dict(kernel_worker._settings.env)[REHEARSAL_MEMORY_ENV] == str(24 * GIB)
        assert not planned.not_fitting() and tier.device_memory_bytes < 64 << 20
    paper = on_paper(tier, QWEN3_4B_DIR)
    assert (paper.nproc_per_node, paper.first_core, paper.seq_len, paper.device_memory_bytes) == (2, 16, 4096, 24 * GIB)


@pytest.mark.parametrize("host", ["eks-pod-two-cores", "trn2.48xlarge"])
def test_a_rehearsal_plans_the_model_dir_on_paper(tmp_path, host):
    """``--plan --trn2-model-dir <Qwen3-4B config.json only> --neuron-dress-rehearsal``: the
    rehearsal's own plan (its tiny model, its planned core) and the given model's memory per
    rank on the host at a real core's memory, saying which runs would not fit."""
    from meta_tests import rehearsal_env

    proc = rehearsal_env.rehearsal_pytest(
        tmp_path, "conformance/test_topology.py", "-m", "trn2 and topology and not slow",
        "--neuron-dress-rehearsal", "--rehearsal-host", host, "--report-dir", str(tmp_path / "report"),
        "--plan", "--trn2-model-dir", str(QWEN3_4B_DIR))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "memory per rank of Qwen3-4B-Instruct-2507 ON PAPER" in out and "24 GiB a logical core" in out, out
    if host == "eks-pod-two-cores":
        assert "memory: 29 of 29 launches do not fit and would be refused before launch" in out, out
        assert "2 ranks  38.96 GiB a rank of 24 GiB: DOES NOT FIT (its state alone) (runtime 1.5 GiB + state 29.97 GiB" in out, out
    else:
        assert " 64 ranks  9.172 GiB a rank of 24 GiB: fits (runtime 1.5 GiB + state 959 MiB" in out, out
        assert "memory: 0 of 29 launches do not fit" in out, out  # the tiny model's
        assert "memory: 1 of 29 launches do not fit and would be refused before launch: dense_native_no_ac" in out, out
    assert "MiB a logical core" in out, out  # the rehearsal's own core, planned for its tiny model


def test_the_run_cache_refuses_before_launching_and_says_what_was_not_run(tmp_path):
    """The run cache's check before every launch: on the pod's two cores a Qwen3-4B run is
    not launched (``DoesNotFit``), and the session's record of what was not run names it."""
    from fixtures.data.assets import Assets
    from fixtures.runs.cache import RunCache
    from fixtures.runs.catalogue import Catalogue, Entry
    from fixtures.runs.inputs import RunInputs

    tier = _trn2(tmp_path, cores=POD_CORES)
    cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path), tmp_path),
                     runs=Catalogue([Entry("dense_native", lambda t: DENSE_NATIVE)]))
    with pytest.raises(memory_plan.DoesNotFit, match="dense_native steps=10 was not launched"):
        cache.guards.require_budget_and_disk(DENSE_NATIVE)
    assert cache.guards.not_launched == [{"run": "dense_native steps=10", "why": "does not fit in device memory"}]
