"""The performance rules (``fixtures.oracles.performance``) and the upgrade check's performance verdict
(``upgrades.perf_compare``), on series: the warm-up rule as stated, the noise model on an A/A
pair of real launches (must not flag) and on the same launches with a slowdown and a memory
growth applied (must flag), and the verdicts the page prints.

The real series are ``perf_series.json`` beside this file: the steady steps and peaks of 8
performance sessions of the trusted cpu stack on one machine (``benchmarks/perf_noise.py
--save``), the launches the upgrade check itself would compare.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import subprocess
import sys
from dataclasses import fields, replace

from fixtures.oracles import performance
from fixtures.oracles.performance import CPU_PERF, PerfPolicy
from fixtures.oracles.performance_record import PerformanceRecord, RankRecord
from reports import gate, summary
from reports.perf_history import MachineLoadFigures
from reports.session_report import ContractRecord, MachineRecord, SessionReport
from upgrades import perf_compare, perf_launch, perf_page
from upgrades.perf_launch import Launch
from upgrades.verdict import Finding

pytestmark = pytest.mark.meta

SERIES = json.loads((Path(__file__).parent / "perf_series.json").read_text())


def test_step_one_is_always_warm_up():
    assert performance.warmup_length([0.1] * 20) == 1


def test_settling_steps_are_warm_up_and_a_late_spike_is_not():
    times = [5.0, 0.4, 0.35, 0.3, 0.25] + [0.1] * 30
    times[25] = 0.9  # a busy moment in the second half: noise of the steady state
    # the medians of the next 5 steps: 0.3 from step 2, 0.25 from step 3, 0.1 from step 4
    assert performance.warmup_length(times) == 3
    assert 0.9 in performance.rank_figures(times, [1.0] * len(times), [1.0] * len(times)).steady_times


def test_a_second_compile_in_the_first_half_is_warm_up():
    times = [50.0, 0.1, 0.1, 20.0] + [0.1] * 20  # a graph compiled at step 4
    assert performance.warmup_length(times) == 4


def test_a_short_run_has_no_steady_state():
    fig = performance.rank_figures([1.0] + [0.1] * 7, [1.0] * 8, [1.0] * 8)
    assert not fig.steady and fig.steps - fig.warmup_steps == 7


def test_memory_growth_is_the_slope_per_step_in_mib():
    mem = [1.0 + i * (2 / 1024) for i in range(20)]  # 2 MiB a step
    fig = performance.rank_figures([1.0] + [0.1] * 19, [1.0] * 20, mem)
    assert fig.memory_growth_mib_per_step == pytest.approx(2.0)
    assert fig.peak_memory_gib == mem[-1]


def _launches(indices, scale=1.0):
    return [tuple(t * scale for t in SERIES[i]["steady_times"]) for i in indices]


def test_the_recorded_training_memory_peaks_never_flag_at_the_cpu_threshold():
    """The cpu tier's peak figure is training memory (peak resident size above what the rank
    held before training): six recorded sessions of one stack (``perf_peaks_training_memory.json``,
    ``benchmarks/perf_noise.py --save``) compared 2 against 2 and 3 against 3, interleaved: no
    flag and no inconclusive at ``CPU_PERF.larger_than``; a 20% larger candidate is flagged."""

    peaks = [s["peak_gib"] for s in json.loads((Path(__file__).parent / "perf_peaks_training_memory.json").read_text())]
    threshold = performance.CPU_PERF.larger_than
    for launches in (2, 3):
        for picked in itertools.combinations(range(len(peaks)), 2 * launches):
            trusted, candidate = [peaks[i] for i in picked[0::2]], [peaks[i] for i in picked[1::2]]
            same = performance.compare_peaks(trusted, candidate, threshold)
            assert not same.flagged and not same.inconclusive, same
            assert performance.compare_peaks(trusted, [p * 1.2 for p in candidate], threshold).flagged


def test_the_recorded_a_a_sessions_never_flag():
    """Every 4-against-4 split of the 8 recorded sessions of one stack, both ways: no flag, and
    few inconclusive (they add launches in the upgrade check, benchmarks/perf_power.py measures
    the rate)."""
    inconclusive = 0
    splits = [(t, tuple(i for i in range(8) if i not in t)) for t in itertools.combinations(range(8), 4)]
    for trusted, candidate in splits:
        step = performance.compare_step_times(_launches(trusted), _launches(candidate), CPU_PERF.slower_than)
        assert not step.flagged, step
        inconclusive += step.inconclusive
        peak = performance.compare_peaks([SERIES[i]["peak_gib"] for i in trusted],
                                         [SERIES[i]["peak_gib"] for i in candidate], CPU_PERF.larger_than)
        assert not peak.flagged and not peak.inconclusive, peak
    assert inconclusive <= 0.2 * len(splits), inconclusive


def test_a_thirty_percent_slowdown_is_flagged_with_its_interval():
    step = performance.compare_step_times(_launches([0, 2, 4]), _launches([1, 3, 5], scale=1.3),
                                          CPU_PERF.slower_than)
    assert step.flagged and 1.15 < step.ratio < 1.45 and step.low > 1.0 and step.high > step.ratio
    assert step.change().startswith("slower by ") and "interval [+" in step.change()


def test_a_slowdown_within_the_threshold_is_not_flagged():
    step = performance.compare_step_times(_launches([0, 2, 4]), _launches([1, 3, 5], scale=1.08),
                                          CPU_PERF.slower_than)
    assert not step.flagged


def test_the_interval_is_the_same_for_the_same_figures():
    a = performance.compare_step_times(_launches([0, 2]), _launches([1, 3]), 0.1)
    b = performance.compare_step_times(_launches([0, 2]), _launches([1, 3]), 0.1)
    assert (a.low, a.high) == (b.low, b.high)


def _rank(times, peak, growth, tokens=2048) -> RankRecord:
    return RankRecord(steady_times=tuple(times), step_time_s=performance.statistics.median(times),
                      tokens_per_s=tokens / performance.statistics.median(times), tokens_per_step=tokens,
                      peak_memory_gib=peak, memory_growth_mib_per_step=growth)


def _launch(tmp_path, stack, name, times, peak, growth=0.05, outcome="passed", tokens=2048) -> Launch:
    figures = PerformanceRecord(ranks={"0": _rank(times, peak, growth, tokens),
                                       "1": _rank(times, peak - 0.01, growth, tokens)})
    return Launch(stack, tmp_path / name, figures, outcome)


def _with_ranks(launch: Launch, **ranks: RankRecord) -> Launch:
    """``launch`` with these ranks' figures."""
    return replace(launch, figures=replace(launch.figures, ranks={**launch.figures.ranks, **ranks}))


