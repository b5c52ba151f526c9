"""Run by meta_tests/test_rehearsal.py as a Neuron dress rehearsal (``-m trn2
--neuron-dress-rehearsal``): one contract that sees the stand-ins, one that fails on
purpose (its repro bundle must say rehearsal), and, when asked, one that skips."""
import os

import pytest

from fixtures.launch import kernel_worker
from fixtures.tiers import rehearsal


def test_pytest_never_opens_the_device(tier):
    """First in the file, before anything imports torch_neuronx here: the kernel runs in the
    device worker, the pytest process never imports torch_neuronx, and the worker is gone
    after release() (the run cache calls it before every launch)."""
    import sys

    import torch


    q = torch.randn(1, 2, 256, 16)
    q_out, k_out = torch.empty_like(q), torch.empty_like(q)
    kernel_worker.provider(tier.kernel_provider)(q, q.clone(), q_out, k_out, rope_cache=torch.randn(256, 32))
    assert torch.isfinite(q_out).all() and not torch.equal(q_out, q)
    assert "torch_neuronx" not in sys.modules
    worker = kernel_worker._executor
    assert worker is not None
    kernel_worker.release()
    assert kernel_worker._executor is None and not worker._processes


def test_sees_the_standins(tier):
    """The stand-in distributions, installed (not imported here: this process never loads
    torch_neuronx), and the real package layout of nkilib (the kernel is a submodule)."""
    import sys

    import nkilib.core.embeddings as embeddings


    assert tier.rehearsal and tier.name == "trn2"
    assert all(v.endswith("+rehearsal") for v in rehearsal.standin_versions().values())
    assert "torch_neuronx" not in sys.modules
    assert not hasattr(embeddings, "rope_hf")


def test_the_trn2_hypothesis_profile_is_loaded(tier):
    """A trn2 session (rehearsed or real) loads the tier's Hypothesis profile by itself:
    each example may compile a kernel for a new shape."""
    from hypothesis import settings

    assert tier.hypothesis_profile == "trn2"
    assert settings.default.max_examples == settings.get_profile("trn2").max_examples


def test_fails_on_purpose(tier):
    assert tier.nproc_per_node == -1, "a deliberately impossible rank count"


def test_skips_when_asked(tier):
    if os.environ.get("REHEARSAL_SESSION_SKIP") == "1":
        pytest.skip("skipping on purpose")
