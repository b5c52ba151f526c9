"""Cross-version contracts: what the trusted stack wrote, read by this one.

Before a real upgrade a user needs to know that their checkpoints survive it. An upgrade check
(``upgrades``) runs these on the trusted stack, carries what that session wrote to the
candidate (``fixtures.runs.trusted_artifacts``: a mid-training DCP checkpoint with the trusted
stack's own continuation from it, and an HF export) and runs them again there with
``--trusted-artifacts``. Without that option the session's own runs stand for the trusted
stack's: the stack reads what it wrote itself. Anchor: torchtitan's
``tests/integration_tests/checkpoint_compat_test.py`` (save with one version, load with
another); the expected values are the trusted stack's, not the candidate's.
"""

from __future__ import annotations

import pytest
import torch

from fixtures.rank import probes
from fixtures.data import checkpoints
from fixtures.contract import expect_close_series, expect_equal, require_trained
from fixtures.session.run_fixtures import trusted_artifacts_of
from fixtures.runs.catalogue import (LOAD_TIED_TRAIN_EXPORT, LOAD_TRUSTED_LR0_EXPORT, RESUME_AT,
                                     resumed_from_trusted, uninterrupted)
from fixtures.runs.spec import Checkpoint

pytestmark = [pytest.mark.resume, pytest.mark.slow]


def _trusted_continuation(request, titan_runs, tier) -> tuple[dict, str]:
    """The trusted stack's steps after its checkpoint: the artifacts', or this session's own
    uninterrupted run's; and where they come from."""
    artifacts = trusted_artifacts_of(request.config)
    if artifacts is not None:
        return artifacts.continuation, f"the trusted stack {artifacts.stack_id} ({artifacts.root})"
    whole = require_trained(titan_runs.get(uninterrupted(tier)))
    after = [s for s in whole.steps if s.step > RESUME_AT]
    return ({"steps": [s.step for s in after], "losses": [s.loss for s in after],
             "grad_norms": [s.grad_norm for s in after],
             "lrs": [r["groups"][0]["lr"] for r in whole.probe(probes.optimizer, 0)][RESUME_AT:]},
            f"this session's own uninterrupted run ({whole.run_dir})")


def test_resumes_the_trusted_checkpoint(request, tier, titan_runs, record_property):
    """This stack resumes the trusted stack's step-10 DCP checkpoint (model, optimizer,
    scheduler, dataloader, train state) and its steps 11 and 12 are the trusted stack's own
    continuation from it: the same step numbers, learning rates, losses and grad norms, within
    the tier's ``resume_rtol`` (bit for bit on cpu)."""
    expected, source = _trusted_continuation(request, titan_runs, tier)
    run = require_trained(titan_runs.get(resumed_from_trusted(tier)))
    expect_equal("the resumed run continues the trusted step count", expected["steps"],
                 [s.step for s in run.steps], run, detail=f"expected from {source}")
    for name, actual in (("lrs", [r["groups"][0]["lr"] for r in run.probe(probes.optimizer, 0)]),
                         ("losses", run.losses()), ("grad_norms", run.grad_norms())):
        expect_close_series(actual, expected[name], tier.numerics.resume_rtol,
                            f"after resuming the trusted checkpoint, the {name} continue the trusted run's",
                            run, record_property, detail=f"expected from {source}")


def test_loads_the_trusted_export(request, tier, titan_runs):
    """This stack loads the trusted stack's HF export with no missing and no unexpected key:
    a run loading it at learning rate 0 exports exactly the trusted export's tensor names,
    each bit for bit."""
    if trusted_artifacts_of(request.config) is None:  # the session's own export stands for the trusted one
        require_trained(titan_runs.get(LOAD_TIED_TRAIN_EXPORT))
    run = require_trained(titan_runs.get(LOAD_TRUSTED_LR0_EXPORT))
    source = checkpoints.read_tensors(titan_runs.checkpoints(Checkpoint.TRUSTED_EXPORT))
    exported = checkpoints.read_tensors(run.export_dir())
    expect_equal("the re-export has the trusted export's tensor names (none missing, none unexpected)",
                 sorted(source), sorted(exported), run)
    differing = [k for k in source if not torch.equal(exported[k], source[k])]
    expect_equal("every tensor of the trusted export comes back bit for bit", [], differing, run)
