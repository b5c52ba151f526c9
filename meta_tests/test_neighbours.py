"""The pre-launch check of who holds the session's NeuronCores, per core (``fixtures.launch.neighbours``),
against the rehearsal's stand-ins: the stand-in neuron-ls, the stand-in runtime's reservation and
the stand-in neighbour (another container's process on other cores of the pod's device,
``neuron_standins/hosts/pod-with-neighbour.json``)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from fixtures.launch import neighbours
from fixtures.tiers import neuron_host
from fixtures.tiers import rehearsal
from meta_tests import rehearsal_env

pytestmark = pytest.mark.meta

DEVICE_4 = {"4": [16, 17, 18, 19]}  # the pod's device as neuron-ls numbers its cores


def _host_env(tmp_path, neighbour_cores: list[int]) -> dict[str, str]:
    host = {**json.loads((rehearsal.HOSTS_DIR / "pod-with-neighbour.json").read_text()),
            "neighbour": {"cores": neighbour_cores}}
    path = tmp_path / "host.json"
    path.write_text(json.dumps(host))
    return rehearsal_env.clean_env(
        PATH=f"{rehearsal_env.VENV / 'bin'}{os.pathsep}{os.environ['PATH']}", NEURON_REHEARSAL_HOST=str(path),
        NEURON_REHEARSAL_LOCK_DIR=str(tmp_path / "locks"), NEURON_REHEARSAL_NUM_CORES="64")


@pytest.fixture
def neighbour(tmp_path, request):
    """The stand-in neighbour holding the given cores until the test ends."""
    env = _host_env(tmp_path, request.param)
    proc = subprocess.Popen([str(rehearsal_env.require()), "-m", "neuronx_tools.neighbour"], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("holding"), "the stand-in neighbour did not start"
        yield env, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("neighbour", [[18, 19]], indirect=True)
def test_a_neighbour_on_other_cores_of_the_device_is_said_not_refused(neighbour):
    """The pod holds 16,17 of device 4, the neighbour 18,19: neuron-ls lists the neighbour on
    the device (at its host pid), the runtime reserves 16,17 in the probe, the launch goes on
    and the neighbour is named. Before this check looked at cores, the launch was refused."""
    env, pid = neighbour
    found = neighbours.check([16, 17], DEVICE_4, {os.getpid()}, env, python=str(rehearsal_env.PYTHON))
    assert found.refused is None and found.unreadable is None, found
    assert found.neighbour_pids == [pid + 400000], found  # the host namespace's pid (pid_offset)
    assert found.neighbours == [f"pid {pid + 400000} (not visible here (another PID namespace?)) on device 4"]


@pytest.mark.parametrize("neighbour", [[17]], indirect=True)
def test_a_neighbour_holding_a_core_of_the_session_is_refused_in_the_runtimes_words(neighbour):
    """The neighbour holds core 17, one of the pod's: the runtime refuses the reservation and
    the launch is refused with its words and the neighbour named."""
    env, pid = neighbour
    found = neighbours.check([16, 17], DEVICE_4, {os.getpid()}, env, python=str(rehearsal_env.PYTHON))
    assert found.refused and "Logical Neuron Core(s) not available" in found.refused, found
    assert f"shared with pid {pid + 400000}" in found.refused, found


@pytest.mark.parametrize("neighbour", [[18, 19]], indirect=True)
def test_a_process_on_a_device_wholly_the_sessions_is_refused_without_the_runtime(neighbour):
    """Every core of device 4 is the session's: whoever neuron-ls lists there holds one of them."""
    env, pid = neighbour
    found = neighbours.check([16, 17, 18, 19], DEVICE_4, {os.getpid()}, env, python="/nonexistent/python")
    assert found.refused == (f"pid {pid + 400000} (not visible here (another PID namespace?)) on device 4: every "
                             "core of that device is the session's (neuron-ls)"), found


@pytest.mark.parametrize("neighbour", [[17]], indirect=True)
def test_session_start_detection_reserves_no_core(neighbour, tmp_path):
    """Detecting the host at session start never starts the Neuron runtime, which reserves the
    visible cores as it starts ("initializes all the cores present in the system and reserves
    them for the current process": neuron-runtime configuration-guide.rst; the stand-in does it
    as torch_neuronx is imported, ASSUMED). With a neighbour holding core 17 of the pod's 16,17,
    detection (in the rehearsal environment's python, as a session runs it) says TorchNeuron is
    there, and no lock of the stand-in runtime besides the neighbour's exists after it: it took
    none of the session's cores. (The per-core check before a launch is what refuses 17.)"""
    env, _pid = neighbour
    env = {**env, "NEURON_RT_VISIBLE_CORES": "16,17"}
    code = "from fixtures.tiers import neuron_host\nprint(neuron_host.probe_torch_neuron())\n"
    proc = subprocess.run([str(rehearsal_env.require()), "-c", code], cwd=rehearsal_env.REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "available", proc.stdout + proc.stderr
    locks = sorted(p.name for p in (tmp_path / "locks").iterdir())
    assert locks == ["core17.lock"], f"detection reserved a core: lock files {locks}"


def test_detection_without_torch_neuronx_says_so():
    """In an environment without TorchNeuron (this one: the cpu reference venv), detection says
    it is not installed and where it looked, from metadata alone."""
    import sys

    assert neuron_host.probe_torch_neuron() == f"torch_neuronx is not installed in {sys.executable}"
