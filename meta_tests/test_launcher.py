"""The launcher under real failures: a hung rank, a crashing rank, a killed rank.

Each test launches real torchrun agents with small rank programs (rank_programs/), so the
process supervision under test is torchrun's elastic agent plus the OS session.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fixtures.launch import launch_processes, launcher
from fixtures.launch.backends import slurm_job
from fixtures.runs import plan

pytestmark = [pytest.mark.meta, pytest.mark.slow]

PROGRAMS = Path(__file__).parent / "rank_programs"


def _launch(tmp_path: Path, program: str, *args: str, timeout: float = 60.0):
    argv = plan.torchrun_argv(2, [str(PROGRAMS / program), *args], tmp_path / "logs")
    return launcher.launch([argv], tmp_path, {}, timeout, nproc_per_node=2)


def test_the_rank_wrapper_pins_each_agents_cores_before_the_rank_starts(tmp_path):
    """Two agents of two ranks each, from core 16 (a pod given 16-19): each rank starts with
    its own core (16, 17, then 18, 19: the second agent's base is offset) and with autoload
    given back, while the agents run with it off; the recorded commands carry each base."""
    import json

    port = launcher.free_port()
    argvs = [plan.torchrun_argv(2, plan.rank_entry([str(PROGRAMS / "core_env.py")], 16 + 2 * r),
                                tmp_path / "logs" / f"node{r}",
                                plan.NodeLayout(nnodes=2, node_rank=r, rdzv_endpoint=f"localhost:{port}",
                                                rdzv_id="wrapper-test"))
             for r in (0, 1)]
    outcome = launcher.launch(argvs, tmp_path, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, 120, nproc_per_node=2)
    assert outcome.ok, launcher.describe_failure(outcome)
    seen = {}
    for logs in outcome.rank_logs.values():
        record = json.loads(Path(logs["stdout"]).read_text().splitlines()[-1])
        seen[record["rank"]] = (record["cores"], record["autoload"])
    assert seen == {0: ("16", "<unset>"), 1: ("17", "<unset>"), 2: ("18", "<unset>"), 3: ("19", "<unset>")}
    assert [("--core-base 16" in c, "--core-base 18" in c) for c in outcome.node_commands] == [(True, False),
                                                                                             (False, True)]
    assert all(c.startswith("TORCH_DEVICE_BACKEND_AUTOLOAD=0 ") for c in outcome.node_commands)


def test_the_rank_wrapper_refuses_a_start_outside_torchrun(tmp_path):
    """Without LOCAL_RANK (not started by torchrun) or without a base, the wrapper says how it is used."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    alone = subprocess.run([str(plan.RANK_WRAPPER), "--core-base", "16", "--autoload", "default", "true"],
                           capture_output=True, text=True, env=env, timeout=30)
    assert alone.returncode == 2 and "run under torchrun --no-python" in alone.stderr
    no_base = subprocess.run([str(plan.RANK_WRAPPER), "--autoload", "default", "true"], capture_output=True,
                             text=True, env={**env, "LOCAL_RANK": "0"}, timeout=30)
    assert no_base.returncode == 2 and "--core-base must be a core index" in no_base.stderr


def test_clean_run_keeps_every_rank_log(tmp_path):
    outcome = _launch(tmp_path, "ok.py")
    assert outcome.ok, launcher.describe_failure(outcome)
    assert sorted(outcome.rank_logs) == [0, 1]
    for rank in (0, 1):
        text = Path(outcome.rank_logs[rank]["stdout"]).read_text()
        assert f"rank {rank} of 2" in text, text
    assert outcome.leftover_pids == []


def test_hung_rank_fails_within_timeout_and_leaves_nothing(tmp_path, record_property):
    timeout = 15.0
    start = time.monotonic()
    outcome = _launch(tmp_path, "hang.py", timeout=timeout)
    elapsed = time.monotonic() - start
    record_property("hang_to_clean_exit_s", round(elapsed - timeout, 2))
    assert outcome.timed_out and not outcome.ok
    # The whole tree is gone: SIGABRT + SIGTERM grace periods bound the clean-up.
    assert outcome.leftover_pids == []
    assert elapsed < timeout + launch_processes.ABORT_GRACE_S + 2 * launch_processes.TERM_GRACE_S + 5, elapsed
    assert outcome.ranks_alive_at_timeout == [0, 1]
    # The hung rank is named by where it hangs: faulthandler's dump in its own log.
    rank1 = Path(outcome.rank_logs[1]["stderr"]).read_text()
    hang_line = next(i for i, line in enumerate((PROGRAMS / "hang.py").read_text().splitlines(), 1)
                     if "time.sleep(3600)" in line)
    assert f'hang.py", line {hang_line}' in rank1, rank1[-2000:]
    message = launcher.describe_failure(outcome)
    assert "timed out; ranks still running at the timeout: [0, 1]" in message
    assert "--- rank 1 stderr" in message and "hang.py" in message


