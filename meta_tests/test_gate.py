"""The version-pinning gate and the pins it emits, on reports derived from the committed
cpu baseline (a real report of a known-good session), changed with the records' constructors."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from fixtures.data import assets
from fixtures.oracles.performance_record import PerformanceRecord, RankRecord
from fixtures.session.expectations import DIFFERENTLY
from fixtures.tiers import stack
from meta_tests.records import with_contract
from meta_tests.test_performance import SERIES, _rank
from reports import gate, inventory, perf_history, pins
from reports.inventory_record import Inventory
from reports.session_report import ContractRecord, MachineRecord, SessionReport, SuiteIdentity

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
BASELINE = REPO / "reports" / "baselines" / f"{stack.stack_id('cpu')}.json"


@pytest.fixture
def baseline() -> SessionReport:
    return SessionReport.load(BASELINE)


def _first(report: SessionReport, outcome: str) -> ContractRecord:
    return next(c for c in report.contracts if c.outcome == outcome)


def _packages(report: SessionReport, **versions) -> SessionReport:
    """``report`` with these packages' versions (None: not installed) in its inventory."""
    packages = {**report.inventory.packages, **{name.replace("_", "-"): v for name, v in versions.items()}}
    return replace(report, inventory=replace(report.inventory, packages=packages))


def _without(report: SessionReport, *nodeids: str) -> SessionReport:
    return replace(report, contracts=tuple(c for c in report.contracts if c.nodeid not in nodeids))


def test_committed_baseline_is_this_stack(baseline):
    """The committed baseline was made on the stack installed here: no version drift."""
    run = replace(baseline, inventory=Inventory.from_json(inventory.inventory()))
    result = gate.compare(baseline, run)
    assert result.drift == [], result.text()
    assert result.ok, result.text()
    assert baseline.complete and baseline.contracts


def test_committed_baseline_is_this_suites():
    """The committed baselines were recorded by this suite: its assets' recipe (the tiny
    checkpoints, tokenizer and dataset every cpu figure comes from). A change to what they
    measure fails here until they are re-recorded (python -m reports.baseline REPORT_DIR);
    before, the baseline of an earlier round's checkpoints listed 10 'new contracts' and its
    step-1 losses as 'figures that moved'."""
    suite = SessionReport.load(BASELINE).suite
    recorded = suite.assets_recipe if suite else None
    assert recorded == assets.recipe_key(), (
        f"{BASELINE.name} was recorded with assets {recorded}, this suite builds {assets.recipe_key()}: re-record it")


def test_gate_fails_on_version_drift(baseline):
    run = _packages(baseline, transformers="5.24.0")
    result = gate.compare(baseline, run)
    assert not result.ok
    assert ("transformers", baseline.inventory.packages["transformers"], "5.24.0") in result.drift
    assert "version drift: transformers" in result.text()


@pytest.mark.parametrize(("outcome", "listed", "title"), [("failed", "newly_failing", "newly failing"),
                                                      ("skipped", "newly_skipped", "skipped where the baseline ran it")])
def test_gate_fails_on_a_contract_the_baseline_passed_that_now_fails_or_skips(baseline, outcome, listed, title):
    """A contract that passed in the baseline and now fails, or is skipped (never a silent
    green), fails the gate, listed under its own title with its node id."""
    victim = _first(baseline, "passed")
    result = gate.compare(baseline, with_contract(baseline, victim.nodeid, outcome=outcome))
    assert not result.ok and getattr(result, listed) == [victim.nodeid]
    assert title in result.text() and victim.nodeid in result.text()


def test_gate_fails_on_missing_contract_and_incomplete_report(baseline):
    gone = baseline.contracts[-1]
    result = gate.compare(baseline, _without(baseline, gone.nodeid))
    assert not result.ok and result.missing == [gone.nodeid]
    assert not gate.compare(baseline, replace(baseline, complete=False)).ok


def test_new_contracts_are_listed_and_fail_the_gate_only_when_failing(baseline):
    """A contract the baseline does not have is named with its outcome; passing, it leaves
    the gate green; failing, it turns it red (a stack is trusted only if it passes them all)."""
    added = ContractRecord("conformance/test_new.py::test_added[cpu]", "passed")
    run = replace(baseline, contracts=(*baseline.contracts, added))
    result = gate.compare(baseline, run)
    assert result.ok and result.new == [("conformance/test_new.py::test_added[cpu]", "passed")]
    assert "new contract, not in the baseline (passed): conformance/test_new.py::test_added[cpu]" in result.text()
    result = gate.compare(baseline, with_contract(run, added.nodeid, outcome="failed"))
    assert not result.ok and result.new_failing == ["conformance/test_new.py::test_added[cpu]"]
    assert "(failed: fails the gate)" in result.text()