def _each_rank(launch: Launch, **figures) -> Launch:
    """``launch`` with these figures changed on every rank."""
    return _with_ranks(launch, **{rank: replace(r, **figures) for rank, r in launch.figures.ranks.items()})


def _loaded(launch: Launch, others: float, steal: float = 0.0) -> Launch:
    return replace(launch, machine_load=MachineLoadFigures(others_fraction=others, steal_fraction=steal))


def test_verdicts(tmp_path):
    policy = PerfPolicy(slower_than=0.15, larger_than=0.03, leak_mib_per_step=0.5, why="test")
    base, same = _a_a(tmp_path)
    assert perf_compare.judge(base + same, policy).findings == (Finding.PASS,)
    slow = [_launch(tmp_path, "candidate", f"candidate-{i}", [t * 1.25 for t in SERIES[i]["steady_times"]], 0.88)
            for i in A_A[1]]
    verdict = perf_compare.judge(base + slow, policy)
    assert verdict.findings == (Finding.SLOWER,) and not verdict.passed
    assert perf_compare.judge(base + slow, policy, accepted=True).passed
    leak = [_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], 1.2, growth=2.0)
            for i in A_A[1]]
    verdict = perf_compare.judge(base + leak, policy)
    assert verdict.findings == (Finding.LARGER, Finding.LEAKING) and len(verdict.leaks) == 4
    page = "\n".join(perf_page.render(verdict, policy, base + leak))
    assert "## Performance: LARGER+LEAKING" in page and "larger by" in page and "2.000 MiB per steady step" in page
    noisy = [_launch(tmp_path, "candidate", "candidate-1", [t * 1.6 for t in SERIES[1]["steady_times"]], 0.88),
             *same[1:]]  # one of four launches 60% slower: not clear of the noise, not within the threshold
    verdict = perf_compare.judge(base + noisy, policy)
    assert verdict.findings == (Finding.INCONCLUSIVE,) and not verdict.passed, verdict.comparisons[0]
    assert "too noisy" in "\n".join(perf_page.render(verdict, policy, base + noisy))
    assert verdict.more_launches_could_decide  # noise: another pair may narrow the interval
    died = [Launch("candidate", tmp_path / "candidate-1", None, "failed")]
    verdict = perf_compare.judge(base + died, policy)
    assert verdict.findings == (Finding.NOT_MEASURED,) and "the performance contract failed" in verdict.problems[0]


A_A = ((0, 2, 4, 6), (1, 3, 5, 7))  # the recorded sessions, alternately as trusted and candidate


def _a_a(tmp_path):
    base = [_launch(tmp_path, "trusted", f"trusted-{i}", SERIES[i]["steady_times"], 0.88) for i in A_A[0]]
    same = [_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], 0.88) for i in A_A[1]]
    return base, same


