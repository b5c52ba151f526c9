"""The stored performance history (``upgrades.perf_history``) on synthetic sessions: what is
stored and what is refused, the candidate against the oldest and latest stored stack, trn2's
thresholds from an A/A series (figures only until one exists), and the page's picture."""

from __future__ import annotations

import itertools
import math
from datetime import datetime

import pytest

from fixtures.oracles.performance import TRN2_PERF
from fixtures.oracles.performance_record import PerformanceRecord, RankRecord
from reports.perf_history import MachineLoadFigures, StackHistory
from reports.session_report import MachineRecord, SessionReport
from upgrades import perf_compare, perf_history, perf_page
from upgrades.comparison import Comparison
from upgrades.perf_launch import Launch
from upgrades.result import PerformanceCheck, UpgradeResult
from upgrades.verdict import ContractVerdict, Finding

pytestmark = pytest.mark.meta

MACHINE = MachineRecord(name="test host x2, 24 GiB", host="test host x2, 24 GiB")
QUIET = MachineLoadFigures(others_fraction=0.01, steal_fraction=0.0)


def _launch(tmp_path, stack_side, index, median, *, stack_id="cpu-a", peak=0.05, finished="2026-12-01T10:00:00",
            outcome="passed", load=QUIET):
    times = tuple(median * f for f in (0.98, 0.99, 1.0, 1.01, 1.02))
    ranks = {r: RankRecord(steady_times=times, step_time_s=median, tokens_per_s=512 / median, tokens_per_step=512,
                           peak_memory_gib=peak, memory_growth_mib_per_step=0.01) for r in ("0", "1")}
    when = datetime.fromisoformat(f"{finished[:-2]}{index:02d}+00:00").timestamp()  # reports hold time.time()
    report = SessionReport(session=f"{stack_id}-{stack_side}-{index}", finished_at=when, platforms=("cpu",),
                           stack_id={"cpu": stack_id}, machine=MACHINE)
    return Launch(stack_side, tmp_path / f"{stack_side}-{index}", PerformanceRecord(ranks=ranks), outcome,
                  machine_load=load, report=report)


def test_trusted_sessions_are_stored_once_per_machine_and_stack_and_unmeasured_or_busy_ones_are_not(tmp_path):
    root = tmp_path / "history"
    good = [_launch(tmp_path, "trusted", i, 0.1) for i in range(3)]
    failed = _launch(tmp_path, "trusted", 3, 0.1, outcome="failed")
    busy = _launch(tmp_path, "trusted", 4, 0.1, load=MachineLoadFigures(others_fraction=0.4))
    stored = perf_history.add(root, good + [failed, busy], "record")
    assert [e.session for e in stored] == [f"cpu-a-trusted-{i}" for i in range(3)]
    assert perf_history.add(root, good, "record") == []  # the same sessions again: not twice
    files = list(root.rglob("*.json"))
    assert [p.relative_to(root).as_posix() for p in files] == ["test_host_x2_24_GiB/cpu-a.json"]
    stored_file = StackHistory.read(files[0])  # of this history's format (another is refused)
    assert stored_file.machine == MACHINE and len(stored_file.sessions) == 3
    loaded = perf_history.load(root, MACHINE.name)
    assert list(loaded) == ["cpu-a"] and loaded["cpu-a"][0].step_time_s == pytest.approx(0.1)
    assert loaded["cpu-a"][0].recorded_at == "2026-12-01T10:00:00+00:00"  # the report's epoch seconds, in UTC
    assert perf_history.load(root, "another machine") == {}


