"""Benchmark: the performance verdict's false-alarm and detection rates, per launch count.

    .venv/bin/python benchmarks/perf_power.py [--simulations N]

The step-time comparison (``fixtures.oracles.performance.compare_step_times``: Welch's t
interval on the log launch medians, flagged when the interval clears no change and the
estimate passes the threshold, INCONCLUSIVE when not flagged but the interval reaches past
it) is applied to:

1. the recorded series (``meta_tests/perf_series.json``: 8 performance sessions of one stack on
   this machine): every split into two groups of n, both ways: an A/A check, where any flag is
   a false alarm;
2. simulated launches: launch medians log-normal around 1 with the launch-to-launch spread the
   recorded series shows (and, for trn2, 2% and 3%, the issue's stakes), steps drawn around
   each launch's median; A/A (false alarms, INCONCLUSIVE) and a true slowdown at the
   threshold, at 1.33x the threshold and at 2x (detection);
3. trn2's thresholds as a stored A/A series gives them (``upgrades.perf_history.aa_policy``),
   drawn at three launch spreads, and the rates a 5-launch check has with them.

Figures only, no assertion. INCONCLUSIVE adds launches in the upgrade check (``--performance-
max-launches``), so its rate is the share of checks that cost more launches, not of wrong verdicts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

from fixtures.oracles.performance import CPU_PERF, TRN2_PERF, compare_step_times  # noqa: E402
from upgrades.perf_history import AA_MARGIN, AA_MIN_LAUNCHES, largest_split_change  # noqa: E402

SERIES = json.loads((REPO / "meta_tests" / "perf_series.json").read_text())


def recorded(n: int, threshold: float) -> tuple[int, int, int, int]:
    """(splits, flagged, inconclusive, intervals excluding 1) over every n-against-n split."""
    launches = [tuple(s["steady_times"]) for s in SERIES]
    counts = [0, 0, 0, 0]
    for picked in itertools.combinations(range(len(launches)), 2 * n):
        for trusted in itertools.combinations(picked, n):
            candidate = [i for i in picked if i not in trusted]
            c = compare_step_times([launches[i] for i in trusted], [launches[i] for i in candidate], threshold)
            counts[0] += 1
            counts[1] += c.flagged
            counts[2] += c.inconclusive
            counts[3] += c.low > 1 or c.high < 1
    return tuple(counts)


def simulated(n: int, threshold: float, sigma: float, ratio: float, runs: int, rng: random.Random) -> tuple[float, float]:
    """(flagged rate, inconclusive rate) of n-against-n checks with a true step-time ratio."""
    flagged = inconclusive = 0
    for _ in range(runs):
        def launch(scale):
            median = scale * math.exp(rng.gauss(0, sigma))
            return tuple(median * math.exp(rng.gauss(0, 0.05)) for _ in range(15))

        c = compare_step_times([launch(1.0) for _ in range(n)], [launch(ratio) for _ in range(n)], threshold)
        flagged += c.flagged
        inconclusive += c.inconclusive
    return flagged / runs, inconclusive / runs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulations", type=int, default=4000)
    args = parser.parse_args(argv)
    logs = [math.log(statistics.median(s["steady_times"])) for s in SERIES]
    sigma = statistics.stdev(logs)
    print(f"recorded series: {len(SERIES)} sessions, launch medians' log spread sigma = {sigma:.3f}")
    print(f"\n1. recorded A/A splits, cpu threshold {CPU_PERF.slower_than:.0%}")
    for n in (2, 3, 4):
        splits, flagged, inconclusive, excluded = recorded(n, CPU_PERF.slower_than)
        print(f"  {n} vs {n}: {splits} splits: false alarms {flagged} ({flagged / splits:.1%}), INCONCLUSIVE "
              f"{inconclusive / splits:.1%}, interval excluding no change {excluded / splits:.1%} (nominal 5%)")
    rng = random.Random(41)
    print(f"\n2. simulated ({args.simulations} checks per cell): flagged rate [INCONCLUSIVE rate]")
    for tier, policy, spreads in (("cpu", CPU_PERF, (sigma,)), ("trn2", TRN2_PERF, (0.02, 0.03))):
        t = policy.slower_than
        for spread in spreads:
            print(f"  {tier}, threshold {t:.0%}, launch spread {spread:.3f}:")
            for n in (3, 5, 7, 9):
                cells = []
                for ratio in (1.0, 1 + t, 1 + 1.33 * t, 1 + 2 * t):
                    f, i = simulated(n, t, spread, ratio, args.simulations, rng)
                    cells.append(f"x{ratio:.3f}: {f:6.1%} [{i:5.1%}]")
                print(f"    {n} launches a side: " + "  ".join(cells))
    print(f"\n3. trn2 thresholds from an A/A series (upgrades.perf_history.aa_policy: {AA_MIN_LAUNCHES} sessions, "
          f"{AA_MARGIN}x the largest split change, at least the {TRN2_PERF.slower_than:.0%} stake), then 5 "
          f"launches a side ({args.simulations // 4} series per spread): derived threshold (median, 90th percentile), "
          "flagged rate [INCONCLUSIVE rate]")
    for spread in (0.01, 0.02, 0.03):
        derived, cells = [], {1.0: [0, 0], 1.1: [0, 0], 1.2: [0, 0]}
        for _ in range(args.simulations // 4):
            series = [math.exp(rng.gauss(0, spread)) for _ in range(AA_MIN_LAUNCHES)]
            t = max(TRN2_PERF.slower_than, round(AA_MARGIN * largest_split_change(series), 4))
            derived.append(t)
            for ratio, cell in cells.items():
                f, i = simulated(5, t, spread, ratio, 1, rng)
                cell[0] += f
                cell[1] += i
        n = len(derived)
        derived.sort()
        print(f"  launch spread {spread:.3f}: threshold {statistics.median(derived):.1%} "
              f"(p90 {derived[int(0.9 * n)]:.1%}); " + "  ".join(
                  f"x{ratio:.2f}: {cell[0] / n:6.1%} [{cell[1] / n:5.1%}]" for ratio, cell in cells.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
