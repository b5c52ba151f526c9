"""The version-pinning gate and the pins it emits, on reports derived from the committed
cpu baseline (a real report of a known-good session)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.tiers import stack
from reports import gate, inventory, pins

pytestmark = pytest.mark.meta

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "reports" / "baselines" / f"{stack.stack_id('cpu')}.json"


@pytest.fixture
def baseline() -> dict:
    return json.loads(BASELINE.read_text())


def _first(report: dict, outcome: str) -> dict:
    return next(c for c in report["contracts"] if c["outcome"] == outcome)


def test_committed_baseline_is_this_stack(baseline):
    """The committed baseline was made on the stack installed here: no version drift."""
    run = copy.deepcopy(baseline)
    run["inventory"] = inventory.inventory()
    result = gate.compare(baseline, run)
    assert result.drift == [], result.text()
    assert result.ok, result.text()
    assert baseline["complete"] and baseline["contracts"]


def test_committed_baseline_is_this_suites():
    """The committed baselines were recorded by this suite: its assets' recipe (the tiny
    checkpoints, tokenizer and dataset every cpu figure comes from). A change to what they
    measure fails here until they are re-recorded (python -m reports.baseline REPORT_DIR);
    before, the baseline of an earlier round's checkpoints listed 10 'new contracts' and its
    step-1 losses as 'figures that moved'."""
    from fixtures.data import assets

    recorded = (json.loads(BASELINE.read_text()).get("suite") or {}).get("assets_recipe")
    assert recorded == assets.recipe_key(), (
        f"{BASELINE.name} was recorded with assets {recorded}, this suite builds {assets.recipe_key()}: re-record it")


def test_gate_fails_on_version_drift(baseline):
    run = copy.deepcopy(baseline)
    run["inventory"]["packages"]["transformers"] = "5.24.0"
    result = gate.compare(baseline, run)
    assert not result.ok
    assert ("transformers", baseline["inventory"]["packages"]["transformers"], "5.24.0") in result.drift
    assert "version drift: transformers" in result.text()


def test_gate_fails_on_newly_failing_contract(baseline):
    run = copy.deepcopy(baseline)
    victim = _first(run, "passed")
    victim["outcome"] = "failed"
    result = gate.compare(baseline, run)
    assert not result.ok and result.newly_failing == [victim["nodeid"]]
    assert f"newly failing: {victim['nodeid']}" in result.text()


def test_gate_fails_on_skip_where_baseline_ran(baseline):
    run = copy.deepcopy(baseline)
    victim = _first(run, "passed")
    victim["outcome"] = "skipped"
    result = gate.compare(baseline, run)
    assert not result.ok and result.newly_skipped == [victim["nodeid"]]


def test_gate_fails_on_missing_contract_and_incomplete_report(baseline):
    run = copy.deepcopy(baseline)
    gone = run["contracts"].pop()
    result = gate.compare(baseline, run)
    assert not result.ok and result.missing == [gone["nodeid"]]
    run = copy.deepcopy(baseline)
    run["complete"] = False
    assert not gate.compare(baseline, run).ok


def test_new_contracts_are_listed_and_fail_the_gate_only_when_failing(baseline):
    """A contract the baseline does not have is named with its outcome; passing, it leaves
    the gate green; failing, it turns it red (a stack is trusted only if it passes them all)."""
    run = copy.deepcopy(baseline)
    run["contracts"].append({"nodeid": "conformance/test_new.py::test_added[cpu]", "outcome": "passed"})
    result = gate.compare(baseline, run)
    assert result.ok and result.new == [("conformance/test_new.py::test_added[cpu]", "passed")]
    assert "new contract, not in the baseline (passed): conformance/test_new.py::test_added[cpu]" in result.text()
    run["contracts"][-1]["outcome"] = "failed"
    result = gate.compare(baseline, run)
    assert not result.ok and result.new_failing == ["conformance/test_new.py::test_added[cpu]"]
    assert "(failed: fails the gate)" in result.text()


def test_strict_xfail_turning_into_failure_is_newly_failing(baseline):
    xfails = [c for c in baseline["contracts"] if c["outcome"] == "xfailed"]
    if not xfails:
        pytest.fail("the baseline records no known deviation; it should (see expectations)")
    run = copy.deepcopy(baseline)
    next(c for c in run["contracts"] if c["nodeid"] == xfails[0]["nodeid"])["outcome"] = "failed"
    assert gate.compare(baseline, run).newly_failing == [xfails[0]["nodeid"]]


def test_gate_cli_exit_codes(baseline, tmp_path):
    same = tmp_path / "same.json"
    same.write_text(json.dumps(baseline))
    proc = subprocess.run([sys.executable, "-m", "reports.gate", str(BASELINE), str(same)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and "gate: PASS" in proc.stdout
    drifted = copy.deepcopy(baseline)
    drifted["inventory"]["packages"]["torch"] = "2.15.0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(drifted))
    proc = subprocess.run([sys.executable, "-m", "reports.gate", str(BASELINE), str(bad)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "version drift: torch" in proc.stdout


def test_pins_from_a_passing_run(baseline, tmp_path):
    constraints = pins.constraints(baseline)
    for name, version in baseline["inventory"]["packages"].items():
        if version:
            assert f"{name}=={version}" in constraints
    assert "--no-deps" in constraints
    table = pins.version_table(baseline)
    assert table.startswith("| package | version |") and "| torchtitan |" in table


def test_pins_refuse_an_untrusted_run(baseline):
    run = copy.deepcopy(baseline)
    _first(run, "passed")["outcome"] = "failed"
    with pytest.raises(pins.NotTrusted, match="did not pass"):
        pins.trusted(run)


def test_trn2_pins_are_data_marked_unverified():
    data = json.loads((REPO / "reports" / "baselines" / "trn2-neuron-2.33.0.pins.json").read_text())
    assert data["verified_on_hardware"] is False
    assert data["packages"]["torch-neuronx"] == "2.14.3.0"
    assert data["packages"]["torch"] == "2.14.0"


def test_gate_compares_like_with_like(baseline):
    """A session of another stack (the fork's vintage against the 0.3.0 baseline) fails the
    gate naming both stacks and the baseline to use; ``auto`` picks the session's own."""
    run = copy.deepcopy(baseline)
    run["stack_id"] = {**run["stack_id"], "cpu": "cpu-torch2.14-titan0.2+git5059f32"}
    result = gate.compare(baseline, run)
    assert not result.ok
    assert "belongs to stack cpu-torch2.14-titan0.3" in result.text()
    assert "reports/baselines/cpu-torch2.14-titan0.2+git5059f32.json" in result.text()
    assert gate.baseline_for(run).name == "cpu-torch2.14-titan0.2+git5059f32.json"
    missing = gate.compare_with_file(REPO / "reports" / "baselines" / "no-such-stack.json", run)
    assert not missing.ok and "no committed baseline" in missing.text()


def _with_performance(report: dict, step: float) -> dict:
    from meta_tests.test_performance import SERIES, _rank

    report = copy.deepcopy(report)
    figures = {"run": "pretrain", "warmup_rule": "r",
               "ranks": {"0": _rank([t * step for t in SERIES[0]["steady_times"]], 0.88, 0.0)}}
    report["contracts"].append({"nodeid": "conformance/test_performance.py::test_steady_state_is_reached_and_measured[cpu]",
                                "outcome": "passed", "measured": {"performance": json.dumps(figures)}})
    return report


def test_the_gate_compares_no_figure_with_a_baseline_of_another_suite(baseline):
    """A baseline recorded with other checkpoints (another assets recipe) measured other
    things: the gate says so and compares no figure across it; a baseline of the same suite
    is compared."""
    base, run = _with_performance(baseline, 1.0), _with_performance(baseline, 1.5)
    run["suite"] = dict(base["suite"])
    same = gate.compare(base, run)
    assert same.other_suite is None and "steady step slower by" in same.text(), same.text()
    run["suite"]["assets_recipe"] = "0123456789abcdef"
    other = gate.compare(base, run)
    assert other.other_suite and "recorded by another suite" in other.text()
    assert "assets_recipe" in other.text() and "steady step" not in other.text()
    unrecorded = gate.compare({**base, "suite": None}, run)
    assert "records no suite identity" in unrecorded.text() and "steady step" not in unrecorded.text()


def test_the_gate_says_when_its_baseline_took_other_kernel_paths(baseline):
    run = copy.deepcopy(baseline)
    assert gate.compare(baseline, run).other_machine is None
    run["machine"] = {**run["machine"], "numerics_key": "another", "numerics_label": "AuthenticAMD EPYC, AVX512 kernels"}
    text = gate.compare(baseline, run).text()
    assert "this session on AuthenticAMD EPYC, AVX512 kernels" in text and "may be this machine's" in text


def test_a_deviation_failing_differently_is_newly_failing_with_both_reasons(baseline):
    from fixtures.session.expectations import DIFFERENTLY

    run = copy.deepcopy(baseline)
    held = _first(run, "xfailed")
    held["outcome"] = "failed"
    held["message"] = (f"RuntimeError: torchrun exited -9\n\n{DIFFERENTLY} (x.txt:3): recorded: failure matching "
                       "'drops lm_head'; now: RuntimeError: torchrun exited -9")
    result = gate.compare(baseline, run)
    assert not result.ok and held["nodeid"] in result.newly_failing
    assert f"{DIFFERENTLY} (x.txt:3): recorded: failure matching 'drops lm_head'" in result.text()