def test_strict_xfail_turning_into_failure_is_newly_failing(baseline):
    xfails = [c for c in baseline.contracts if c.outcome == "xfailed"]
    if not xfails:
        pytest.fail("the baseline records no known deviation; it should (see expectations)")
    run = with_contract(baseline, xfails[0].nodeid, outcome="failed")
    assert gate.compare(baseline, run).newly_failing == [xfails[0].nodeid]


def test_gate_cli_exit_codes(baseline, tmp_path):
    def gate_cli(run: SessionReport) -> subprocess.CompletedProcess:
        path = tmp_path / "run.json"
        run.write(path)
        return subprocess.run([sys.executable, "-m", "reports.gate", str(BASELINE), str(path)],
                              cwd=REPO, capture_output=True, text=True)

    proc = gate_cli(baseline)
    assert proc.returncode == 0 and "gate: PASS" in proc.stdout
    proc = gate_cli(_packages(baseline, torch="2.15.0"))
    assert proc.returncode == 1 and "version drift: torch" in proc.stdout


def test_pins_from_a_passing_run(baseline, tmp_path):
    constraints = pins.constraints(baseline)
    for name, version in baseline.inventory.packages.items():
        if version:
            assert f"{name}=={version}" in constraints
    assert "--no-deps" in constraints
    table = pins.version_table(baseline)
    assert table.startswith("| package | version |") and "| torchtitan |" in table


def test_pins_refuse_an_untrusted_run(baseline):
    with pytest.raises(pins.NotTrusted, match="did not pass"):
        pins.trusted(with_contract(baseline, _first(baseline, "passed").nodeid, outcome="failed"))


def test_trn2_pins_are_data_marked_unverified():
    data = json.loads((REPO / "reports" / "baselines" / "trn2-neuron-2.33.0.pins.json").read_text())
    assert data["verified_on_hardware"] is False
    assert data["packages"]["torch-neuronx"] == "2.14.3.0"
    assert data["packages"]["torch"] == "2.14.0"


def test_gate_compares_like_with_like(baseline):
    """A session of another stack (the fork's vintage against the 0.3.0 baseline) fails the
    gate naming both stacks and the baseline to use; ``auto`` picks the session's own."""
    run = replace(baseline, stack_id={**baseline.stack_id, "cpu": "cpu-torch2.14-titan0.2+git5059f32"})
    result = gate.compare(baseline, run)
    assert not result.ok
    assert "belongs to stack cpu-torch2.14-titan0.3" in result.text()
    assert "reports/baselines/cpu-torch2.14-titan0.2+git5059f32.json" in result.text()
    assert gate.baseline_for(run).name == "cpu-torch2.14-titan0.2+git5059f32.json"
    missing = gate.compare_with_file(REPO / "reports" / "baselines" / "no-such-stack.json", run)
    assert not missing.ok and "no committed baseline" in missing.text()


def without_performance(report: SessionReport) -> SessionReport:
    """``report`` without its performance figures (the baseline has its own)."""
    return replace(report, contracts=tuple(c for c in report.contracts if c.performance is None))


def _figures(rank0: RankRecord, **ranks: RankRecord) -> PerformanceRecord:
    return PerformanceRecord(ranks={"0": rank0, **ranks}, run="pretrain", warmup_rule="r")


def _with_performance(report: SessionReport, step: float, nodeid: str = "") -> SessionReport:
    figures = _figures(_rank([t * step for t in SERIES[0]["steady_times"]], 0.88, 0.0))
    performance = ContractRecord(nodeid or PERF_NODEID, "passed", performance=figures)
    return replace(report, contracts=(*without_performance(report).contracts, performance))


def _performance_of(report: SessionReport, nodeid: str = "") -> PerformanceRecord:
    return report.contract(nodeid or PERF_NODEID).performance


def _with_rank0(report: SessionReport, nodeid: str = "", **figures) -> SessionReport:
    """``report`` with the performance figure ``nodeid``'s rank 0 figures changed."""
    before = _performance_of(report, nodeid)
    changed = replace(before, ranks={**before.ranks, "0": replace(before.ranks["0"], **figures)})
    return with_contract(report, nodeid or PERF_NODEID, performance=changed)


