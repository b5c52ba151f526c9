"""torchtitan's process-group timeouts follow the tier profile's compile allowance: a rank
whose peer is still compiling its first step is not aborted by torchtitan's 300 s default
(``comm.init_timeout_seconds``), nor a later compiling step by the 100 s it drops to after
step 1 (``comm.train_timeout_seconds``)."""

from __future__ import annotations

import typing

import pytest

from meta_tests import qwen3_4b
from fixtures.runs.plan import COMM_TIMEOUT_FLAGS, launch_plan
from fixtures.runs.spec import RunSpec
from fixtures.tiers import tier_profile

pytestmark = pytest.mark.meta


def _argv(tmp_path, tier):
    plan = launch_plan(RunSpec(config="dense_native", steps=10), tier, tmp_path / "run",
                       hf_assets=tier.model_dir or tmp_path, dataset=tmp_path / "c4_test")
    (argv,) = plan.node_argvs
    return argv, plan


def test_the_installed_torchtitan_has_the_fields_with_the_defaults_named():
    """The fields and defaults the profile cites exist in the installed torchtitan's trainer config."""
    from torchtitan.trainer import Trainer

    comm = typing.get_type_hints(Trainer.Config)["comm"]()
    assert (comm.init_timeout_seconds, comm.train_timeout_seconds) == (
        tier_profile.TITAN_COMM_INIT_TIMEOUT_S, tier_profile.TITAN_COMM_TRAIN_TIMEOUT_S)


def test_a_trn2_launch_waits_as_long_as_its_compile_allowance(tmp_path):
    """trn2: start-up 1200 s + the first step's compile 3600 s before the first step ends
    (4800 s, not 300), then a compile and a step (3720 s, not 100); each is within the run's
    own limit, so the suite's timeout, not a collective's, speaks for a run that never ends."""
    tier = qwen3_4b.trn2_tier(tmp_path)
    argv, plan = _argv(tmp_path, tier)
    init = int(argv[argv.index(COMM_TIMEOUT_FLAGS[0]) + 1])
    train = int(argv[argv.index(COMM_TIMEOUT_FLAGS[1]) + 1])
    assert (init, train) == (4800, 3720)
    assert init >= tier.timeouts.startup_s + tier.timeouts.compile_s and init <= plan.timeout_s


def test_the_cpu_tier_keeps_torchtitans_defaults(tmp_path):
    """No compile allowance (cpu): the launch line does not name the timeouts."""
    argv, _ = _argv(tmp_path, tier_profile.cpu_profile())
    assert not set(COMM_TIMEOUT_FLAGS) & set(argv)


def test_the_installed_torchtitan_accepts_the_flags(tmp_path):
    """The flags as the launch line gives them parse into the trainer's config (torchtitan's
    own ConfigManager, on the cpu module's dense_native)."""
    from torchtitan.config.manager import ConfigManager

    argv, _ = _argv(tmp_path, qwen3_4b.trn2_tier(tmp_path))
    flags = [a for i, a in enumerate(argv) if a in COMM_TIMEOUT_FLAGS or argv[i - 1] in COMM_TIMEOUT_FLAGS]
    config = ConfigManager().parse_args(["--module", tier_profile.CPU_MODULE, "--config", "dense_native", *flags])
    assert (config.comm.init_timeout_seconds, config.comm.train_timeout_seconds) == (4800, 3720)