def test_the_candidate_is_compared_with_the_oldest_and_the_latest_stored_stack(tmp_path):
    """A 4% loss per release passes each check; against the oldest stack it adds up: three
    stacks stored, each 8% slower than the one before; a candidate 8% slower again is
    flagged against the oldest (+26%) and not against the latest (+8%, within 15%)."""
    root = tmp_path / "history"
    for n, stack in enumerate(("cpu-a", "cpu-b", "cpu-c")):
        perf_history.add(root, [_launch(tmp_path, "trusted", i, 0.1 * 1.08 ** n * (1 + 0.005 * i), stack_id=stack,
                                        finished=f"2026-12-0{n + 1}T10:00:00") for i in range(3)], "record")
    stored = perf_history.load(root, MACHINE.name)
    assert list(stored) == ["cpu-a", "cpu-b", "cpu-c"]
    candidate = [_launch(tmp_path, "candidate", i, 0.1 * 1.08 ** 3 * (1 + 0.005 * i)) for i in range(3)]
    rows = perf_history.against_history(stored, candidate, perf_compare.performance.CPU_PERF)
    assert [(r.role, r.stack) for r in rows] == [("oldest", "cpu-a"), ("latest", "cpu-c")]
    assert rows[0].step.flagged and rows[0].step.ratio == pytest.approx(1.08 ** 3, rel=1e-6)
    assert not rows[1].step.flagged and rows[1].step.ratio == pytest.approx(1.08, rel=1e-6)
    lines = perf_history.render(rows, stored, MACHINE.name, None, tmp_path, [])
    assert any("oldest: `cpu-a`" in l and "step_time_s" in l.split("|")[-2] for l in lines)
    assert any("drift to look at, not this check's verdict" in l for l in lines)


def test_trn2_gives_figures_only_until_an_a_a_series_of_the_host_type_is_stored(tmp_path):
    """Without a series, the trn2 check is FIGURES ONLY (not PASS, not a failure), its page
    says why and which command records the series; with 6 sessions stored, the thresholds are
    1.5x the largest change any even split of them shows, never below the stakes."""
    base = [_launch(tmp_path, "trusted", i, 0.1) for i in range(3)]
    slow = [_launch(tmp_path, "candidate", i, 0.13) for i in range(3)]
    verdict = perf_compare.judge(base + slow, TRN2_PERF)
    assert verdict.findings == (Finding.FIGURES_ONLY,) and verdict.passed
    assert verdict.comparisons[0].ratio == pytest.approx(1.3)
    page = "\n".join(perf_page.render(verdict, TRN2_PERF, base + slow))
    assert "not judged (figures only" in page and "python -m upgrades.perf_history record --tier trn2" in page
    result = UpgradeResult(Comparison(ContractVerdict()), ("conformance", "-m", "cpu"), (), False,
                           performance=PerformanceCheck(verdict))
    assert result.passed and result.verdict.text().endswith(
        "; performance not judged (figures only: no A/A series of this host type)")
    root = tmp_path / "history"
    medians = [0.100, 0.102, 0.098, 0.101, 0.099, 0.104]
    perf_history.add(root, [_launch(tmp_path, "trusted", i, m) for i, m in enumerate(medians[:5])], "record")
    stored = perf_history.load(root, MACHINE.name)
    assert perf_history.aa_policy(TRN2_PERF, stored, MACHINE.name) is None  # 5 < 6 sessions
    perf_history.add(root, [_launch(tmp_path, "trusted", 5, medians[5])], "record")
    policy = perf_history.aa_policy(TRN2_PERF, perf_history.load(root, MACHINE.name), MACHINE.name)
    geomean = lambda idx: math.exp(sum(math.log(medians[i]) for i in idx) / len(idx))
    worst = max(abs(geomean([i for i in range(6) if i not in side]) / geomean(side) - 1)
                for side in itertools.combinations(range(6), 3))
    assert worst == pytest.approx(0.0336, abs=1e-4)  # {0.102, 0.101, 0.104} against {0.100, 0.098, 0.099}
    assert policy.judged and policy.slower_than == max(0.05, round(1.5 * worst, 4))
    assert policy.larger_than == TRN2_PERF.larger_than  # equal peaks: the stake
    assert "A/A series of 6 sessions of cpu-a" in policy.why
    assert perf_compare.judge(base + slow, policy).findings == (Finding.SLOWER,)


