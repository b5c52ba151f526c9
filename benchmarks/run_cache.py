"""Benchmark: does a session launch each distinct run once, and what does the harness cost?

    .venv/bin/python benchmarks/run_cache.py [--xdist N] [-m MARKEXPR]

Runs one pytest session of the cpu tier on a fresh run cache (assets are reused), then
prints: launches against distinct run configurations and per contract, the session's wall time against the
sum of the launches' own wall times (what running the same torchrun lines bare would
cost), and their ratio. Targets: launches == distinct configs; ratio <= 1.05 for the
launching contracts (``-m "cpu and slow"``, the default). Figures only, no assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fresh_cache import fresh_run_cache

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
from reports.session_report import SessionReport  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--xdist", type=int, default=0, help="pytest-xdist workers (0: none)")
    parser.add_argument("-m", dest="markexpr", default="cpu and slow")
    parser.add_argument("paths", nargs="*", default=["conformance"])
    args = parser.parse_args()
    with fresh_run_cache("bench-") as (tmp, cache):
        cmd = [sys.executable, "-m", "pytest", *args.paths, "-q", "-m", args.markexpr,
               "--conformance-cache", str(cache), "--report-dir", str(Path(tmp) / "report")]
        if args.xdist:
            cmd += ["-n", str(args.xdist)]
        env = {k: v for k, v in os.environ.items() if k != "CONFORMANCE_SESSION_ID"}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        launches_file = cache / "runs" / "launches.jsonl"
        launches = [json.loads(l) for l in launches_file.read_text().splitlines()] if launches_file.exists() else []
        report_file = Path(tmp) / "report" / "report.json"
        contracts = SessionReport.load(report_file).contracts if report_file.exists() else ()
    distinct = {l["key"] for l in launches}
    bare = sum(l["wall_s"] for l in launches)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
    print(f"selection: -m {args.markexpr!r} {' '.join(args.paths)}"
          + (f" with -n {args.xdist}" if args.xdist else ""))
    print(f"pytest: exit {proc.returncode}; {summary}")
    print(f"launches: {len(launches)}  distinct run configs: {len(distinct)}"
          f"  ({'one launch per config' if len(launches) == len(distinct) else 'DUPLICATE LAUNCHES'})")
    print(f"contracts: {len(contracts)}  launches per contract: "
          f"{len(launches) / len(contracts) if contracts else float('nan'):.3f}")
    for l in launches:
        print(f"  {l['wall_s']:6.1f} s  {l['spec']}")
    print(f"session wall: {wall:.1f} s  sum of bare launches: {bare:.1f} s  "
          f"overhead ratio: {wall / bare if bare else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