def test_the_gate_compares_no_figure_with_a_baseline_of_another_suite(baseline):
    """A baseline recorded with other checkpoints (another assets recipe) measured other
    things: the gate says so and compares no figure across it; a baseline of the same suite
    is compared."""
    base, run = _with_performance(baseline, 1.0), _with_performance(baseline, 1.5)
    same = gate.compare(base, replace(run, suite=base.suite))
    assert same.other_suite is None and "steady step slower by" in same.text(), same.text()
    other = gate.compare(base, replace(run, suite=replace(base.suite, assets_recipe="0123456789abcdef")))
    assert other.other_suite and "recorded by another suite" in other.text()
    assert "assets_recipe" in other.text() and "steady step" not in other.text()
    unrecorded = gate.compare(replace(base, suite=None), run)
    assert "records no suite identity" in unrecorded.text() and "steady step" not in unrecorded.text()


def test_the_gate_says_when_its_baseline_took_other_kernel_paths(baseline):
    assert gate.compare(baseline, baseline).other_machine is None
    run = replace(baseline, machine=replace(baseline.machine, numerics_key="another",
                                            numerics_label="AuthenticAMD EPYC, AVX512 kernels"))
    text = gate.compare(baseline, run).text()
    assert "this session on AuthenticAMD EPYC, AVX512 kernels" in text and "may be this machine's" in text


def test_a_deviation_failing_differently_is_newly_failing_with_both_reasons(baseline):
    held = _first(baseline, "xfailed")
    run = with_contract(baseline, held.nodeid, outcome="failed", message=(
        f"RuntimeError: torchrun exited -9\n\n{DIFFERENTLY} (x.txt:3): recorded: failure matching "
        "'drops lm_head'; now: RuntimeError: torchrun exited -9"))
    result = gate.compare(baseline, run)
    assert not result.ok and held.nodeid in result.newly_failing
    assert f"{DIFFERENTLY} (x.txt:3): recorded: failure matching 'drops lm_head'" in result.text()


# Added after mutation testing (benchmarks/mutation.md): each kills mutants the tests above let survive.

SUITE = SuiteIdentity(assets_recipe="r1", assets_files="f1")
MACHINE = MachineRecord(name="box", numerics_key="k1", numerics_label="GenuineIntel Xeon, AVX2 kernels")
PERF_NODEID = "conformance/test_performance.py::test_steady_state_is_reached_and_measured[cpu]"
RERECORD = "re-record it (python -m reports.baseline REPORT_DIR)"


def _identified(report: SessionReport, **changes) -> SessionReport:
    """``report`` with a suite identity and a machine, as a re-recorded baseline has (the
    committed baseline predates both), then ``changes``."""
    return replace(report, **{"suite": SUITE, "machine": MACHINE, **changes})


def test_the_gate_text_states_each_finding_on_its_own_line():
    """The page a user reads: the verdict line (PASS/FAIL and the baseline's stack), then each
    finding as written, in this order, one per line; "no version drift, no contract changes"
    only where nothing but the machine note was found."""
    assert gate.GateResult(baseline_stack="cpu-s").text() == (
        "gate: PASS (baseline of stack cpu-s)\n  no version drift, no contract changes")
    everything = gate.GateResult(
        drift=[("torch", "2.14.1", None), ("httpx2", None, "2.16.2")], newly_failing=["a"], missing=["b"],
        newly_skipped=["c"], newly_passing=["d"], new=[("e", "passed"), ("f", "failed")], incomplete=True,
        evidence_mismatch="EVIDENCE", baseline_problem="BASELINE", other_suite="SUITE", other_machine="MACHINE",
        performance=["PERF"], differently={"a": "DIFFERENTLY"})
    assert everything.text().splitlines() == [
        "gate: FAIL", "  EVIDENCE", "  BASELINE", "  the run's report is incomplete (interrupted session)",
        "  SUITE", "  MACHINE",
        "  version drift: torch: 2.14.1 -> not installed", "  version drift: httpx2: not installed -> 2.16.2",
        "  newly failing: a", "    DIFFERENTLY", "  missing: b", "  skipped where the baseline ran it: c",
        "  newly passing (not a failure): d",
        "  new contract, not in the baseline (passed): e",
        "  new contract, not in the baseline (failed: fails the gate): f",
        "  performance: PERF"]
    assert gate.GateResult(other_machine="MACHINE").text().splitlines() == [
        "gate: PASS", "  MACHINE", "  no version drift, no contract changes"]
    assert gate.GateResult(other_suite="SUITE").text().splitlines() == ["gate: PASS", "  SUITE"]


