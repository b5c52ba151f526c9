"""Repro bundles: for each failed contract, everything needed to replay it elsewhere.

``<report dir>/repro/<test>/`` holds:
  rerun.sh            one line that reruns just this contract
  failure.txt         the failure as pytest reported it
  hypothesis.txt      the falsifying example and reproduction blob, where one applies
  env.json            the environment, secret-like values redacted (names kept)
  inventory.json      the stack inventory
  runs/<key>/         per training run the test used: command.sh (the exact torchrun line
                      with the environment it added; one line per node on several nodes),
                      resolved_config.json (torchtitan's own dump of the resolved config), the
                      log tail of every rank; on several nodes or through a scheduler also
                      nodes.json (back end, job id, each node's host, ranks and console) and each
                      node's console tail; from Slurm the job script it submitted (job.sh)
Every text written is scrubbed of secret values first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from fixtures import repo
from fixtures.session import session_state
from fixtures.rank.run_files import RESOLVED_CONFIG
from fixtures.runs.result import RunResult
from reports import inventory
from reports.layout import bundle_dir, run_record_path
from reports.redact import redact_env, scrub_text
from reports import neuron_debug

TAIL_LINES = 200


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
    except OSError as exc:
        return f"<unreadable: {exc}>\n"


def _hypothesis_text(longrepr: str) -> str | None:
    """Hypothesis's falsifying example and its ``@reproduce_failure`` blob, if any."""
    lines = longrepr.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if "Falsifying example" in line:
            keep.append(line)
            for follow in lines[i + 1:]:
                if not follow.strip():
                    break
                keep.append(follow)
        elif "reproduce_failure" in line:
            keep.append(line)
    return "\n".join(keep) + "\n" if keep else None


def _portable(path: Path) -> str:
    """A path inside the repository as a relative one; elsewhere the path itself (a recorded
    fact of the machine that wrote the bundle, meant to be overridden there)."""
    path = Path(path)
    try:
        return str(path.relative_to(repo.REPO_ROOT))
    except ValueError:
        return str(path)


def rerun_script(item: pytest.Item, trn2) -> str:
    """One command that reruns the contract alone, with the interpreter of the session that
    failed (``PYTHON`` overrides it), from a checkout of the suite (the repository the bundle
    sits in, or ``CONFORMANCE_REPO``): no absolute path but the recorded interpreter and
    model folder, each behind a variable."""
    tier_args, profile = "", "repro"
    if trn2 is not None and item.get_closest_marker("trn2"):
        profile = "repro-trn2"  # bounded: every kernel call is device time (hypothesis_profiles)
        tier_args = (" -m trn2 --neuron-dress-rehearsal" if trn2.rehearsal
                     else ' -m trn2 --trn2-model-dir "${QWEN3_4B_DIR:-' + _portable(trn2.model_dir) + '}"')
    inherited = item.config.getoption("--inherit-expectations", None)
    if inherited:  # an upgrade candidate's session: the same known deviations on rerun
        tier_args += f" --inherit-expectations {shlex.quote(inherited)}"
    return ("#!/usr/bin/env bash\n"
            f"# Reruns {item.nodeid} alone, as the session that failed ran it (its interpreter is\n"
            "# recorded below: PYTHON=... overrides it; CONFORMANCE_REPO=... names the checkout).\n"
            "set -euo pipefail\n"
            'cd "${CONFORMANCE_REPO:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}"\n'
            f'exec "${{PYTHON:-{_portable(Path(sys.executable))}}}" -m pytest {shlex.quote(item.nodeid)}'
            f"{tier_args} -p no:xdist --hypothesis-profile {profile}\n")


def _write_nodes(out: Path, launch, write) -> None:
    """Where a launch over several nodes (or through a scheduler) ran: its back end, job, each
    node's host, global ranks and console (tail), and the Slurm job script as submitted."""
    write(out / "nodes.json", json.dumps({
        "launcher": launch.launcher, "job_id": launch.job_id, "scheduler_end": launch.scheduler_end,
        "nodes": [{"node": r, "host": host, "ranks": launch.node_ranks.get(r), "console": console}
                  for r, (host, console) in enumerate(zip(launch.hosts, launch.node_consoles))]}, indent=1))
    for r, console in enumerate(launch.node_consoles):
        write(out / f"node{r}.console.tail.log", _tail(Path(console)))
    job_script = Path(launch.console_log).parent / "job.sh"
    if launch.job_id is not None and job_script.exists():
        write(out / "job.sh", job_script.read_text())


def write_bundle(report_dir: Path, item: pytest.Item, report: pytest.TestReport,
                 session_started: float = 0.0) -> Path:
    env = dict(os.environ)

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scrub_text(text, env))

    target = bundle_dir(report_dir, _safe_name(item.nodeid))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    trn2 = session_state.trn2_profile(item.config)
    if trn2 is not None and trn2.rehearsal:
        write(target / "REHEARSAL.txt",
              "This failure comes from a Neuron dress rehearsal: the trn2 tier on CPU against "
              "stand-ins of the Neuron layer (neuron_standins). It is CPU evidence only.\n")
    write(target / "rerun.sh", rerun_script(item, trn2))
    target.joinpath("rerun.sh").chmod(0o755)
    write(target / "failure.txt", report.longreprtext)
    hypothesis = _hypothesis_text(report.longreprtext)
    if hypothesis:
        write(target / "hypothesis.txt", hypothesis)
    write(target / "env.json", json.dumps(redact_env(env), indent=1))
    write(target / "inventory.json", json.dumps(inventory.inventory(), indent=1))
    results = []
    for name, key in item.user_properties:
        if name != "run":
            continue
        out = target / "runs" / key
        record = run_record_path(report_dir, key)
        try:
            result = RunResult.load(record)
        except OSError:
            write(out / "MISSING.txt", f"no run record at {record}\n")
            continue
        results.append(result)
        launch = result.launch
        write(out / "command.sh", "\n".join(launch.node_commands if launch.nnodes > 1 else [result.command]) + "\n")
        if launch.nnodes > 1 or launch.launcher != "local":
            _write_nodes(out, launch, write)
        resolved = result.dump_dir / RESOLVED_CONFIG
        if resolved.exists():
            write(out / RESOLVED_CONFIG, resolved.read_text())
        write(out / "console.tail.log", _tail(result.launch.console_log))
        for rank, logs in sorted(result.launch.rank_logs.items()):
            for stream, path in logs.items():
                write(out / f"rank{rank}.{stream}.tail.log", _tail(Path(path)))
    if trn2 is not None and item.get_closest_marker("trn2"):

        neuron_debug.write(target, trn2, results, session_started, report_dir, write)
    return target