POLICY = PerfPolicy(slower_than=0.15, larger_than=0.03, leak_mib_per_step=0.5, why="test")


def test_every_candidate_step_time_nan_is_not_measured(tmp_path):
    """A renamed torchtitan metric: every step time NaN. Before: PASS (NaN compares false)."""
    base, _ = _a_a(tmp_path)
    nan = [_launch(tmp_path, "candidate", f"candidate-{i}", [float("nan")] * 20, 0.88) for i in A_A[1]]
    nan = [_with_ranks(launch, **{"0": replace(launch.figures.ranks["0"], step_time_s=float("nan"))}) for launch in nan]
    verdict = perf_compare.judge(base + nan, POLICY)
    assert verdict.findings == (Finding.NOT_MEASURED,) and not verdict.passed
    assert any("step_time_s=nan" in p and "candidate session candidate-1" in p for p in verdict.problems)
    page = "\n".join(perf_page.render(verdict, POLICY, base + nan))
    assert "## Performance: NOT MEASURED" in page and "never a pass" in page


def test_memory_of_minus_one_on_both_stacks_is_not_measured(tmp_path):
    """A backend without memory statistics logs -1 on both sides: the ratio is 1. Before: PASS."""
    base = [_launch(tmp_path, "trusted", f"trusted-{i}", SERIES[i]["steady_times"], -1.0) for i in (0, 2, 4)]
    same = [_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], -1.0) for i in (1, 3, 5)]
    base, same = [_each_rank(l, peak_memory_gib=-1.0) for l in base], [_each_rank(l, peak_memory_gib=-1.0) for l in same]
    verdict = perf_compare.judge(base + same, POLICY)
    assert verdict.findings == (Finding.NOT_MEASURED,) and not verdict.passed
    assert sum("peak_memory_gib=-1.0" in p for p in verdict.problems) == 12  # every rank, both stacks (3 launches each here)


def test_a_failed_contract_in_one_launch_against_several_is_not_measured(tmp_path):
    """The candidate's performance contract failed in its one launch, against three trusted
    ones, its figures still recorded. Before: PASS with no problem listed."""
    base, same = _a_a(tmp_path)
    one = [_launch(tmp_path, "candidate", "candidate-1", SERIES[1]["steady_times"], 0.88, outcome="failed")]
    verdict = perf_compare.judge(base + one, POLICY)
    assert verdict.findings == (Finding.NOT_MEASURED,) and not verdict.passed
    assert any("the performance contract failed" in p for p in verdict.problems)
    assert any("unequal launch counts: 4 trusted against 1 candidate" in p for p in verdict.problems)
    # each cause alone is enough: unequal counts of passing launches, a failed contract among equal counts
    assert perf_compare.judge(base + same[:1], POLICY).findings == (Finding.NOT_MEASURED,)
    failed = [*same[:3], _launch(tmp_path, "candidate", "candidate-5", SERIES[5]["steady_times"], 0.88,
                                 outcome="failed")]
    assert perf_compare.judge(base + failed, POLICY).problems == ("candidate session candidate-5: the performance "
                                                                  "contract failed",)
    assert perf_compare.judge(base + one, POLICY, accepted=True).passed  # accepted, and still named
    assert perf_compare.judge(base + same, POLICY).findings == (Finding.PASS,)


def test_the_gate_and_the_summary_say_not_measured(tmp_path):
    """The gate and summary.md apply the same rule to a session's figures."""
    good_rank = _rank(SERIES[0]["steady_times"], 0.88, 0.0)
    nodeid = f"conformance/{perf_launch.PERF_CONTRACT}[cpu]"
    contract = ContractRecord(nodeid, "passed", performance=PerformanceRecord(
        ranks={"0": replace(good_rank, tokens_per_s=float("nan"))}, run="pretrain", warmup_rule="r"))
    good = replace(contract, performance=PerformanceRecord(ranks={"0": good_rank}, run="pretrain", warmup_rule="r"))
    bad_session, good_session = (SessionReport("s", contracts=(c,), machine=MachineRecord(name="m"))
                                 for c in (contract, good))
    lines = gate.performance_against(good_session, bad_session)
    assert lines and "NOT MEASURED" in lines[0] and "tokens_per_s=nan" in lines[0]
    page = "\n".join(summary.performance_section(bad_session))
    assert "NOT MEASURED" in page and "tokens_per_s=nan" in page
    assert "NOT MEASURED" not in "\n".join(summary.performance_section(good_session))