def test_a_launch_stopped_by_its_poll_says_why_and_leaves_nothing(tmp_path):
    """The expected-failure cap's mechanism: a reason returned by ``on_poll`` stops the launch
    there, well before its timeout, as a timeout that says why. The poll stops it once both
    ranks say they are ready (a fixed delay was a race: under load the ranks were not up yet
    at 3 s, and none was named as running)."""
    reason = "the expected-failure cap: no step finished in 3 s"
    argv = plan.torchrun_argv(2, [str(PROGRAMS / "hang.py")], tmp_path / "logs")
    stopped_at = []

    def stop_once_both_ranks_are_up():
        logs = list((tmp_path / "logs").rglob("stdout.log"))
        if len(logs) == 2 and all("ready" in log.read_text() for log in logs):
            stopped_at[:] = stopped_at or [time.monotonic()]
            return reason
        return None

    outcome = launcher.launch([argv], tmp_path, {}, 600.0, nproc_per_node=2, on_poll=stop_once_both_ranks_are_up)
    elapsed = time.monotonic() - stopped_at[0]
    assert outcome.stopped == reason and outcome.timed_out and not outcome.ok
    assert outcome.leftover_pids == []
    assert elapsed < launcher.POLL_S + launch_processes.ABORT_GRACE_S + 2 * launch_processes.TERM_GRACE_S + 5, elapsed
    assert f"stopped: {reason}; ranks still running then: [0, 1]" in launcher.describe_failure(outcome)
    assert launcher.LaunchOutcome.from_dict(outcome.to_dict()).stopped == reason


def test_raising_rank_is_named_with_its_traceback(tmp_path):
    outcome = _launch(tmp_path, "crash.py", "raise")
    assert not outcome.ok and not outcome.timed_out
    assert outcome.root_cause is not None, outcome.console_log.read_text()[-3000:]
    assert outcome.root_cause.rank == 1, launcher.describe_failure(outcome)
    assert outcome.root_cause.exitcode == 1
    assert "injected failure at step 3" in outcome.root_cause.traceback
    assert launcher.LaunchOutcome.from_dict(outcome.to_dict()).root_cause == outcome.root_cause
    assert outcome.leftover_pids == []
    assert "first failure: rank 1 (exit code 1)" in launcher.describe_failure(outcome)
    # rank 0, when torchrun saw it fail too (on the lost peer, or stopped by torchrun's SIGTERM
    # first: both orders happen), is listed as a consequence, never as the cause
    assert all(c["rank"] == 0 and (c["peer_failure"] or c["how"] == "signal SIGTERM")
               for c in outcome.consequences), outcome.consequences


def test_killed_rank_is_named_with_its_signal(tmp_path):
    outcome = _launch(tmp_path, "crash.py", "kill")
    assert not outcome.ok
    assert outcome.root_cause is not None
    assert outcome.root_cause.rank == 1, launcher.describe_failure(outcome)
    assert outcome.root_cause.signal == "SIGKILL"
    assert outcome.leftover_pids == []
    assert "first failure: rank 1 (signal SIGKILL)" in launcher.describe_failure(outcome)
    assert all(c["rank"] == 0 for c in outcome.consequences), outcome.consequences


def test_multi_node_lines_share_one_rendezvous(tmp_path):
    layout = [plan.NodeLayout(nnodes=2, node_rank=r, rdzv_endpoint="head:29500", rdzv_id="job1")
              for r in (0, 1)]
    lines = [plan.torchrun_argv(32, ["-m", "torchtitan.train"], tmp_path / f"n{r}", l)
             for r, l in enumerate(layout)]
    for r, argv in enumerate(lines):
        assert "--nnodes=2" in argv and f"--node_rank={r}" in argv
        assert argv[argv.index("--rdzv_endpoint") + 1] == "head:29500"
        assert argv[argv.index("--rdzv_id") + 1] == "job1"
        assert "--nproc_per_node=32" in argv


