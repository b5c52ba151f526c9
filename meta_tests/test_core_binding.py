"""The binding contract's counting where neuron-ls's pids are another namespace's
(``fixtures.oracles.core_binding``): only the session's devices are counted."""

from __future__ import annotations

import pytest

from fixtures.oracles import core_binding

pytestmark = pytest.mark.meta

# container-subset (neuron_standins/hosts/): devices 4 and 5 of a trn2.48xlarge at LNC=2, cores
# 16-23, a neuron-ls that lists all 16 devices of the instance and the host's pids
DEVICE_CORES = {d: list(range(4 * d, 4 * d + 4)) for d in range(16)}
RANK_CORES = list(range(16, 24))


def test_another_tenants_job_on_other_devices_is_not_counted():
    """Eight ranks on devices 4-5 and another tenant's two processes on device 0: eight runtime
    processes are the session's, one per rank on each of its devices; the tenant's are named
    (it failed "one runtime process per rank": 10 listed for 8 ranks)."""
    held = {9000 + r: 4 + r // 4 for r in range(8)} | {7001: 0, 7002: 0}
    counted = core_binding.counts(held, DEVICE_CORES, RANK_CORES)
    assert counted.listed_total == 8
    assert counted.expected == counted.listed == {4: 4, 5: 4}
    assert counted.others == {7001: 0, 7002: 0}


def test_a_rank_missing_from_its_device_is_still_seen():
    """One rank's process absent from device 5 (its runtime never started): 7 listed, and the
    per-device count says which device."""
    held = {9000 + r: 4 + r // 4 for r in range(7)}
    counted = core_binding.counts(held, DEVICE_CORES, RANK_CORES)
    assert counted.listed_total == 7 and counted.listed == {4: 4, 5: 3} and counted.expected == {4: 4, 5: 4}
