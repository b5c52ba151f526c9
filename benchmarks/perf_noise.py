"""Benchmark: the noise of the performance figures, and the A/A false-alarm rate of the
upgrade check's comparison (``upgrades.perf_compare``, its sessions ``upgrades.perf_launch``).

    .venv/bin/python benchmarks/perf_noise.py [--sessions 8] [--launches 3] [--tier cpu]
                                              [--save FILE] [--from FILE]

Runs ``--sessions`` performance sessions of one stack (``pytest conformance/test_performance.py
-m "<tier> and perf" --fresh-runs``, each a real launch of the tier's performance run), then
compares every way of picking ``--launches`` of them as "trusted" and ``--launches`` others as
"candidate" (interleaved picks), as the upgrade check does. The same stack against itself
must not flag: every flag is a false alarm. Prints each session's steady median, spread and
peak memory, the spread of the A/A ratios, and the false-alarm rate at the tier's thresholds.
``--save`` writes the sessions' steady steps and peaks (what the meta tests replay);
``--from`` reads such a file instead of launching. Figures only, no assertion.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

from fixtures.oracles import performance  # noqa: E402
from upgrades import perf_launch  # noqa: E402


def measure(sessions: int, tier: str) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory(prefix="perf-noise-", dir=REPO / ".cache") as tmp:
        for index in range(sessions):
            report_dir = Path(tmp) / f"s{index}"
            cmd = perf_launch.session_command(Path(sys.executable), tier, report_dir, [])
            subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            launch = perf_launch.read_launch("trusted", report_dir)
            if not launch.figures:
                print(f"session {index}: no figures ({launch.outcome})")
                continue
            out.append({"steady_times": list(launch.steady_times), "peak_gib": launch.peak_gib,
                        "growth_mib_per_step": launch.growth_mib_per_step})
            print(f"session {index}: steady median {statistics.median(launch.steady_times):.4f} s, "
                  f"p10-p90 {performance._quantile(list(launch.steady_times), 0.1):.4f}-"
                  f"{performance._quantile(list(launch.steady_times), 0.9):.4f} s, peak {launch.peak_gib:.4f} GiB, "
                  f"growth {launch.growth_mib_per_step:.3f} MiB/step", flush=True)
    return out


def false_alarms(sessions: list[dict], launches: int, policy: performance.PerfPolicy) -> dict:
    ratios, step_flags, peak_flags, pairs, inconclusive = [], 0, 0, 0, 0
    indices = range(len(sessions))
    for picked in itertools.combinations(indices, 2 * launches):
        trusted, candidate = picked[0::2], picked[1::2]  # interleaved, as the upgrade check runs them
        step = performance.compare_step_times([tuple(sessions[i]["steady_times"]) for i in trusted],
                                              [tuple(sessions[i]["steady_times"]) for i in candidate],
                                              policy.slower_than)
        peak = performance.compare_peaks([sessions[i]["peak_gib"] for i in trusted],
                                         [sessions[i]["peak_gib"] for i in candidate], policy.larger_than)
        ratios.append(step.ratio)
        step_flags += step.flagged
        inconclusive += step.inconclusive or peak.inconclusive
        peak_flags += peak.flagged
        pairs += 1
    return {"comparisons": pairs, "step_false_alarms": step_flags, "peak_false_alarms": peak_flags,
            "inconclusive": inconclusive,
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--tier", default="cpu")
    parser.add_argument("--save", type=Path)
    parser.add_argument("--from", dest="source", type=Path)
    args = parser.parse_args()
    sessions = json.loads(args.source.read_text()) if args.source else measure(args.sessions, args.tier)
    if args.save:
        args.save.write_text(json.dumps(sessions) + "\n")
    policy = performance.TRN2_PERF if args.tier == "trn2" else performance.CPU_PERF
    medians = [statistics.median(s["steady_times"]) for s in sessions]
    print(f"{len(sessions)} sessions: steady medians {min(medians):.4f}-{max(medians):.4f} s "
          f"(spread {(max(medians) / min(medians) - 1) * 100:.1f}%); peaks "
          f"{min(s['peak_gib'] for s in sessions):.4f}-{max(s['peak_gib'] for s in sessions):.4f} GiB; growth "
          f"{min(s['growth_mib_per_step'] for s in sessions):.3f}-{max(s['growth_mib_per_step'] for s in sessions):.3f} MiB/step")
    if len(sessions) >= 2 * args.launches:
        result = false_alarms(sessions, args.launches, policy)
        print(f"A/A, {args.launches} against {args.launches} interleaved: {result['comparisons']} comparisons, "
              f"step time ratio {result['ratio_min']:.3f}-{result['ratio_max']:.3f}, false alarms: step time "
              f"{result['step_false_alarms']}, peak memory {result['peak_false_alarms']}, inconclusive "
              f"{result['inconclusive']} "
              f"(thresholds {policy.slower_than:.0%}, {policy.larger_than:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
