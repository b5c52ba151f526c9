"""Benchmark: the write-up's launch at full size in the Neuron dress rehearsal (CPU stand-ins).

    .venv-rehearsal/bin/python benchmarks/full_size_launch.py [--host trn2.48xlarge] [--ranks N]

Runs one rehearsal session on the host (``--rehearsal-host``) with one launching topology
contract (``test_world_size_is_nproc``: the real torchrun line, one process per logical core,
the tiny model), on a fresh run cache, ``--ranks N`` of the host's cores
(``NEURON_RT_VISIBLE_CORES=0-(N-1)``; default all: 64 on a trn2.48xlarge). While it runs it
samples, every second, the machine's available memory and the session's process tree (its
unique and resident memory, its process count); if available memory falls under
``--floor-gib`` it stops the session and says the launch does not fit this machine.
Prints the figures; asserts nothing. CPU evidence only: never trn2 evidence.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fresh_cache import fresh_run_cache

import psutil

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def sample(pid: int) -> tuple[int, int, int]:
    """(unique bytes, resident bytes, processes) of the tree under ``pid``."""
    uss = rss = n = 0
    for proc in tree(pid):
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        uss += info.uss
        rss += info.rss
        n += 1
    return uss, rss, n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="trn2.48xlarge")
    parser.add_argument("--ranks", type=int, default=None)
    parser.add_argument("--floor-gib", type=float, default=1.5)
    parser.add_argument("-k", dest="select", default="test_world_size_is_nproc")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "NEURON_", "PYTEST_"))}
    if args.ranks:
        env["NEURON_RT_VISIBLE_CORES"] = f"0-{args.ranks - 1}"
    with fresh_run_cache("full-size-") as (tmp, cache):
        cmd = [sys.executable, "-m", "pytest", "conformance", "-m", "trn2 and topology", "-k", args.select, "-q",
               "--neuron-dress-rehearsal", "--rehearsal-host", args.host, "--conformance-cache", str(cache),
               "--report-dir", str(Path(tmp) / "report")]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        peak_uss = peak_rss = peak_procs = 0
        min_available = psutil.virtual_memory().available
        stopped = False
        while proc.poll() is None:
            uss, rss, n = sample(proc.pid)
            available = psutil.virtual_memory().available
            peak_uss, peak_rss, peak_procs = max(peak_uss, uss), max(peak_rss, rss), max(peak_procs, n)
            min_available = min(min_available, available)
            if available < args.floor_gib * 2**30:
                os.killpg(proc.pid, signal.SIGKILL)
                stopped = True
                break
            time.sleep(1.0)
        out = proc.communicate()[0]
        wall = time.monotonic() - started
    tail = [line for line in out.splitlines() if line.strip()][-3:]
    print(f"host {args.host}, ranks {args.ranks or 'all'}: wall {wall:.0f} s, exit {proc.returncode}"
          + (f", STOPPED: available memory fell under {args.floor_gib} GiB" if stopped else ""))
    print(f"  peak of the session's process tree: {peak_procs} processes, unique memory {peak_uss / 2**30:.2f} GiB "
          f"({peak_uss / max(peak_procs, 1) / 2**20:.0f} MiB a process), resident {peak_rss / 2**30:.2f} GiB")
    print(f"  machine: {psutil.virtual_memory().total / 2**30:.1f} GiB, least available {min_available / 2**30:.2f} GiB, "
          f"{psutil.cpu_count()} cores")
    print("  pytest: " + " / ".join(tail))
    return 0


if __name__ == "__main__":
    sys.exit(main())
