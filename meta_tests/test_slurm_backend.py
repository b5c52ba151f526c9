"""The Slurm back end against a real Slurm (Debian's slurm-wlm 22.05 and munge): a private
controller and two nodes on this machine (``scripts/slurm-local-cluster.sh``), never stand-ins.

Each test launches real torchrun agents through ``sbatch``/``srun`` with the small rank programs
of ``rank_programs/``, and breaks the job the way a cluster does: a node whose job step dies, a
job Slurm cancels, a launch past its timeout, a node that cannot see the shared folder. Without
Slurm installed these fail saying how to install it (a skip would be a silent green).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from fixtures.launch import launch_processes, launcher
from fixtures.launch.backends import slurm
from fixtures.launch.backends.base import LauncherRefused
from fixtures.repo import REPO_ROOT
from fixtures.runs import plan

pytestmark = [pytest.mark.meta, pytest.mark.slow, pytest.mark.slurm]

PROGRAMS = Path(__file__).parent / "rank_programs"
CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "slurm-local-cluster.sh"


def _cluster_answers() -> bool:
    return bool(os.environ.get("SLURM_CONF")) and shutil.which("sinfo") is not None and subprocess.run(
        ["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


def _start(folder: Path, **env) -> str:
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start", str(folder)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    if done.returncode != 0:
        pytest.fail(f"could not start a private Slurm cluster ({done.returncode}): {done.stderr.strip()}\n"
                    "the Slurm back end's meta tests need Slurm and munge: apt-get update && "
                    "apt-get install -y slurm-wlm munge", pytrace=False)
    return str(folder / "slurm.conf")


def _stop(folder: Path) -> None:
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(folder)], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The cluster SLURM_CONF names when one answers (CI's Slurm stage started it), else a private
    one for this module, stopped after it."""
    if _cluster_answers():
        yield os.environ["SLURM_CONF"]
        return
    folder = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))  # munge's socket path must stay under 108 bytes
    conf = _start(folder)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        _stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


def _argvs(tmp_path: Path, backend, program: list[str], nnodes: int = 2) -> list[list[str]]:
    return [plan.torchrun_argv(1, program, tmp_path / "logs" / f"node{r}",
                               plan.NodeLayout(nnodes=nnodes, node_rank=r, rdzv_endpoint=backend.rendezvous_endpoint(nnodes),
                                               rdzv_id="meta"))
            for r in range(nnodes)]


def _job_gone(job_id: str) -> bool:
    state = slurm.job_record(job_id)
    return state is None or state.get("JobState") in slurm.ENDED


def _nothing_left(outcome) -> None:
    assert outcome.leftover_pids == [], launcher.describe_failure(outcome)
    assert launch_processes.launch_pids(outcome.launch_id) == []
    assert _job_gone(outcome.job_id), slurm.job_record(outcome.job_id)
    steps = subprocess.run(["squeue", "-h", "-s", "-j", outcome.job_id], capture_output=True, text=True).stdout
    assert steps.strip() == "", steps


def _ready(tmp_path: Path, ranks: int) -> bool:
    logs = list((tmp_path / "logs").rglob("stdout.log"))
    return len(logs) == ranks and all("ready" in log.read_text() for log in logs)


def test_a_quoted_argument_with_a_space_or_a_glob_reaches_every_rank_whole(cluster, tmp_path):
    """issue 53 defect 5 on a real Slurm: every argument reaches every rank of both nodes as one
    word (a folder with a space, a glob, a quote, a dollar sign), not split or expanded."""
    out = tmp_path / "argv"
    out.mkdir()
    program = tmp_path / "argv.py"
    program.write_text("import json, os, sys\nopen(os.path.join(sys.argv[1], os.environ['RANK']), 'w')"
                       ".write(json.dumps(sys.argv[2:]))\n")
    args = ["--dump_folder", "/fsx/my runs", "--fqns", "layers.1[0-9].*", "it's", "$HOME", "a\ttab"]
    backend = slurm.SlurmBackend()
    outcome = backend.launch(_argvs(tmp_path, backend, [str(program), str(out), *args]), tmp_path, {}, 120,
                             nproc_per_node=1)
    assert outcome.ok, launcher.describe_failure(outcome)
    seen = {f.name: json.loads(f.read_text()) for f in out.iterdir()}
    assert seen == {"0": args, "1": args}
    assert [h.split(" ")[0] for h in outcome.hosts] == ["n1", "n2"] and outcome.job_id
    _nothing_left(outcome)


