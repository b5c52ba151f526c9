"""The rehearsal over the hosts users have (``neuron_standins/hosts/``), not only the one the
suite was written for: for each host, ``--plan`` and the topology contracts that launch nothing
run in the rehearsal environment, and the session starts with the ranks the host's file expects,
or stops with the usage error it expects.

The launching topology contracts need one rank per core (64 on the 48xlarge types); they run
here on one container-like host of 2 ranks only (``test_a_container_like_host_launches_both_paths``;
see README "What has run where" for the launch measured at full size)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.tiers import rehearsal
from fixtures.tiers.rehearsal_host import HostExpectations, RehearsalHost, UnknownHostKey
from meta_tests import rehearsal_env
from reports.session_report import SessionReport

pytestmark = pytest.mark.meta

HOSTS = rehearsal.host_names()


def _session(tmp_path: Path, host: str, *args: str) -> subprocess.CompletedProcess:
    return rehearsal_env.rehearsal_pytest(
        # the topology area's file alone: the same selection, without collecting every other area
        tmp_path, "conformance/test_topology.py", "-m", "trn2 and topology and not slow",
        "--neuron-dress-rehearsal", "--rehearsal-host", host, "--report-dir", str(tmp_path / "report"), *args)


def test_the_matrix_has_the_hosts_users_have():
    """Each host of issue #31's list has a file, and every file names its sources."""
    assert {"trn2.48xlarge", "trn2n.48xlarge", "trn2u.48xlarge", "trn2.3xlarge", "container-subset",
            "lnc-disagreement", "older-tools", "tools-off-path", "tools-2.22", "pod-with-neighbour",
            "virtual-core-size", "lnc-file"} <= set(HOSTS)
    hosts = {name: rehearsal.load_host(name) for name in HOSTS}  # an unknown key is refused here
    for name, host in hosts.items():
        assert host.sources and host.expect != HostExpectations(), name
    # what the docs leave open, the matrix holds on both sides: when the stand-in runtime
    # reserves its cores, and whether the stand-in driver numbers sysfs cores logically
    assert {h.reserve_at for h in hosts.values()} == {"import", "first_use"}
    assert {h.sysfs_cores for h in hosts.values()} == {"logical", "physical"}
    # one host plans the write-up's model on paper, and its plan refuses some runs (not all)
    paper = [h for h in hosts.values() if h.model_on_paper]
    assert paper and all(h.expect.paper_refused for h in paper), paper


def test_a_host_file_with_an_unknown_key_is_refused(tmp_path):
    """A misspelt key would be ignored and the host take the default side silently: refused,
    naming it; so is a value outside a key's choices."""
    good = json.loads((rehearsal.HOSTS_DIR / "trn2.3xlarge.json").read_text())
    with pytest.raises(UnknownHostKey, match="unknown key.*reserve_after"):
        RehearsalHost.from_json({**good, "reserve_after": "first_use"}, "x.json")
    with pytest.raises(UnknownHostKey, match="expect.rank"):
        RehearsalHost.from_json({**good, "expect": {"rank": 4}}, "x.json")
    with pytest.raises(UnknownHostKey, match="sysfs_cores 'both' is not one of logical, physical"):
        RehearsalHost.from_json({**good, "sysfs_cores": "both"}, "x.json")


def test_the_standins_default_host_is_the_default_host_file():
    """The stand-ins read the files as plain JSON (they import nothing of the suite), with a
    default host for a process given none: it is trn2.3xlarge's file, key for key, and every key
    it has is one the host type knows."""
    sys.path.insert(0, str(rehearsal.STANDIN_ROOT / "aws-neuronx-tools"))
    try:
        from neuronx_tools import cores
    finally:
        sys.path.pop(0)
    default = rehearsal.load_host(rehearsal.DEFAULT_HOST)
    assert set(cores.DEFAULT_HOST) <= {f.name for f in dataclasses.fields(RehearsalHost)}
    for key, value in cores.DEFAULT_HOST.items():
        assert getattr(default, key) == (tuple(value) if isinstance(value, list) else value), key