def test_a_session_report_is_read_back(tmp_path):
    figures = PerformanceRecord(ranks={"0": RankRecord(steady_times=(0.1, 0.2), peak_memory_gib=1.0,
                                                       memory_growth_mib_per_step=0.0)})
    SessionReport("s", contracts=(
        ContractRecord(f"conformance/{perf_launch.PERF_CONTRACT}[cpu]", "passed", performance=figures),
        ContractRecord(f"conformance/{perf_launch.LEAK_CONTRACT}[cpu]", "failed"))).write(tmp_path / "report.json")
    launch = perf_launch.read_launch("candidate", tmp_path)
    assert launch.steady_times == (0.1, 0.2) and launch.peak_gib == 1.0 and launch.leak_outcome == "failed"
    assert perf_launch.read_launch("candidate", tmp_path / "absent").outcome == "no report"


def test_an_inconclusive_real_change_is_not_called_noise():
    """A peak 2.7% larger in every launch (interval [+2.6%, +3.0%] against a 3% threshold) is a
    measured change whose size the launches cannot bound below the threshold: the page says so,
    never "too noisy" (a new torch release's larger libraries read as noise before)."""
    c = performance.Comparison("peak_memory_gib", 0.88, 0.904, 1.027, 1.026, 1.030 + 1e-3, 0.03, False, (3, 3))
    assert c.inconclusive
    text = perf_compare.inconclusive_reason(c)
    assert "a real change" in text and "larger by 2.7%" in text and "too noisy" not in text
    noisy = performance.Comparison("step_time_s", 0.09, 0.095, 1.05, 0.97, 1.2, 0.15, False, (3, 3))
    assert "too noisy" in perf_compare.inconclusive_reason(noisy)


def test_the_recorded_warm_up_rule_is_the_codes():
    """report.json's warm-up rule says what warmup_length does: settling steps while the next
    window's median is above the factor, and a first-half compile spike (before, it said 'the
    last first-half step over 1.5x', which the code never applied)."""
    m = 0.1
    settling = [5.0, 0.2, 0.2, 0.2, 0.2, 0.2] + [m] * 20
    assert performance.warmup_length(settling) == 4 and "median of the next 5 steps" in performance.WARMUP_RULE
    spike = [5.0] + [m] * 4 + [2.0] + [m] * 20  # a compile at step 6: 20x the median
    assert performance.warmup_length(spike) == 6 and "first-half step above 10.0x m" in performance.WARMUP_RULE


def test_a_launchs_step_time_is_its_slowest_ranks(tmp_path):
    """Every step waits for the slowest rank: a candidate whose rank 1 is 30% slower is SLOWER
    even where rank 0 is not (before, only rank 0's steps were read), and the page names it."""
    base, same = _a_a(tmp_path)
    slow_rank = [_with_ranks(_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], 0.88),
                             **{"1": _rank([t * 1.3 for t in SERIES[1]["steady_times"]], 0.87, 0.05)}) for i in A_A[1]]
    assert {l.slowest_rank for l in slow_rank} == {"1"}
    verdict = perf_compare.judge(base + slow_rank, POLICY)
    assert verdict.findings == (Finding.SLOWER,), verdict.comparisons[0]
    assert "| `perf/candidate-1` | candidate | 1 |" in "\n".join(perf_page.render(verdict, POLICY, base + slow_rank))


def test_a_busy_machine_makes_the_verdict_inconclusive_with_the_reason(tmp_path):
    """A launch during which other processes took a quarter of the CPU time is timed on another
    machine than its pair: INCONCLUSIVE, with the session named, never a PASS or SLOWER on it."""
    base, same = _a_a(tmp_path)
    base, same = [_loaded(l, 0.01) for l in base], [_loaded(l, 0.01) for l in same]
    assert perf_compare.judge(base + same, POLICY).findings == (Finding.PASS,)
    same[1] = _loaded(same[1], 0.25)
    verdict = perf_compare.judge(base + same, POLICY)
    assert verdict.findings == (Finding.INCONCLUSIVE,) and not verdict.passed and not verdict.more_launches_could_decide
    assert verdict.problems == (f"a busy machine: candidate session {same[1].report_dir.name}: other processes "
                                "used 25% of the machine's CPU time (bound 10%)",)
    assert "step time not judged, a busy machine: candidate session" in "\n".join(
        perf_page.render(verdict, POLICY, base + same))
    same[1] = _loaded(same[1], 0.0, steal=0.2)
    assert "stole 20%" in perf_compare.judge(base + same, POLICY).problems[0]