def test_several_agents_a_node_each_run_their_own_line(cluster, tmp_path):
    """One torchrun agent a rank (``CorePinning.AGENT_PER_RANK``) on a cluster: 4 agents of one
    rank over the 2 nodes, two Slurm tasks a node, each task running its own line (by
    SLURM_PROCID) into one world of 4, each agent's host recorded."""
    backend = slurm.SlurmBackend()
    argvs = [plan.torchrun_argv(1, [str(PROGRAMS / "ok.py")], tmp_path / "logs" / f"node{r}",
                                plan.NodeLayout(nnodes=4, node_rank=r, rdzv_endpoint=backend.rendezvous_endpoint(4),
                                                rdzv_id="agents"))
             for r in range(4)]
    outcome = backend.launch(argvs, tmp_path, {}, 120, nproc_per_node=1, nnodes=2)
    assert outcome.ok, launcher.describe_failure(outcome)
    assert [h.split(" ")[0] for h in outcome.hosts] == ["n1", "n1", "n2", "n2"]
    assert sorted(r for ranks in outcome.node_ranks.values() for r in ranks) == [0, 1, 2, 3]
    assert "#SBATCH --ntasks-per-node=2" in (tmp_path / "slurm" / "job.sh").read_text()
    _nothing_left(outcome)


def _kill_node_step(job_id: str, node: str, launch_id: str) -> list[int]:
    """SIGKILL every process of the job's step on ``node`` (its task, agent and ranks), as a node
    that dies: found by their environment (SLURMD_NODENAME, SLURM_JOB_ID and the launch's tag)."""
    killed = []
    for proc in launch_processes.tagged_processes(launch_processes.LAUNCH_ID_ENV, launch_id):
        env = launch_processes.environ_of(proc)
        if env.get("SLURMD_NODENAME") == node and env.get("SLURM_JOB_ID") == job_id and "SLURM_STEP_ID" in env:
            try:
                proc.send_signal(signal.SIGKILL)
                killed.append(proc.pid)
            except psutil.Error:
                pass
    return killed


def test_a_node_whose_job_step_dies_is_named_the_culprit_with_its_host_and_ranks(cluster, tmp_path):
    """Node n2's job step is killed mid-run (SIGKILL to its task, agent and ranks: the node dies).
    The culprit is that node's rank, named with node 1 and host n2 and srun's own words; the
    rank on n1 that then failed is a consequence; Slurm has ended the job, and no process of
    the launch is left on this machine."""
    backend = slurm.SlurmBackend()
    killed: list[int] = []

    def kill_n2_once_both_ranks_wait():
        if not killed and _ready(tmp_path, 2):
            killed.extend(_kill_node_step(_job_id(tmp_path), "n2", _launch_id(tmp_path)) or [-1])
        return None

    outcome = backend.launch(_argvs(tmp_path, backend, [str(PROGRAMS / "hang.py")]), tmp_path, {}, 120,
                             nproc_per_node=1, on_poll=kill_n2_once_both_ranks_wait)
    assert killed and killed != [-1], "the test found no process of n2's job step to kill"
    cause = outcome.root_cause
    message = launcher.describe_failure(outcome)
    assert not outcome.ok and not outcome.timed_out, message
    assert cause is not None and cause.node == 1 and cause.host.startswith("n2"), message
    assert cause.rank in outcome.node_ranks[1] and "srun: n2: task 1" in cause.message, message
    assert f"first failure: rank {cause.rank} on node 1 (n2" in message, message
    assert all(c["node"] == 0 for c in outcome.consequences), outcome.consequences
    _nothing_left(outcome)