def test_a_rehearsal_and_real_evidence_are_never_gated_against_each_other(baseline):
    """A dress rehearsal's report against a real baseline, and a real session against a
    rehearsal's baseline, each fail the gate with the sentence that says which way round."""
    rehearsal = replace(baseline, rehearsal=True)
    one = gate.compare(baseline, rehearsal)
    assert not one.ok and one.evidence_mismatch == (
        "a Neuron dress rehearsal (CPU stand-ins) is not trn2 evidence and cannot be gated against a real baseline")
    assert f"  {one.evidence_mismatch}" in one.text().splitlines()
    other = gate.compare(rehearsal, baseline)
    assert not other.ok and other.evidence_mismatch == (
        "the baseline is a Neuron dress rehearsal (CPU stand-ins), not evidence for this session")
    assert gate.compare(rehearsal, rehearsal).evidence_mismatch is None


def test_a_report_that_does_not_say_complete_is_incomplete(baseline, tmp_path):
    """No "complete" key is an interrupted session's report: the gate fails, also when no
    baseline file is committed; compare_with_file on a committed file is compare."""
    run = SessionReport.from_json({k: v for k, v in baseline.to_json().items() if k != "complete"})
    result = gate.compare(baseline, run)
    assert result.incomplete and not result.ok
    assert "  the run's report is incomplete (interrupted session)" in result.text().splitlines()
    absent = tmp_path / "absent.json"
    assert gate.compare_with_file(absent, run).incomplete
    missing = gate.compare_with_file(absent, baseline)
    assert not missing.incomplete and not missing.ok
    assert missing.baseline_problem == (f"no committed baseline at {absent}: promote a known-good session of this "
                                        "stack with `python -m reports.baseline REPORT_DIR`")
    drifted = _packages(baseline, torch="2.15.0")
    assert gate.compare_with_file(BASELINE, drifted) == gate.compare(baseline, drifted)
    assert not gate.compare_with_file(BASELINE, drifted).ok


def test_the_stacks_are_named_from_whatever_the_reports_record(baseline):
    """The baseline's stack is named per platform ("?" for a platform it records no stack for,
    none for a report of no platform); a session's unrecorded stack is "?"; a report with no
    platforms or no stack ids is read, not a crash."""
    sid = baseline.stack_id["cpu"]
    run = baseline
    two = replace(baseline, platforms=("cpu", "trn2"), stack_id={"cpu": "cpu-a", "trn2": "trn2-b"})
    assert gate.compare(two, run).baseline_stack == "cpu-a, trn2-b"
    partial = replace(baseline, platforms=("cpu", "trn2"), stack_id={"trn2": "trn2-b"})
    assert gate.compare(partial, run).baseline_stack == "?, trn2-b"
    nameless = replace(baseline, stack_id={})
    result = gate.compare(nameless, run)
    assert result.baseline_stack == "?"
    assert result.baseline_problem == (f"the baseline belongs to stack ? and this session is stack {sid}: compare "
                                       f"like with like (reports/baselines/{sid}.json)")
    no_platform = replace(baseline, platforms=())
    assert gate.compare(no_platform, run).baseline_stack is None
    no_platform = replace(no_platform, stack_id={"cpu": "cpu-other"})
    assert gate.compare(no_platform, run).baseline_problem.startswith(
        f"the baseline belongs to stack ? and this session is stack {sid}:")
    unnamed_run = replace(baseline, stack_id={})
    assert gate.compare(baseline, unnamed_run).baseline_problem == (
        f"the baseline belongs to stack {sid} and this session is stack ?: compare like with like "
        "(reports/baselines/?.json)")
    two_run = replace(baseline, platforms=("cpu", "trn2"), stack_id={"cpu": sid, "trn2": "trn2-x"})
    assert f"this session is stack {sid}, trn2-x:" in gate.compare(baseline, two_run).baseline_problem
    platformless_run = replace(baseline, platforms=())
    assert gate.compare(baseline, platformless_run).baseline_problem is None


def test_a_package_installed_on_one_side_only_is_drift(baseline):
    """A tracked package the run lacks, and one only the run has, are version drift, each
    printed with "not installed" on its missing side."""
    packages = dict(baseline.inventory.packages)
    gone = next(name for name, version in sorted(packages.items()) if version)
    was = packages.pop(gone)
    packages["brand-new-package"] = "1.0"
    run = replace(baseline, inventory=replace(baseline.inventory, packages=packages))
    result = gate.compare(baseline, run)
    assert (gone, was, None) in result.drift and ("brand-new-package", None, "1.0") in result.drift
    lines = result.text().splitlines()
    assert f"  version drift: {gone}: {was} -> not installed" in lines
    assert "  version drift: brand-new-package: not installed -> 1.0" in lines