def test_a_busy_machine_never_keeps_slower_beside_a_memory_verdict(tmp_path):
    """Memory does not depend on a busy CPU, step time does: a candidate slower AND larger, one
    of whose sessions ran on a busy machine, is LARGER with its step time undecided
    (LARGER+INCONCLUSIVE, the step row "not judged"), never SLOWER."""
    base, _ = _a_a(tmp_path)
    worse = [_launch(tmp_path, "candidate", f"candidate-{i}", [t * 1.5 for t in SERIES[i]["steady_times"]], 1.2)
             for i in A_A[1]]
    assert perf_compare.judge(base + worse, POLICY).findings == (Finding.SLOWER, Finding.LARGER)
    worse[0] = _loaded(worse[0], 0.3)
    verdict = perf_compare.judge(base + worse, POLICY)
    assert verdict.findings == (Finding.LARGER, Finding.INCONCLUSIVE) and not verdict.step_judged and not verdict.passed
    page = "\n".join(perf_page.render(verdict, POLICY, base + worse))
    assert "not judged (below)" in page and "| **yes** |" in page  # the memory row still flagged


def test_another_amount_of_work_per_step_leaves_step_time_unjudged_and_named(tmp_path):
    """A candidate whose steps process another number of tokens (a changed default batch,
    packing or sequence length) is not SLOWER or PASS on step time: its steps are other work.
    The verdict is INCONCLUSIVE with both stacks' tokens per step named, and each session's
    tokens per step is on the page; equal work within the throughput figure's rounding is
    judged as before."""
    base, same = _a_a(tmp_path)
    assert perf_compare.work_changed(base + same) is None
    rounded = [_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], 0.88, tokens=2048.4)
               for i in A_A[1]]
    assert perf_compare.judge(base + rounded, POLICY).findings == (Finding.PASS,)
    doubled = [_launch(tmp_path, "candidate", f"candidate-{i}", [t * 1.9 for t in SERIES[i]["steady_times"]], 0.88,
                       tokens=4096) for i in A_A[1]]
    verdict = perf_compare.judge(base + doubled, POLICY)
    assert verdict.findings == (Finding.INCONCLUSIVE,) and not verdict.step_judged and not verdict.passed
    assert verdict.problems == ("another amount of work per step: the trusted stack's steps processed [4096] tokens, "
                                "the candidate's [8192] (all ranks; a changed batch, packing or sequence length): "
                                "their step times measure different work",)
    page = "\n".join(perf_page.render(verdict, POLICY, base + doubled))
    assert "step time not judged, another amount of work per step" in page and "| 8192 |" in page
    assert not verdict.more_launches_could_decide and "More launches in this series cannot decide" in page


def test_the_machine_load_around_a_session_is_measured():
    load = perf_launch.MachineLoad()
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
    figures = load.during()
    assert {f.name for f in fields(figures)} == {"wall_s", "others_fraction", "steal_fraction", "loadavg_1m_end"}
    assert figures.wall_s > 0 and 0 <= figures.others_fraction <= 1 and figures.steal_fraction >= 0


def test_sessions_run_in_abba_order_and_more_pairs_extend_the_series(tmp_path, monkeypatch):
    """Pairs alternate which stack goes first (ABBA), and an inconclusive check's extra pair is
    numbered after the first ones: the same series, never a new one."""
    ran = []
    monkeypatch.setattr(perf_launch.subprocess, "run", lambda cmd, **kw: ran.append(cmd[cmd.index("--report-dir") + 1]))
    first = perf_launch.interleaved(Path("t"), Path("c"), tmp_path, 2, say=lambda _: None)
    more = perf_launch.interleaved(Path("t"), Path("c"), tmp_path, 1, say=lambda _: None, start=2)
    assert [Path(r).name for r in ran] == ["trusted-1", "candidate-1", "candidate-2", "trusted-2", "trusted-3",
                                           "candidate-3"]
    assert [l.stack for l in first + more] == ["trusted", "candidate", "candidate", "trusted", "trusted", "candidate"]
    assert all(l.outcome == "no report" and l.machine_load is not None for l in first + more)


# Added after mutation testing (benchmarks/mutation.md): each kills mutants of
# fixtures/oracles/performance.py and upgrades/perf_compare.py that the tests above let survive.


def test_the_warm_up_rule_at_its_edges():
    """The rule of the module docstring at each edge: two steps are one of warm-up; a step
    exactly at the warm-up factor or exactly at the compile factor is steady; the warm-up ends
    at the first steady window (counted step by step) and never runs past the first half; a
    compile anywhere in the first half is warm-up."""
    assert performance.warmup_length([5.0, 0.1]) == 1
    assert performance.warmup_length([10.0, 3.0, 3.0, 3.0, 3.0, 3.0] + [2.0] * 14) == 1  # median 3.0 == 1.5 x 2.0
    assert performance.warmup_length([50.0, 1.0, 1.0, 10.0] + [1.0] * 20) == 1  # 10.0 == 10 x 1.0
    assert performance.warmup_length([5.0, 0.4, 0.4, 0.4] + [0.1] * 20) == 2
    assert performance.warmup_length([5.0] * 10 + [1.0] * 3 + [0.1] * 7) == 10  # still settling at the half
    times = [50.0] + [0.1] * 29
    times[12] = 20.0  # a compile after the first third, inside the first half
    assert performance.warmup_length(times) == 13