def _job_id(tmp_path: Path) -> str:
    return (tmp_path / "slurm" / "job.id").read_text().strip()


def _launch_id(tmp_path: Path) -> str:
    """The launch id the job script exported (its tag on every process of the launch)."""
    text = (tmp_path / "slurm" / "job.sh").read_text()
    return text.split(f"export {launch_processes.LAUNCH_ID_ENV}=", 1)[1].split()[0]


def test_a_job_slurm_cancels_is_a_named_failure_and_leaves_nothing(cluster, tmp_path):
    """``scancel`` of the job mid-run (as an operator, a preemption or a reservation's end
    does): the launch fails naming Slurm's cancellation (JobState=CANCELLED, the batch log's
    "CANCELLED AT"), not a rank's error, and nothing of it is left."""
    backend = slurm.SlurmBackend()
    cancelled = []

    def cancel_once_both_ranks_wait():
        if not cancelled and _ready(tmp_path, 2):
            cancelled.append(_job_id(tmp_path))
            subprocess.run(["scancel", cancelled[0]], check=True)
        return None

    outcome = backend.launch(_argvs(tmp_path, backend, [str(PROGRAMS / "hang.py")]), tmp_path, {}, 120,
                             nproc_per_node=1, on_poll=cancel_once_both_ranks_wait)
    message = launcher.describe_failure(outcome)
    assert cancelled == [outcome.job_id], (cancelled, outcome.job_id)
    assert not outcome.ok and not outcome.timed_out, message
    assert outcome.scheduler_end and "JobState=CANCELLED" in outcome.scheduler_end, message
    assert f"Slurm job {outcome.job_id} on n1" in message and "the job was cancelled" in message, message
    assert outcome.status().startswith("Slurm ended job") or outcome.root_cause is None, outcome.status()
    _nothing_left(outcome)


def test_a_hung_launch_times_out_with_every_ranks_stack_and_nothing_left(cluster, tmp_path):
    """Past the launch's timeout the job's steps get SIGABRT (faulthandler prints where the hung
    rank waits), then Slurm cancels the job; the launch is a timeout, nothing is left."""
    backend = slurm.SlurmBackend()
    outcome = backend.launch(_argvs(tmp_path, backend, [str(PROGRAMS / "hang.py")]), tmp_path, {}, 20,
                             nproc_per_node=1)
    assert outcome.timed_out and not outcome.ok
    hung = outcome.node_ranks[0] + outcome.node_ranks[1]
    logs = "".join(Path(outcome.rank_logs[r]["stderr"]).read_text() for r in hung if r in outcome.rank_logs)
    assert 'hang.py", line' in logs, launcher.describe_failure(outcome)
    _nothing_left(outcome)


def test_a_node_that_cannot_see_the_shared_folder_is_refused_before_any_launch(tmp_path):
    """A cluster whose node n2 sees an empty folder where the shared folder is (its slurmd in a
    mount namespace of its own, a tmpfs over the path): the session is refused before any
    launch, naming n2 and the folder; n1 is not named."""
    shared = tmp_path / "shared"
    shared.mkdir()
    folder = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))  # munge's socket path must stay under 108 bytes
    conf = _start(folder, SLURM_LOCAL_HIDE_ON_N2=str(shared))
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        backend = slurm.SlurmBackend()
        with pytest.raises(LauncherRefused) as refused:
            backend.preflight(2, {"shared folder": shared, "repository": REPO_ROOT, "interpreter": Path(sys.executable)})
        assert "node n2 " in str(refused.value) and str(shared) in str(refused.value), refused.value
        assert "node n1 " not in str(refused.value), refused.value
        backend.preflight(2, {"shared folder": tmp_path, "repository": REPO_ROOT})  # a folder both see: no refusal
    finally:
        _stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