def test_each_outcome_change_is_listed_under_its_own_title(baseline):
    """Failing in the baseline and passing now is newly passing (listed, the gate stays green);
    skipped on both sides is no change; a missing contract and a new skip are each named."""
    healed = _first(baseline, "passed")
    result = gate.compare(with_contract(baseline, healed.nodeid, outcome="failed"), baseline)
    assert result.ok and result.newly_passing == [healed.nodeid] and result.newly_failing == []
    assert f"  newly passing (not a failure): {healed.nodeid}" in result.text().splitlines()
    both = with_contract(baseline, healed.nodeid, outcome="skipped")
    assert gate.compare(both, both).newly_skipped == []
    gone = baseline.contracts[-1]
    run = with_contract(_without(baseline, gone.nodeid), healed.nodeid, outcome="skipped")
    lines = gate.compare(baseline, run).text().splitlines()
    assert f"  missing: {gone.nodeid}" in lines
    assert f"  skipped where the baseline ran it: {healed.nodeid}" in lines


def test_figures_are_compared_only_within_one_suite(baseline, tmp_path):
    """Same suite: the figures are compared. Another suite (either field moved), or a baseline
    with no suite identity: no figure is compared, and the sentence says which field moved."""
    base = _identified(_with_performance(baseline, 1.0))
    run = _identified(_with_performance(baseline, 1.5))
    same = gate.compare(base, run, history_root=tmp_path)
    assert same.other_suite is None and same.other_machine is None
    assert len(same.performance) == 2 and same.performance[0].startswith(f"{PERF_NODEID}: steady step slower by ")
    assert same.performance[1].startswith("no stored history of this suite on box")
    moved = _identified(_with_performance(baseline, 1.5), suite=SuiteIdentity(assets_recipe="r2", assets_files="f1"))
    other = gate.compare(base, moved)
    assert other.other_suite == ("the baseline was recorded by another suite (assets_recipe r1 -> r2): figures are "
                                 f"not compared across it; {RERECORD}")
    assert other.performance[0] == f"not compared: {other.other_suite}"
    both = gate.compare(base, _identified(run, suite=SuiteIdentity(assets_recipe="r2", assets_files="f2")))
    assert "(assets_recipe r1 -> r2; assets_files f1 -> f2)" in both.other_suite
    assert "(assets_recipe r1 -> None; assets_files f1 -> None)" in gate.compare(base, replace(run, suite=None)).other_suite
    unrecorded = gate.compare(replace(base, suite=None), run)
    assert unrecorded.other_suite == ("the baseline records no suite identity (recorded before suites had one): its "
                                      f"figures may come from other checkpoints; {RERECORD}")
    assert unrecorded.performance[0] == f"not compared: {unrecorded.other_suite}"


def test_the_session_is_set_against_the_oldest_and_latest_stored_stack_of_its_suite(baseline, tmp_path):
    """The gate's history lines (``reports.perf_history``): the session's launch against the
    median session of the oldest and the latest stored stack on its machine, of its suite only."""
    run = _identified(_with_performance(baseline, 1.5))
    step = perf_history.launch_step_time(_performance_of(run).ranks)[1]
    for day, stack_id, scale, suite in (("01", "cpu-old", 1 / 1.5, SUITE), ("02", "cpu-new", 1 / 1.2, SUITE),
                                        ("03", "cpu-other-suite", 10.0, replace(SUITE, assets_recipe="other"))):
        perf_history.store(tmp_path, MACHINE, perf_history.Entry(
            stack=stack_id, recorded_at=f"2026-12-{day}T10:00:00", session=f"s-{stack_id}", source="record",
            step_time_s=step * scale, slowest_rank="0", rank_step_time_s={"0": step * scale}, peak_memory_gib=1.0,
            tokens_per_step=512, suite=suite))
    lines = gate.compare(_identified(_with_performance(baseline, 1.0)), run, history_root=tmp_path).performance
    history = [line for line in lines if line.startswith("against the")]
    assert len(history) == 2 and "other-suite" not in " ".join(lines)
    assert history[0].startswith("against the oldest stored stack on this machine, cpu-old (1 sessions, 2026-12-01 to "
                                 "2026-12-01): step time +50.0%")
    assert history[1].startswith("against the latest stored stack on this machine, cpu-new") and "+20.0%" in history[1]