def test_the_interval_holds_each_sides_noise_and_is_pinned_by_the_data():
    """Welch's interval takes each stack's launch-to-launch spread: noise in the candidate's
    launches, or in the trusted's, widens it around the ratio; the same figures always give the
    same interval (these, computed once)."""
    constant = [(1.0,) * 9] * 3
    noisy = [(0.9,) * 9, (1.0,) * 9, (1.2,) * 9]
    candidate_noise = performance.compare_step_times(constant, noisy, 0.1)
    assert candidate_noise.low < candidate_noise.ratio < candidate_noise.high
    trusted_noise = performance.compare_step_times(noisy, constant, 0.1)
    assert trusted_noise.low < trusted_noise.ratio < trusted_noise.high
    assert (candidate_noise.low, candidate_noise.high) == pytest.approx((1 / trusted_noise.high, 1 / trusted_noise.low))
    pinned = performance.compare_step_times(_launches([0, 2]), _launches([1, 3]), 0.1)
    assert (pinned.low, pinned.high) == pytest.approx((0.3343954678039889, 2.8852584456125467), rel=1e-12)


def test_a_flag_needs_the_whole_interval_above_one_and_the_change_above_the_threshold():
    """Step times and peaks alike: an interval that reaches below 1 does not flag however large
    the change; a change exactly at the threshold does not flag; a change clear of the noise but
    within the threshold does not flag; and the peak ratio is candidate over trusted."""
    wide = performance.compare_step_times([(1.0,) * 9] * 3, [(1.0,) * 9, (2.0,) * 9, (2.0,) * 9], 0.1)
    assert wide.low < 1 < 1.5 < wide.ratio and not wide.flagged
    exact = performance.compare_step_times([(1.0,) * 9] * 3, [(1.25,) * 9] * 3, 0.25)
    assert exact.low == pytest.approx(1.25) and exact.ratio == pytest.approx(1.25)
    assert not performance.compare_step_times([(1.0,) * 9] * 3, [(1.25,) * 9] * 3, 0.25 + 1e-9).flagged
    assert performance.compare_step_times([(1.0,) * 9] * 3, [(1.25,) * 9] * 3, 0.2).flagged
    peak = performance.compare_peaks([2.0], [2.2], 0.03)
    assert (peak.trusted, peak.candidate) == (2.0, 2.2)
    assert (peak.ratio, peak.low, peak.high) == pytest.approx((1.1, 1.1, 1.1)) and peak.flagged
    assert not performance.compare_peaks([1.0, 1.0], [1.0, 2.0, 2.0], 0.03).flagged  # low == 1
    assert not performance.compare_peaks([1.0], [1.25], 0.25).flagged  # ratio == 1 + threshold
    within = performance.compare_peaks([1.0], [1.01], 0.03)  # clear of the noise, within the threshold
    assert within.low > 1 and not within.flagged and not within.inconclusive


def test_a_comparison_over_launches_needs_two_a_side_and_one_launch_is_a_figure_only():
    with pytest.raises(ValueError, match="needs 2 launches a side, got 1 and 2"):
        performance.compare_step_times(_launches([0]), _launches([1, 3]), 0.1)
    one = performance.compare_step_times_one_launch(tuple(SERIES[0]["steady_times"]), tuple(SERIES[1]["steady_times"]))
    assert one.launches == (1, 1) and not one.flagged and one.threshold == 0.0 and one.low < one.ratio < one.high
    assert performance.t975(4) == 2.776 and performance.t975(4.9) == 2.776 and performance.t975(22) == 2.086
    assert performance.t975(0.5) == 12.706 and performance.t975(121) == 1.960


def test_an_interval_reaching_exactly_the_threshold_is_not_inconclusive():
    at = performance.Comparison("step_time_s", 1.0, 1.0, 1.0, 0.9, 1.25, 0.25, flagged=False, launches=(3, 3))
    assert not at.inconclusive
    assert performance.Comparison("step_time_s", 1.0, 1.0, 1.0, 0.9, 1.26, 0.25, flagged=False,
                                  launches=(3, 3)).inconclusive