def test_slurm_script_runs_one_agent_per_node():
    script = plan.slurm_script(4, 64, ["-m", "torchtitan.train", "--module", "m", "--config", "c"])
    assert "#SBATCH --nodes=4" in script and "srun --nodes=4 --ntasks-per-node=1 --kill-on-bad-exit=1" in script
    assert 'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert "RDZV_PORT=29500" in script and 'argv[$i]="$RDZV_HOST:$RDZV_PORT"' in script
    lines = [l for l in script.splitlines() if l.strip().startswith(tuple(f"{r})" for r in range(4)))]
    assert len(lines) == 4
    for r, line in enumerate(lines):
        assert (f"--nproc_per_node=64 --rdzv_backend c10d --rdzv_endpoint {slurm_job.RDZV_ENDPOINT} "
                f"--local-ranks-filter 0 --role rank --tee 3 --nnodes=4 --node_rank={r} "
                f"--rdzv_id {slurm_job.SLURM_JOB_ID}") in line, line
        assert line.endswith("-m torchtitan.train --module m --config c) ;;"), line


def _standin_slurm_tools(tmp_path: Path) -> Path:
    """A folder with stand-ins for ``scontrol`` (the node list is this host) and ``srun`` (one
    copy of the command per node, here, at once, each with its SLURM_NODEID and SLURM_PROCID (one task a
    node) and writing node<i>.log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho localhost\n")
    (bin_dir / "srun").write_text(
        "#!/usr/bin/env bash\n"
        "n=1; while [[ $1 == --* ]]; do [[ $1 == --nodes=* ]] && n=${1#--nodes=}; shift; done\n"
        "for i in $(seq 1 $n); do SLURM_NODEID=$((i - 1)) SLURM_PROCID=$((i - 1)) \"$@\" > node$i.log 2>&1 & done\nwait\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def _run_slurm_job(tmp_path: Path, script_text: str, env: dict[str, str]) -> str:
    """Run a Slurm job script here (the stand-in tools first on ``env``'s PATH); the two nodes'
    logs, once it has exited with 0."""
    import stat
    import subprocess

    script = tmp_path / "job.sh"
    script.write_text(script_text)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("node*.log")))
    assert proc.returncode == 0, f"the job script exited {proc.returncode}:\n{proc.stderr}{logs}"
    return logs


def test_slurm_script_under_standin_srun(tmp_path):
    """The Slurm script, run with stand-ins for ``scontrol`` (the node list is this host) and
    ``srun`` (one copy of the command per node, here, at once): two torchrun agents meet
    at the rendezvous and both ranks run."""
    import os

    bin_dir = _standin_slurm_tools(tmp_path)
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="localhost")
    logs = _run_slurm_job(tmp_path, plan.slurm_script(2, 1, [str(PROGRAMS / "ok.py")], port=launcher.free_port()),
                          env)
    assert "rank 0 of 2" in logs and "rank 1 of 2" in logs, logs


def test_slurm_script_pins_each_ranks_core_before_its_interpreter_on_trn2():
    """A trn2 Slurm job launches ranks as ``run_plan`` does (CONTRACTS.md "Launch", the
    rank's core pinned before TorchNeuron can load): every node's agent runs with device-backend
    autoload off and each rank through ``fixtures/rank/neuron_rank.sh`` with the node's first
    core; the cpu form stays the write-up's line."""
    entry = ["-m", "torchtitan.train", "--module", "m", "--config", "c"]
    script = plan.slurm_script(4, 64, entry, first_core=0)
    assert "  export TORCH_DEVICE_BACKEND_AUTOLOAD=0" in script
    line = next(l for l in script.splitlines() if l.strip().startswith("0)"))
    wrapper = f"--no-python {plan.RANK_WRAPPER} --core-base 0 --autoload "
    assert wrapper in line, line
    assert line.index(wrapper) < line.index(f"{sys.executable} -m torchtitan.train --module m --config c"), line
    cpu = plan.slurm_script(4, 64, entry)
    assert "neuron_rank.sh" not in cpu and "AUTOLOAD" not in cpu


def test_slurm_script_trn2_ranks_get_their_cores_under_standin_srun(tmp_path):
    """The trn2 Slurm script run with stand-ins for ``scontrol`` and ``srun`` (two nodes here):
    every rank starts with NEURON_RT_VISIBLE_CORES = the node's first core + LOCAL_RANK and the
    user's own autoload setting (unset here), while its agent ran with autoload off."""
    import os

    bin_dir = _standin_slurm_tools(tmp_path)
    program = tmp_path / "cores.py"
    program.write_text(  # every rank writes a file: torchrun shows only local rank 0 (--local-ranks-filter 0)
        "import os, pathlib\npathlib.Path(os.environ['RANK_OUT'], os.environ['RANK']).write_text("
        "f\"rank {os.environ['RANK']} core {os.environ['NEURON_RT_VISIBLE_CORES']} "
        "autoload {os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD', 'unset')}\")\n")
    out = tmp_path / "ranks"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_DEVICE_BACKEND_AUTOLOAD",
                                                               "CONFORMANCE_USER_TORCH_DEVICE_BACKEND_AUTOLOAD")}
    env.update(PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SLURM_JOB_ID="4243", SLURM_JOB_NODELIST="localhost", RANK_OUT=str(out))
    logs = _run_slurm_job(tmp_path, plan.slurm_script(2, 2, [str(program)], port=launcher.free_port(), first_core=16),
                          env)
    ranks = sorted(f.read_text() for f in out.iterdir())
    assert ranks == [f"rank {r} core {16 + r % 2} autoload unset" for r in range(4)], logs