def test_the_page_draws_step_time_per_session_across_stacks(tmp_path):
    root = tmp_path / "history"
    perf_history.add(root, [_launch(tmp_path, "trusted", i, 0.1) for i in range(3)], "record")
    launches = [_launch(tmp_path, "trusted", 7, 0.1), _launch(tmp_path, "candidate", 7, 0.12)]
    lines, figures = perf_history.history_lines(root, launches, perf_compare.performance.CPU_PERF, tmp_path,
                                                "upgrade check test")
    picture = tmp_path / "perf-history.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![step time per session across stacks](perf-history.png)" in lines
    assert figures.stored == 1 and len(perf_history.load(root, MACHINE.name)["cpu-a"]) == 4


# ----------------------------------------------------------------------------- added after mutation testing (round 3)


def _store(root, tmp_path, stack_id: str, medians: list[float], peaks: list[float] | None = None) -> None:
    """One session a day from 2026-12-01, of ``stack_id``."""
    perf_history.add(root, [_launch(tmp_path, "trusted", i, m, stack_id=stack_id,
                                    peak=(peaks or [0.05] * len(medians))[i], finished=f"2026-12-{i + 1:02d}T10:00:00")
                            for i, m in enumerate(medians)], "record")


def test_the_a_a_series_is_the_asked_stacks_else_the_longest_and_its_memory_threshold_its_own(tmp_path):
    """The thresholds come from the series of the stack asked for where it has 6 sessions, else
    from the stack with the most sessions (not the last name); the memory threshold is 1.5x the
    largest split change of the peaks when that is above the stake, to 4 decimals; the page
    names the series' first and last days."""
    root = tmp_path / "history"
    _store(root, tmp_path, "cpu-a", [0.100, 0.102, 0.098, 0.101, 0.099, 0.104, 0.100],
           peaks=[1.00, 1.03, 0.98, 1.061, 0.97, 1.04, 1.01])
    _store(root, tmp_path, "cpu-z", [0.100, 0.101, 0.100, 0.101, 0.100, 0.101])
    stored = perf_history.load(root, MACHINE.name)
    for asked, used, days in (("cpu-z", "cpu-z", "(2026-12-01 to 2026-12-06)"),
                              ("cpu-q", "cpu-a", "(2026-12-01 to 2026-12-07)"),
                              (None, "cpu-a", "(2026-12-01 to 2026-12-07)")):
        policy = perf_history.aa_policy(TRN2_PERF, stored, MACHINE.name, asked)
        assert f"A/A series of {len(stored[used])} sessions of {used} on {MACHINE.name} {days}" in policy.why, \
            (asked, policy.why)
    policy = perf_history.aa_policy(TRN2_PERF, stored, MACHINE.name, "cpu-a")
    worst = perf_history.largest_split_change([1.00, 1.03, 0.98, 1.061, 0.97, 1.04, 1.01])
    assert 1.5 * worst > TRN2_PERF.larger_than and round(1.5 * worst, 4) != round(1.5 * worst, 5)
    assert policy.larger_than == round(1.5 * worst, 4), (policy.larger_than, worst)


def test_the_candidate_against_the_stored_stacks_needs_two_sessions_a_side(tmp_path):
    """Two candidate sessions are enough for the launch test, one is not; a stored stack of one
    session is never the oldest or the latest; each row counts the stored sessions, names their
    first and last days, and flags a peak beyond the policy's memory threshold."""
    root = tmp_path / "history"
    _store(root, tmp_path, "cpu-a", [0.100])
    _store(root, tmp_path, "cpu-b", [0.100, 0.101, 0.099])
    _store(root, tmp_path, "cpu-c", [0.100, 0.101])
    stored = perf_history.load(root, MACHINE.name)
    one = [_launch(tmp_path, "candidate", 0, 0.1, peak=0.06)]
    two = one + [_launch(tmp_path, "candidate", 1, 0.1, peak=0.06)]
    assert perf_history.against_history(stored, one, TRN2_PERF) == []
    rows = perf_history.against_history(stored, two, TRN2_PERF)
    assert [(r.role, r.stack, r.sessions) for r in rows] == [("oldest", "cpu-b", 3), ("latest", "cpu-c", 2)]
    assert (rows[0].first[:10], rows[0].last[:10]) == ("2026-12-01", "2026-12-03")
    assert rows[0].peak.flagged and rows[0].peak.threshold == TRN2_PERF.larger_than  # 0.06 against 0.05: +20%