def test_unmeasured_names_each_figure_as_recorded():
    """What unmeasured says, word for word: no rank; a missing figure ('missing'), a zero one
    (not positive), a non-finite growth, a steady series with one bad step (the first three
    shown, "..." only past three), several problems of one rank joined by ", "."""
    assert performance.unmeasured({}) == ["no rank recorded figures"]
    good = _rank(SERIES[0]["steady_times"], 0.88, 0.0)
    assert performance.unmeasured({"0": good}) == []
    head = "rank 0: missing, non-finite or not positive: "
    assert performance.unmeasured({"0": replace(good, tokens_per_s=None)}) == [head + "tokens_per_s='missing'"]
    assert performance.unmeasured({"0": replace(good, peak_memory_gib=0.0)}) == [head + "peak_memory_gib=0.0"]
    assert performance.unmeasured({"0": replace(good, memory_growth_mib_per_step=float("nan"))}) == [
        head + "memory_growth_mib_per_step=nan"]
    assert performance.unmeasured({"0": replace(good, steady_times=(0.1, 0.2, float("nan")))}) == [
        head + "steady_times=[0.1, 0.2, nan]"]
    assert performance.unmeasured({"0": replace(good, steady_times=(0.1, 0.2, 0.3, float("nan")))}) == [
        head + "steady_times=[0.1, 0.2, 0.3]..."]
    assert performance.unmeasured({"0": replace(good, steady_times=(0.1, 0.2, 0.3, 0.4, float("nan")))}) == [
        head + "steady_times=[0.1, 0.2, 0.3]..."]
    assert performance.unmeasured({"0": replace(good, peak_memory_gib=-1.0, memory_growth_mib_per_step=None)}) == [
        head + "peak_memory_gib=-1.0, memory_growth_mib_per_step=None"]


def test_a_pass_passes_and_one_stack_alone_is_named(tmp_path):
    """The verdict PASS is a pass (not only the word); launches of one stack alone are NOT
    MEASURED with both reasons; a growth exactly at the leak bound is no leak."""
    base, same = _a_a(tmp_path)
    assert perf_compare.judge(base + same, POLICY).passed
    alone = perf_compare.judge(same, POLICY)
    assert alone.findings == (Finding.NOT_MEASURED,) and alone.problems == (
        "unequal launch counts: 0 trusted against 4 candidate sessions (the interleaved design compares equal numbers)",
        "no launch of one of the stacks")
    at_bound = [_launch(tmp_path, "candidate", f"candidate-{i}", SERIES[i]["steady_times"], 0.88,
                        growth=POLICY.leak_mib_per_step) for i in A_A[1]]
    verdict = perf_compare.judge(base + at_bound, POLICY)
    assert verdict.findings == (Finding.PASS,) and verdict.leaks == ()


# Added after mutation testing (round 2, benchmarks/mutation.md): each kills mutants of
# fixtures/oracles/performance.py and upgrades/perf_compare.py that the tests above let survive.


def _launches_whose_interval_starts_at_one() -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    """Two trusted launches of 1.0 s and two candidate ones whose Welch interval's lower end is
    exactly 1.0, found on this machine's libm (bisection, then the neighbouring floats)."""
    trusted = [(1.0,), (1.0,)]
    for c2 in (1.2, 1.12, 1.1, 1.3, 1.25, 1.15, 1.4, 1.5, 1.05, 1.22):
        def low(x):
            return performance.compare_step_times(trusted, [(x,), (c2,)], 0.0).low
        lo, hi = 1.0, c2
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if low(mid) > 1 else (mid, hi)
        for k in range(-5, 6):
            if low(hi + k * 2 ** -52) == 1.0:
                return trusted, [(hi + k * 2 ** -52,), (c2,)]
    pytest.fail("found no launches whose interval starts at exactly 1.0 with this libm")


def test_a_change_exactly_at_the_threshold_or_an_interval_from_exactly_one_does_not_flag():
    """Over launches, as for peaks: a candidate exactly at the threshold (the threshold taken
    as its own ratio - 1, exact in floats) is within it, however clear of the noise; an interval
    whose lower end is exactly 1.0 still holds no change, so a slowdown on it does not flag. The
    page's trusted and candidate columns are each side's (geometric mean of launch medians)."""
    ratio = performance.compare_step_times([(1.0,) * 5] * 2, [(1.15,) * 5] * 2, 0.15).ratio
    at = performance.compare_step_times([(1.0,) * 5] * 2, [(1.15,) * 5] * 2, ratio - 1)
    assert at.ratio == 1 + at.threshold and at.low > 1 and not at.flagged
    assert performance.compare_step_times([(1.0,) * 5] * 2, [(1.15,) * 5] * 2, 0.149).flagged
    trusted, candidate = _launches_whose_interval_starts_at_one()
    touching = performance.compare_step_times(trusted, candidate, 0.01)
    assert touching.low == 1.0 and touching.ratio > 1.05 and not touching.flagged
    sides = performance.compare_step_times([(0.1,) * 5, (0.1,) * 5], [(0.2,) * 5, (0.2,) * 5], 0.1)
    assert (sides.trusted, sides.candidate) == pytest.approx((0.1, 0.2))
    assert performance.t975(120) == 1.980 and performance.t975(120.5) == 1.960  # the table's last row, then z


