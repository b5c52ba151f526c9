"""Repro bundles: for each failed contract, everything needed to replay it elsewhere.

``<report dir>/repro/<test>/`` holds:
  rerun.sh            one line that reruns just this contract
  failure.txt         the failure as pytest reported it
  hypothesis.txt      the falsifying example and reproduction blob, where one applies
  env.json            the environment, secret-like values redacted (names kept)
  inventory.json      the stack inventory
  runs/<key>/         per training run the test used: command.sh (the exact torchrun line
                      with the environment it added), resolved_config.json (torchtitan's
                      own dump of the resolved config), the log tail of every rank
Every text written is scrubbed of secret values first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from fixtures import runs
from reports import inventory
from reports.redact import redact_env, scrub_text

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


def write_bundle(report_dir: Path, item: pytest.Item, report: pytest.TestReport) -> Path:
    env = dict(os.environ)

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scrub_text(text, env))

    target = report_dir / "repro" / _safe_name(item.nodeid)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    python = shlex.quote(str(runs.REPO_ROOT / ".venv" / "bin" / "python"))
    trn2 = getattr(item.config, "_conformance_trn2", None)
    tier_args = ""
    if trn2 is not None and item.get_closest_marker("trn2"):
        tier_args = (" -m trn2 --neuron-dress-rehearsal" if trn2.rehearsal
                     else f" -m trn2 --trn2-model-dir {shlex.quote(str(trn2.model_dir))}")
    if trn2 is not None and trn2.rehearsal:
        write(target / "REHEARSAL.txt",
              "This failure comes from a Neuron dress rehearsal: the trn2 tier on CPU against "
              "stand-ins of the Neuron layer (meta_tests/neuron_standin). It is CPU evidence only.\n")
    write(target / "rerun.sh",
          f"cd {shlex.quote(str(runs.REPO_ROOT))} && {python} -m pytest "
          f"{shlex.quote(item.nodeid)}{tier_args} -p no:xdist --hypothesis-profile repro\n")
    write(target / "failure.txt", report.longreprtext)
    hypothesis = _hypothesis_text(report.longreprtext)
    if hypothesis:
        write(target / "hypothesis.txt", hypothesis)
    write(target / "env.json", json.dumps(redact_env(env), indent=1))
    write(target / "inventory.json", json.dumps(inventory.inventory(), indent=1))
    for name, value in item.user_properties:
        if name != "run":
            continue
        run = json.loads(value)
        run_dir = Path(run["run_dir"])
        out = target / "runs" / run["key"]
        try:
            result = json.loads((run_dir / "result.json").read_text())
        except OSError:
            write(out / "MISSING.txt", f"no result.json under {run_dir}\n")
            continue
        launch = result["launch"]
        write(out / "command.sh", launch["command"] + "\n")
        resolved = run_dir / "dump" / runs.RESOLVED_CONFIG
        if resolved.exists():
            write(out / runs.RESOLVED_CONFIG, resolved.read_text())
        write(out / "console.tail.log", _tail(Path(launch["console_log"])))
        for rank, logs in launch["rank_logs"].items():
            for stream, path in logs.items():
                write(out / f"rank{rank}.{stream}.tail.log", _tail(Path(path)))
    return target