def test_the_machine_note_names_both_kernel_paths(baseline):
    """The same numerics key: no note. Another key, or none recorded (on either side): the note
    names both machines' kernel paths, "an unrecorded machine" for a side without one."""
    base = _identified(baseline)
    assert gate.compare(base, _identified(baseline)).other_machine is None
    amd = MachineRecord(name="box2", numerics_key="k2", numerics_label="AuthenticAMD EPYC, AVX512 kernels")
    tail = ("a contract that newly fails may be this machine's kernel paths, not the stack (the upgrade check asks "
            "the trusted stack here)")
    assert gate.compare(base, _identified(baseline, machine=amd)).other_machine == (
        f"the baseline was computed on GenuineIntel Xeon, AVX2 kernels, this session on AuthenticAMD EPYC, AVX512 "
        f"kernels: {tail}")
    unrecorded = replace(baseline, machine=None)
    assert gate.compare(unrecorded, unrecorded).other_machine == (
        f"the baseline was computed on an unrecorded machine, this session on an unrecorded machine: {tail}")
    assert gate.compare(replace(base, machine=MachineRecord(name="box")), _identified(baseline)).other_machine.startswith(
        "the baseline was computed on an unrecorded machine, this session on GenuineIntel Xeon, AVX2 kernels:")


def test_the_performance_lines_against_the_baseline(baseline):
    """performance_against, line by line: the step change and both peaks on one machine; not
    compared across machines (each named, with what it did not record); NOT MEASURED for a
    figure that measured nothing, and the next figure still compared; nothing without figures."""
    base = _identified(_with_performance(baseline, 1.0))
    run = _identified(_with_performance(baseline, 1.5))
    before, after = _performance_of(base).ranks["0"], _performance_of(run).ranks["0"]
    step = gate.performance.compare_step_times_one_launch(tuple(before.steady_times), tuple(after.steady_times))
    tail = (" GiB (one launch each: the launch-to-launch noise is not in this interval; the upgrade check judges)")
    assert gate.performance_against(base, run) == [
        f"{PERF_NODEID}: steady step {step.change()}, peak memory 0.88 -> 0.88{tail}"]
    assert gate.performance_against(base, without_performance(baseline)) == []
    assert gate.performance_against(SessionReport(""), SessionReport("")) == []
    assert gate.performance_against(_identified(without_performance(baseline)), run) == [
        "the baseline has no performance figures"]
    amd = MachineRecord(name="box2", numerics_key="k2", numerics_label="AuthenticAMD EPYC, AVX512 kernels")
    assert gate.performance_against(base, replace(run, machine=amd)) == [
        "not compared: the baseline was measured on box (GenuineIntel Xeon, AVX2 kernels), this session on box2 "
        "(AuthenticAMD EPYC, AVX512 kernels): absolute times of two machines are not comparable"]
    assert gate.performance_against(base, replace(run, machine=None)) == [
        "not compared: the baseline was measured on box (GenuineIntel Xeon, AVX2 kernels), this session on an "
        "unrecorded machine (kernel paths not recorded): absolute times of two machines are not comparable"]
    assert gate.performance_against(base, replace(run, machine=MachineRecord(name="box")))[0].endswith(
        "this session on box (kernel paths not recorded): absolute times of two machines are not comparable")
    # two figures: the first measured nothing on two ranks, the second is compared all the same
    second = PERF_NODEID + "z"
    base_two = replace(base, contracts=(*base.contracts, replace(base.contract(PERF_NODEID), nodeid=second)))
    ranks = {"0": replace(after, tokens_per_s=float("nan")), "1": replace(after, peak_memory_gib=-1.0)}
    bad = replace(run, contracts=(*run.contracts, replace(run.contract(PERF_NODEID), nodeid=second)))
    bad = with_contract(bad, PERF_NODEID, performance=PerformanceRecord(ranks=ranks))
    assert _performance_of(base_two, second).ranks["0"] == before and _performance_of(bad, second).ranks["0"] == after
    missing = gate.performance.unmeasured(ranks)
    assert len(missing) == 2
    assert gate.performance_against(base_two, bad) == [
        f"{PERF_NODEID}: NOT MEASURED: " + "; ".join(missing),
        f"{second}: steady step {step.change()}, peak memory 0.88 -> 0.88{tail}"]
    # a figure whose baseline has no rank 0, or no steady steps there, gives no line; the next is compared
    later = replace(run, contracts=(*run.contracts, replace(run.contract(PERF_NODEID), nodeid=second)))
    for no_rank0 in ({"1": before}, {"0": replace(before, steady_times=())}):
        only = with_contract(base_two, PERF_NODEID, performance=PerformanceRecord(ranks=no_rank0))
        assert [l.split(": steady step")[0] for l in gate.performance_against(only, later)] == [second]
    # a step that processed other tokens than the baseline's is named, and its time not compared
    doubled = with_contract(run, PERF_NODEID, performance=PerformanceRecord(
        ranks={"0": replace(after, tokens_per_step=4096)}))
    assert gate.performance_against(base, doubled)[0] == (
        f"{PERF_NODEID}: tokens per step 2048 -> 4096 (rank 0): the step does other work, so its time is not "
        "comparable")
    # and a run whose rank 0 has no steady steps is NOT MEASURED, never compared
    empty = with_contract(run, PERF_NODEID, performance=PerformanceRecord(ranks={"0": replace(after, steady_times=())}))
    assert "NOT MEASURED" in gate.performance_against(base, empty)[0]