@pytest.fixture(scope="module")
def host_sessions(tmp_path_factory) -> dict[str, dict[str, subprocess.CompletedProcess | Path]]:
    """Every host's ``--plan`` session and, where the host is not refused, its topology
    session, two at a time (each is one process on one core: the machine has two)."""
    from concurrent.futures import ThreadPoolExecutor

    rehearsal_env.require()
    folders = {host: tmp_path_factory.mktemp(host) for host in HOSTS}

    def both(host: str) -> dict:
        expect = rehearsal.load_host(host).expect
        out = {"plan": _session(folders[host], host, "--plan"), "folder": folders[host]}
        if expect.usage_error is None:
            out["run"] = _session(folders[host], host, "-q")
        return out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(HOSTS, pool.map(both, HOSTS)))


@pytest.mark.parametrize("host", HOSTS)
def test_a_rehearsal_on_the_host_plans_and_runs_its_topology_contracts(host_sessions, host):
    """``--plan`` says where neuron-ls was found (on PATH, or only in the Neuron tools' folder
    on a host whose shell lacks it) and prints every launch with the host's rank count, and the topology contracts
    that launch nothing pass there (the pytest process holds no core, as neuron-ls sees it);
    a host the suite must refuse stops with the usage error its file names."""
    expect = rehearsal.load_host(host).expect
    plan = host_sessions[host]["plan"]
    out = plan.stdout + plan.stderr
    if expect.usage_error is not None:
        assert plan.returncode == pytest.ExitCode.USAGE_ERROR, out
        assert expect.usage_error in out, out
        return
    assert plan.returncode == 0, out
    where = expect.neuron_ls_where or "on PATH ("
    assert re.search(rf"^neuron-ls: .*{re.escape(where)}", out, re.M), f"neuron-ls not found {where}:\n{out}"
    if expect.lnc_source is not None:
        assert re.search(rf"^LNC \d set by: .*{re.escape(expect.lnc_source)}", out, re.M), out
    ranks = {int(n) for n in re.findall(r"(\d+) ranks", out)}
    assert expect.ranks in ranks, f"no launch of {expect.ranks} ranks in the plan:\n{out}"
    if expect.paper_refused:  # the host's model on paper (model_on_paper), without --trn2-model-dir
        assert re.search(r"^memory per rank of \S+ ON PAPER .* 24 GiB a logical core:$", out, re.M), out
        refused = re.search(r"^memory: (\d+) of (\d+) launches do not fit and would be refused before launch: (.*)$",
                            out, re.M)
        assert refused, f"the plan on paper refuses nothing:\n{out}"
        assert tuple(refused.group(3).split(", ")) == expect.paper_refused, refused.group(0)
        assert int(refused.group(1)) < int(refused.group(2)), refused.group(0)  # refused some, planned the rest
    run = host_sessions[host]["run"]
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert re.search(r"\b[1-9]\d* passed", out), out
    report = SessionReport.load(host_sessions[host]["folder"] / "report")
    assert report.rehearsal is True
    first, last = expect.first_core, expect.first_core + expect.ranks - 1
    assert f"cores {first}-{last}" in report.platform_profiles["trn2"], report.platform_profiles["trn2"]


# A native and an hf_backend launch on a container-like host, where the stand-ins (eager core
# reservation, held device nodes, a neighbour on the device's other cores, host PIDs) can
# fail them: the native run's topology contracts pass; the hf_backend run fails at step 1 with
# the reason its expectation pins (rehearsal-trn2-...txt), any other failure is red. The pod
# with a neighbour (2 ranks, about 45 s here); container-subset's 8 ranks took 109 s on this
# 2-core machine, over what CI affords, and run by hand.
LAUNCHES = ("conformance/test_topology.py::test_one_rank_per_logical_core",
            "conformance/test_topology.py::test_each_rank_holds_its_neuroncore_in_the_runtimes_view",
            "conformance/test_runs.py::test_run_exits_cleanly[trn2-hf_backend_rotary_fixed]")