def test_the_one_launch_figure_holds_both_sides_step_noise_and_is_reproducible():
    """The gate's one-launch figure: a bootstrap over each side's steps (jitter in the
    candidate's steps alone, or in the trusted's alone, widens the interval), the same line for
    the same reports every time, a step-time change the gate can print, both medians, and
    never a verdict (threshold 0, flagged false in its record)."""
    steady, jittery = (0.1,) * 30, tuple(0.08 + 0.002 * (i % 20) for i in range(30))
    for trusted, candidate in ((steady, jittery), (jittery, steady)):
        one = performance.compare_step_times_one_launch(trusted, candidate)
        assert one.low < one.ratio < one.high, one
    one = performance.compare_step_times_one_launch(tuple(SERIES[0]["steady_times"]), tuple(SERIES[1]["steady_times"]))
    again = performance.compare_step_times_one_launch(tuple(SERIES[0]["steady_times"]), tuple(SERIES[1]["steady_times"]))
    assert (one.low, one.high) == (again.low, again.high)
    assert one.figure == "step_time_s" and one.change().startswith(("slower by ", "faster by "))
    assert (one.trusted, one.candidate) == (performance.statistics.median(SERIES[0]["steady_times"]),
                                            performance.statistics.median(SERIES[1]["steady_times"]))
    assert one.ratio == one.candidate / one.trusted
    record = one.to_json()
    assert record["flagged"] is False and record["threshold"] == 0.0 and record["launches"] == (1, 1)


def test_the_slowest_rank_is_chosen_by_its_time_and_no_steady_step_is_no_time(tmp_path):
    """The launch's step time is its slowest rank's, whichever rank that is (rank 0 here, not
    the highest-numbered); a launch whose ranks recorded no steady step has no step time
    (an empty series that measurement_problems reports), never a crash."""
    launch = _with_ranks(_launch(tmp_path, "candidate", "c", SERIES[0]["steady_times"], 0.88),
                         **{"0": _rank([t * 1.3 for t in SERIES[0]["steady_times"]], 0.88, 0.05)})
    assert launch.slowest_rank == "0"
    assert launch.steady_times == tuple(t * 1.3 for t in SERIES[0]["steady_times"])
    empty = Launch("candidate", tmp_path / "e", PerformanceRecord(ranks={"0": RankRecord()}), "passed")
    assert empty.slowest_rank is None and empty.steady_times == ()


def test_a_machine_load_at_its_bound_is_not_busy_and_work_at_the_rounding_bound_is_the_same(tmp_path):
    """The bounds are inclusive: others' CPU time of exactly 10%, or steal of exactly 5%, is not
    a busy machine; tokens per step that differ by exactly TOKENS_RTOL of the larger (2 of
    2000) are the same work, 4 of 2000 are not."""
    launch = _loaded(_launch(tmp_path, "candidate", "c", SERIES[0]["steady_times"], 0.88), perf_compare.BUSY_OTHERS,
                     steal=perf_compare.BUSY_STEAL)
    assert perf_compare.busy(launch) is None
    trusted = [_launch(tmp_path, "trusted", f"t{i}", SERIES[i]["steady_times"], 0.88, tokens=1000) for i in A_A[0]]
    for per_rank, same in ((999, True), (998, False)):  # two ranks: 1998 (2 of 2000) and 1996 (4 of 2000)
        candidate = [_launch(tmp_path, "candidate", f"c{i}", SERIES[i]["steady_times"], 0.88, tokens=per_rank)
                     for i in A_A[1]]
        assert (perf_compare.work_changed(trusted + candidate) is None) == same, per_rank


def test_the_inconclusive_reasons_word_for_word():
    """The page's two readings of an inconclusive figure, whole: a real change (interval wholly
    above 1) of uncertain size, and noise (the interval holds no change, also when its lower
    end is exactly 1.0)."""
    real = performance.Comparison("peak_memory_gib", 0.88, 0.904, 1.027, 1.026, 1.031, 0.03, False, (3, 3))
    assert perf_compare.inconclusive_reason(real) == (
        f"peak_memory_gib: a real change ({real.change()}: the whole interval is beyond no change), its estimate "
        "within the 3% threshold but its interval reaching past it: the launches cannot say whether it stays within")
    touching = performance.Comparison("step_time_s", 0.09, 0.095, 1.05, 1.0, 1.2, 0.15, False, (3, 3))
    assert perf_compare.inconclusive_reason(touching) == (
        f"step_time_s: {touching.change()}: the interval spans no change and reaches past the 15% threshold: these "
        "launches are too noisy to say the candidate is within it")