def test_the_peaks_on_the_performance_line_are_each_sides(baseline):
    """The line's peak memory is the baseline's, then the run's."""
    base = _identified(_with_performance(baseline, 1.0))
    run = _with_rank0(_identified(_with_performance(baseline, 1.0)), peak_memory_gib=1.25)
    [line] = gate.performance_against(base, run)
    assert "peak memory 0.88 -> 1.25 GiB" in line


def test_baseline_for_names_the_file_of_the_reports_stacks():
    """One stack: its file; several: joined by "+"; no platform: no-tier.json."""
    assert gate.baseline_for(SessionReport("", platforms=("cpu",), stack_id={"cpu": "a"})) == gate.BASELINES / "a.json"
    assert gate.baseline_for(SessionReport("", platforms=("trn2", "cpu"), stack_id={"cpu": "a", "trn2": "b"})) == \
        gate.BASELINES / "a+b.json"
    assert gate.baseline_for(SessionReport("")) == gate.BASELINES / "no-tier.json"


def test_gate_main_in_process(baseline, tmp_path, capsys):
    """``python -m reports.gate BASELINE RUN`` called in-process (the subprocess test above runs
    it as __main__, where a mutation tool cannot reach it): exit codes, the page, the help."""
    same = tmp_path / "same.json"
    baseline.write(same)
    assert gate.main([str(BASELINE), str(same)]) == 0
    assert capsys.readouterr().out.startswith(f"gate: PASS (baseline of stack {baseline.stack_id['cpu']})")
    folder = tmp_path / "run"
    folder.mkdir()
    _packages(baseline, torch="2.15.0").write(folder / "report.json")
    assert gate.main([str(BASELINE), str(folder)]) == 1
    assert "version drift: torch" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        gate.main(["--help"])
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: python -m reports.gate [-h] baseline run")
    assert "The version-pinning gate" in help_text
    assert ["run", "a report.json, or the report folder holding it"] in [l.split(None, 1) for l in help_text.splitlines()]


def _numerics(key: str, numerics: dict | None, label: str = "GenuineIntel Xeon, AVX2 kernels") -> SessionReport:
    return SessionReport("", machine=MachineRecord(numerics_key=key, numerics_label=label, numerics=numerics))


def test_another_machine_is_named_by_what_differs_where_the_labels_agree():
    """Two machines with one label (same CPU model and kernel path) but other dispatch flags:
    the gate's note says which flag differs, not just two identical labels."""
    label = "GenuineIntel Xeon, AVX512 kernels"
    before = _numerics("a", {"flags": ["avx2", "fma"], "capability": "AVX512"}, label)
    after = _numerics("b", {"flags": ["avx2", "avx512dq", "fma"], "capability": "AVX512"}, label)
    note = gate.other_machine(before, after)
    assert "(flags: avx512dq only in this session)" in note, note
    assert gate.other_machine(before, _numerics("a", {"flags": ["avx2", "fma"], "capability": "AVX512"}, label)) is None


# Added after mutation testing (round 2, benchmarks/mutation.md): each kills mutants the tests above let survive.

XEON = {"arch": "x86_64", "vendor": "GenuineIntel", "cpu": "Xeon", "capability": "AVX2", "kernel_env": {},
        "flags": ["avx", "avx2", "f16c", "fma"]}
_machine = _numerics