def test_a_container_like_host_launches_both_paths(tmp_path):
    """On ``pod-with-neighbour`` (cores 16,17 of device 4, another pod's process on 18,19), every
    run launched here (``--fresh-runs``: none reused from the run cache): the dense native run trains
    and the binding contracts pass with the neighbour named and left out; the hf_backend run
    launches and fails as recorded (strict xfail with its pinned reason)."""
    proc = rehearsal_env.rehearsal_pytest(
        tmp_path, *LAUNCHES, "-m", "trn2", "--neuron-dress-rehearsal", "--rehearsal-host", "pod-with-neighbour",
        "--fresh-runs", "--report-dir", str(tmp_path / "report"), "-p", "no:randomly", timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"\b2 passed, 1 xfailed\b", out), out
    # the write-up's run (on trn2 it also records what the bf16 contract reads: "recording ...")
    assert re.search(r"^conformance: done dense_native steps=10( recording [^:]*)?: .* launched, exit 0$", out,
                     re.M), out
    assert re.search(r"^conformance: done hf_backend .* launched, exit 1", out, re.M), out
    assert out.count("the runtime reserved cores 16-17; their devices are shared with pid") == 2, out
    assert SessionReport.load(tmp_path / "report").rehearsal is True


def test_the_standin_neuron_ls_prints_each_documented_layout(tmp_path):
    """The stand-in prints the layout of the host's tools: CORE IDS and -j on the 2.25 layout,
    neither on the 2.21 one (where -j is refused as an unknown option), -j without
    neuroncore_ids and a table without CORE IDS on the 2.22 one, host PIDs in a
    container, no instance-type line without instance metadata, and in a container whose
    neuron-ls sees the instance every device of it (its /dev has only its own)."""
    def neuron_ls(host: str, *args: str) -> subprocess.CompletedProcess:
        env = rehearsal_env.clean_env(NEURON_REHEARSAL_HOST=str(rehearsal.HOSTS_DIR / f"{host}.json"),
                                      NEURON_REHEARSAL_LOCK_DIR=str(tmp_path / "locks"))
        env.pop("NEURON_LOGICAL_NC_CONFIG", None)
        return subprocess.run([str(rehearsal_env.NEURON_LS), *args], capture_output=True, text=True, env=env,
                              timeout=60)

    rehearsal_env.require()
    big = neuron_ls("trn2.48xlarge").stdout
    assert "instance-type: trn2.48xlarge" in big and "CORE IDS" in big and "| 15 " in big and "60-63" in big
    assert "12, 3, 4, 1" in big  # CONNECTED DEVICES of device 0, as neuron-ls.rst prints it
    old = neuron_ls("older-tools")
    assert "CORE IDS" not in old.stdout and "instance-type: trn2.48xlarge" in old.stdout
    refused = neuron_ls("older-tools", "-j")
    assert refused.returncode == 2 and "unrecognized arguments: -j" in refused.stderr
    middle = neuron_ls("tools-2.22")
    assert "CORE IDS" not in middle.stdout and "| cc:00.0 |" in middle.stdout, middle.stdout
    devices = json.loads(neuron_ls("tools-2.22", "-j").stdout)
    assert len(devices) == 16 and not {"neuroncore_ids", "cpu_affinity", "numa_node"} & set(devices[0]), devices[0]
    assert devices[15]["nc_count"] == 4 and devices[0]["connected_to"] == [12, 3, 4, 1]
    pod = neuron_ls("eks-pod-two-cores").stdout
    assert "instance-type" not in pod and "16-19" in pod
    assert [int(d) for d in re.findall(r"^\| (\d+) ", pod, re.M)] == [4], pod
    assert json.loads(neuron_ls("eks-pod-two-cores", "-j").stdout)[0]["neuron_device"] == 4
    container = neuron_ls("container-subset").stdout  # every device of the instance, /dev has 4 and 5
    assert "instance-type: trn2.48xlarge" in container
    assert [int(d) for d in re.findall(r"^\| (\d+) ", container, re.M)] == list(range(16)), container
    assert len(json.loads(neuron_ls("container-subset", "-j").stdout)) == 16
