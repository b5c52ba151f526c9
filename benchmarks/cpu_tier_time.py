"""Benchmark: where the cpu tier's wall time goes, and the floor real launches put under it.

    .venv/bin/python benchmarks/cpu_tier_time.py [RUN_CACHE]   # default .cache/conformance/runs

Prints, from the run cache's ``launches.jsonl`` (the last session that launched there): the
number of launches, their summed wall time and the longest ones; then, measured here, the
CPU seconds one rank spends importing what it must import before training
(``torchtitan.train`` and the tier's module) and what the torchrun agent spends importing
``torch.distributed.run``; and from those the CPU floor of that session's launches on this
machine's cores, before a single training step. Figures only, no assertion.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

from fixtures.repo import WRITEUP_MODULES_DIR  # noqa: E402  (the repository on sys.path first)


def cpu_seconds(code: str, env: dict[str, str], repeats: int = 3) -> float:
    """Median user+sys CPU seconds of ``python -c code`` in a fresh interpreter."""

    samples = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return sorted(samples)[len(samples) // 2]


def main(cache: Path) -> None:
    rows = [json.loads(line) for line in (cache / "launches.jsonl").read_text().splitlines() if line.strip()]
    session = rows[-1]["session"]
    launches = [r for r in rows if r["session"] == session]
    results = {}
    for result in cache.glob("*/result.json"):
        data = json.loads(result.read_text())
        results[data["key"]] = data
    ranks = []
    for launch in launches:
        spec = results.get(launch["key"], {}).get("spec", {})
        ranks.append(spec.get("nproc") or 2)
    wall = sum(r["wall_s"] for r in launches)
    print(f"session {session}: {len(launches)} launches, {wall:.1f} s of launch wall time, "
          f"{sum(ranks)} ranks in all")
    for r in sorted(launches, key=lambda r: -r["wall_s"])[:5]:
        print(f"  {r['wall_s']:6.1f} s  {r['spec'][:100]}")
    env = {**os.environ, "PYTHONPATH": f"{WRITEUP_MODULES_DIR}{os.pathsep}{REPO}"}
    rank_import = cpu_seconds("import torchtitan.train, fixtures.rank.titan.cpu_qwen3.config_registry", env)
    agent_import = cpu_seconds("import torch.distributed.run", env)
    cores = os.cpu_count() or 1
    floor = (sum(ranks) * rank_import + len(launches) * agent_import) / cores
    print(f"one rank's imports before training: {rank_import:.2f} CPU s; the torchrun agent's: "
          f"{agent_import:.2f} CPU s")
    print(f"imports alone, that session's launches: {sum(ranks) * rank_import + len(launches) * agent_import:.0f} "
          f"CPU s = at least {floor:.0f} s of wall time on {cores} cores, perfectly packed")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".cache" / "conformance" / "runs")