def test_the_machine_note_names_every_dispatch_difference_and_only_those():
    """Where the labels agree, the note lists each field that differs, "; " between fields:
    a scalar as "old -> new", a flag list as the flags only on each side (both ways), a field
    recorded on one side only (as a report before the field existed). Identical dispatch
    records (another key for another reason), or a side that recorded none, add nothing."""
    amd = {**XEON, "capability": "AVX512", "flags": ["avx", "avx2", "avx512dq", "avx512f"],
           "kernel_env": {"ATEN_CPU_CAPABILITY": "avx512"}}
    note = gate.other_machine(_machine("a", XEON), _machine("b", amd))
    assert ("GenuineIntel Xeon, AVX2 kernels (capability: AVX2 -> AVX512; flags: f16c only in the baseline, "
            "fma only in the baseline, avx512dq only in this session, avx512f only in this session; kernel_env: "
            "{} -> {'ATEN_CPU_CAPABILITY': 'avx512'}): a contract that newly fails") in note, note
    older = {k: v for k, v in XEON.items() if k != "kernel_env"}
    no_flags = {k: v for k, v in XEON.items() if k != "flags"}
    note = gate.other_machine(_machine("a", older), _machine("b", {**no_flags, "kernel_env": {"X": "1"}}))
    assert "(flags: avx only in the baseline, avx2 only in the baseline, f16c only in the baseline, fma only in " \
           "the baseline; kernel_env: None -> {'X': '1'}):" in note, note
    tail = ": a contract that newly fails may be this machine's kernel paths"
    plain = "this session on GenuineIntel Xeon, AVX2 kernels" + tail
    assert plain in gate.other_machine(_machine("a", XEON), _machine("b", dict(XEON)))
    assert plain in gate.other_machine(_machine("a", None), _machine("b", XEON))
    assert plain in gate.other_machine(_machine("a", XEON), _machine("b", None))


def test_figures_of_two_neuron_releases_are_not_compared(baseline):
    """One machine, two Neuron releases (a trn2 session records its packages and driver): the
    absolute times are not compared, and the line names each side's release."""
    old, new = {"aws-neuronx-runtime-lib": "2.20.1", "driver": "2.19"}, {"aws-neuronx-runtime-lib": "2.21.0",
                                                                          "driver": "2.19"}
    base = _identified(_with_performance(baseline, 1.0), machine=replace(MACHINE, neuron_versions=old))
    run = _identified(_with_performance(baseline, 1.0), machine=replace(MACHINE, neuron_versions=new))
    assert gate.performance_against(base, run) == [
        f"not compared: the baseline was measured on box (GenuineIntel Xeon, AVX2 kernels, Neuron {old}), this "
        f"session on box (GenuineIntel Xeon, AVX2 kernels, Neuron {new}): absolute times of two machines are not "
        "comparable"]
    same = _identified(_with_performance(baseline, 1.0), machine=replace(MACHINE, neuron_versions=dict(old)))
    assert gate.performance_against(base, same)[0].startswith(f"{PERF_NODEID}: steady step ")


def _two_figures(report: SessionReport) -> SessionReport:
    second = replace(report.contract(PERF_NODEID), nodeid=PERF_NODEID + "z")
    return replace(report, contracts=(*report.contracts, second))


def test_tokens_per_step_within_the_rounding_tolerance_is_the_same_work(baseline):
    """Tokens per step that moved by at most TOKENS_RTOL of the baseline's (the rounding of the
    logged floats, the bound included) is the same step: its time is compared. Beyond it, that
    figure is named as other work, and the figures after it are still compared."""
    assert gate.performance.TOKENS_RTOL == 1e-3
    base = _two_figures(_identified(_with_performance(baseline, 1.0)))
    run = _two_figures(_identified(_with_performance(baseline, 1.0)))
    for before, after in ((2000, 2002), (2048, 2049)):  # 2 of 2000: the bound itself; 1 of 2048: inside
        lines = gate.performance_against(_with_rank0(base, tokens_per_step=before),
                                         _with_rank0(run, tokens_per_step=after))
        assert [l.split(": steady step ")[0] for l in lines] == [PERF_NODEID, PERF_NODEID + "z"], lines
    lines = gate.performance_against(_with_rank0(base, tokens_per_step=2048), _with_rank0(run, tokens_per_step=2051))
    assert lines[0] == (f"{PERF_NODEID}: tokens per step 2048 -> 2051 (rank 0): the step does other work, so its "
                        "time is not comparable")
    assert len(lines) == 2 and lines[1].startswith(f"{PERF_NODEID}z: steady step "), lines


# ----------------------------------------------------------------------------- added after mutation testing (round 3)


def test_the_history_lines_need_a_measured_launch(baseline, tmp_path):
    """A session without the performance contract's figures, or with one not measured (a peak of
    -1, as a backend without memory statistics logs), gets no history line: never a "no stored
    history" about figures that are not there; a measured one on an empty store gets that line."""
    assert gate.history_against(_identified(without_performance(baseline)), tmp_path) == []
    unmeasured = _with_rank0(_identified(_with_performance(baseline, 1.0)), peak_memory_gib=-1.0)
    assert gate.history_against(unmeasured, tmp_path) == []
    measured = gate.history_against(_identified(_with_performance(baseline, 1.0)), tmp_path)
    assert len(measured) == 1 and measured[0].startswith("no stored history of this suite on box"), measured
