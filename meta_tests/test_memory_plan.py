"""The memory plan (``fixtures.runs.memory_plan``, ``fixtures.runs.model_size``): parameter
counts against transformers' own Qwen3 and the published Qwen3-4B size, the fp32 state per
rank and the refusal of a run that cannot fit, ``--plan``'s memory rows on the hosts of the
rehearsal matrix, and the rehearsal's core planned for the model it runs."""

from __future__ import annotations

import json

import pytest

from fixtures.launch import kernel_worker
from fixtures.rank.model_shapes import QWEN3_4B_INSTRUCT_2507, TINY
from fixtures.repo import REPO_ROOT as REPO
from fixtures.runs import memory_plan, model_size, session_plan
from fixtures.runs.catalogue import CATALOGUE, DENSE_NATIVE, DENSE_NATIVE_NO_AC
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
    """trn2.48xlarge (64 ranks): every run's state fits (0.94 GiB a rank), the estimate says
    the runs without full AC may not; trn2.3xlarge (4 ranks): the 2-rank runs (fewer ranks, the
    TP reference) do not fit; the pod's 2 cores: none does."""
    big = session_plan.plan(CATALOGUE, _trn2(tmp_path))
    assert not big.not_fitting()
    dense = next(p for p in big.launches if "dense_native" in p.names)
    assert round(dense.memory.state / GIB, 2) == 0.94 and dense.memory.estimate_fits
    maybe = {n for p in big.launches if not p.memory.estimate_fits for n in p.names}
    assert maybe == {"dense_native_no_ac", "hf_backend_as_upstream", "hf_backend_rotary_fixed"}
    small = session_plan.plan(CATALOGUE, _trn2(tmp_path, instance="trn2.3xlarge"))
    assert {n for p in small.not_fitting() for n in p.names} == {"rank_scaling_fewer_ranks",
                                                                  "tensor_parallel_reference"}
    pod = session_plan.plan(CATALOGUE, _trn2(tmp_path, cores=POD_CORES))
    assert len(pod.not_fitting()) == len(pod.launches)
    text = small.text()
    assert "memory: 2 of 29 launches do not fit and are refused before launch: rank_scaling_fewer_ranks, " \
           "tensor_parallel_reference" in text, text
    assert "2 ranks  37.46 GiB a rank of 24 GiB: DOES NOT FIT (state 29.97 GiB" in text, text


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
        assert "2 ranks  37.46 GiB a rank of 24 GiB: DOES NOT FIT (state 29.97 GiB" in out, out
    else:
        assert " 64 ranks  7.672 GiB a rank of 24 GiB: fits (state 959 MiB" in out, out
        assert out.count("memory: 0 of 29 launches do not fit") == 2, out  # the tiny model's and Qwen3-4B's
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
