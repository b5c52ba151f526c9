"""What a failed trn2 contract's repro bundle adds for the Neuron layer (``neuron/``).

- ``neuron-ls.start.txt`` / ``neuron-ls.at-failure.txt``: ``neuron-ls -a`` when the session
  started (taken by the report plugin) and when the contract failed: which processes held
  the devices;
- ``environment.txt``: every ``NEURON_*`` / ``TORCH_NEURONX_*`` setting the session and its
  ranks had (``NEURON_RT_LOG_LEVEL`` among them, or the runtime's default when unset);
- ``runtime-lines.txt``: the runtime's and the compiler wrapper's lines in the ranks' logs
  (``NRT:``, ``NCC_``, ``||NCC_WRAPPER||``), and the system log's Neuron lines where the
  system log is readable (``/var/log/syslog``, ``/var/log/messages``, ``journalctl``): the
  runtime logs to syslog (aws-neuron-sdk neuron-runtime/guides/configuration-guide.rst);
- ``compile-cache.txt``: the NEFF paths the logs name and the compile-cache entries written
  since the session started (``NEURON_COMPILE_CACHE_URL``);
- ``core-dumps.txt``: core dumps written since the session started
  (``NEURON_RT_LOCAL_CORE_DUMP_DIRECTORY``, default ``/tmp/neuron-core-dump``, per
  neuron-runtime/about/core-dump.rst), listed, not copied;
- ``debug-dir.txt``: TorchNeuron's compiler artifacts written since the session started in
  ``TORCH_NEURONX_DEBUG_DIR`` when the session or its ranks set it, listed, not copied.
In the dress rehearsal the stand-ins produce the same sources (neuron-ls -a, the compiler
wrapper's lines and cache entries), so this code runs there too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from fixtures.rank.neuron_env import find_neuron_ls

RUNTIME_LINE = re.compile(r"NRT:|NCC_|\|\|NCC_WRAPPER\|\||nrt_|neuron-rt", re.I)
SYSTEM_LOGS = (Path("/var/log/syslog"), Path("/var/log/messages"))
CORE_DUMP_DEFAULT = "/tmp/neuron-core-dump"
START_SNAPSHOT = "neuron-ls.start.txt"


def neuron_ls_all(env: dict[str, str] | None = None) -> str:
    """``neuron-ls -a``: the one on PATH, else in /opt/aws/neuron/bin (``find_neuron_ls``)."""
    neuron_ls, where = find_neuron_ls(os.environ if env is None else env)
    if neuron_ls is None:
        return f"neuron-ls -a could not run: neuron-ls {where}\n"
    try:
        proc = subprocess.run([neuron_ls, "-a"], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"neuron-ls -a could not run: {exc}\n"
    return proc.stdout + (f"\n[exit {proc.returncode}] {proc.stderr}" if proc.returncode else "")


def _settings(tier) -> str:
    session = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    ranks = {k: v for k, v in tier.rank_env if k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    lines = ["# the session's", *(f"{k}={v}" for k, v in session.items()), "# added for every rank",
             *(f"{k}={v}" for k, v in ranks.items())]
    if "NEURON_RT_LOG_LEVEL" not in {**session, **ranks}:
        lines.append("# NEURON_RT_LOG_LEVEL unset: the runtime's default (ERROR on the console, per the docs)")
    return "\n".join(lines) + "\n"


def _system_log_lines(limit: int = 400) -> str:
    for path in SYSTEM_LOGS:
        try:
            lines = [l for l in path.read_text(errors="replace").splitlines() if RUNTIME_LINE.search(l)
                     or "neuron" in l.lower()]
        except OSError:
            continue
        return f"# {path}\n" + "\n".join(lines[-limit:]) + "\n"
    if shutil.which("journalctl"):
        proc = subprocess.run(["journalctl", "--no-pager", "-q", "-n", "5000"], capture_output=True, text=True)
        if proc.returncode == 0:
            lines = [l for l in proc.stdout.splitlines() if "neuron" in l.lower() or RUNTIME_LINE.search(l)]
            return "# journalctl\n" + "\n".join(lines[-limit:]) + "\n"
    return f"# no system log readable here ({', '.join(map(str, SYSTEM_LOGS))}, journalctl)\n"


def _newer_files(root: Path, since: float, limit: int = 200) -> list[str]:
    if not root.is_dir():
        return []
    found = [str(p) for p in root.rglob("*") if p.is_file() and p.stat().st_mtime >= since]
    return sorted(found)[:limit]


def write(target: Path, tier, results, session_started: float, report_dir: Path, write_text) -> None:
    """Write ``target/neuron/*`` for a failed trn2 contract that used ``results`` (RunResults)."""
    out = target / "neuron"
    start = report_dir / "neuron" / START_SNAPSHOT
    write_text(out / START_SNAPSHOT, start.read_text() if start.exists() else "not taken\n")
    write_text(out / "neuron-ls.at-failure.txt", neuron_ls_all())
    write_text(out / "environment.txt", _settings(tier))
    logs = "\n".join(r.all_logs() for r in results)
    rank_lines = [l for l in logs.splitlines() if RUNTIME_LINE.search(l)]
    write_text(out / "runtime-lines.txt", "# the ranks' logs\n" + "\n".join(rank_lines[-400:]) + "\n"
               + _system_log_lines())
    env = dict(tier.rank_env)
    cache = Path(env.get("NEURON_COMPILE_CACHE_URL") or os.environ.get("NEURON_COMPILE_CACHE_URL", "/var/tmp/neuron-compile-cache"))
    neffs = sorted(set(re.findall(r"(\S+\.neff)", logs)))
    write_text(out / "compile-cache.txt", "# NEFF paths in the ranks' logs\n" + "\n".join(neffs)
               + f"\n# entries written in {cache} since the session started\n"
               + "\n".join(_newer_files(cache, session_started)) + "\n")
    dumps = Path(os.environ.get("NEURON_RT_LOCAL_CORE_DUMP_DIRECTORY") or CORE_DUMP_DEFAULT)
    found = _newer_files(dumps, session_started)
    write_text(out / "core-dumps.txt", f"# {dumps}, since the session started\n"
               + ("\n".join(found) if found else "none") + "\n")
    debug_dir = env.get("TORCH_NEURONX_DEBUG_DIR") or os.environ.get("TORCH_NEURONX_DEBUG_DIR")
    artifacts = _newer_files(Path(debug_dir), session_started) if debug_dir else []
    write_text(out / "debug-dir.txt", (f"# TORCH_NEURONX_DEBUG_DIR={debug_dir}, since the session started\n"
                                       + ("\n".join(artifacts) if artifacts else "none") if debug_dir else
                                       "# TORCH_NEURONX_DEBUG_DIR is not set: no compiler artifacts kept") + "\n")