def test_slurm_script_keeps_an_argument_with_a_space_or_a_glob_whole(tmp_path):
    """issue 53 defect 5: every argument of the launch reaches the rank as one word, whatever it
    holds: a folder with a space (``--dump_folder '/fsx/my runs'``) and an override pattern with
    a glob (``layers.1[0-9].*``) are not split or expanded on the way through ``srun``."""
    import json
    import os

    bin_dir = _standin_slurm_tools(tmp_path)
    out = tmp_path / "argv"
    program = tmp_path / "argv.py"
    program.write_text("import json, os, sys\n"
                       "open(os.path.join(os.environ['ARGV_OUT'], os.environ['RANK']), 'w').write(json.dumps(sys.argv[1:]))\n")
    out.mkdir()
    (tmp_path / "layers.10.x").write_text("")  # a file the glob would match if a shell expanded it
    args = ["--dump_folder", "/fsx/my runs", "--fqns", "layers.1[0-9].*", "it's", "$HOME"]
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SLURM_JOB_ID="4244", SLURM_JOB_NODELIST="localhost", ARGV_OUT=str(out))
    logs = _run_slurm_job(tmp_path, plan.slurm_script(2, 1, [str(program), *args], port=launcher.free_port()), env)
    seen = {f.name: json.loads(f.read_text()) for f in out.iterdir()}
    assert seen == {"0": args, "1": args}, logs


def test_a_run_over_several_nodes_is_listed_by_node_in_the_summary_and_its_bundle(tmp_path):
    """The reports carry the node count and the hosts: summary.md lists a Slurm run with its job
    and each node's host and ranks; a repro bundle's run folder gets one line per node, nodes.json
    and each node's console tail, and the job script as submitted."""
    import json

    from fixtures.launch.culprit import RootCause
    from reports import bundle, summary

    record = tmp_path / "slurm"
    record.mkdir()
    (record / "job.sh").write_text("#!/usr/bin/env bash\n#SBATCH --nodes=2\n")
    consoles = []
    for r in (0, 1):
        consoles.append(record / f"console.node{r}.log")
        consoles[-1].write_text(f"console of node {r}\n")
    outcome = launcher.LaunchOutcome(
        argv=["torchrun", "--node_rank=0"], env_added={}, returncode=1, timed_out=False, wall_s=3.0,
        console_log=consoles[0], node_argvs=[["torchrun", "--node_rank=0"], ["torchrun", "--node_rank=1"]],
        launcher="slurm", hosts=["n1 on vm", "n2 on vm"], node_consoles=[str(c) for c in consoles], job_id="12",
        node_ranks={0: [0], 1: [1]}, root_cause=RootCause(rank=1, signal="SIGKILL", node=1, host="n2 on vm"))
    run = {"description": "dense_native steps=6 nnodes=2", "key": "k", "steps": [], "ok": False,
           "launch": json.loads(json.dumps(outcome.to_dict()))}
    from types import SimpleNamespace

    from reports.run_record import RunRecord

    page = "\n".join(summary._nodes_section(SimpleNamespace(runs=[RunRecord.from_json(run)])))
    assert "## Runs over several nodes" in page
    assert "| `dense_native steps=6 nnodes=2` | slurm | 12 | node 0: n1 on vm ranks [0]; node 1: n2 on vm ranks [1] |" in page
    assert "first failure: rank 1 on node 1 (n2 on vm) (signal SIGKILL)" in launcher.describe_failure(outcome)
    out = tmp_path / "bundle"
    written = {}
    bundle._write_nodes(out, outcome, lambda path, text: written.__setitem__(path.name, text))
    assert json.loads(written["nodes.json"])["nodes"][1] == {"node": 1, "host": "n2 on vm", "ranks": [1],
                                                             "console": str(consoles[1])}
    assert written["node1.console.tail.log"] == "console of node 1\n" and written["job.sh"].startswith("#!")
    assert launcher.LaunchOutcome.from_dict(outcome.to_dict()).root_cause.host == "n2 on vm"
