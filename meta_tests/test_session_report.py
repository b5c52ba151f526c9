"""The session report's records (``reports.session_report``) against what is committed: every
baseline and every performance history file reads back and writes back the same; the reports
of earlier rounds (``meta_tests/reports_of_earlier_rounds``: committed baselines of
2026-11-29 to 12-03 as git holds them, cut to a few contracts and runs) read back and are
gated, compared and summarised; and the example pages' verdicts are the words the upgrade
records write."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.oracles.performance_record import CompileCacheEvents, PerformanceRecord, RankRecord
from fixtures.repo import REPO_ROOT
from reports import gate, pins, summary
from reports.inventory_record import Inventory, NkilibRecord, TitanApiRecord
from reports.perf_history import StackHistory
from reports.run_record import LaunchRecord, RootCauseRecord, RunRecord, StepRecord
from reports.session_report import (SCHEMA_VERSION, ContractRecord, ExpectationSourceRecord, MachineRecord,
                                    NotCovered, NotLaunched, PreflightFinding, ReportFormatError, SessionReport,
                                    SuiteIdentity)
from upgrades import compare
from upgrades.causes import CANDIDATE
from upgrades.verdict import ContractVerdict, Finding, Owner, UpgradeVerdict, label

pytestmark = pytest.mark.meta

BASELINES = sorted(p for p in (REPO_ROOT / "reports" / "baselines").glob("*.json") if not p.name.endswith(".pins.json"))
HISTORY = sorted((REPO_ROOT / "reports" / "history").rglob("*.json"))
EARLIER = sorted((Path(__file__).parent / "reports_of_earlier_rounds").glob("*.json"))
EXAMPLES = REPO_ROOT / "reports" / "examples"


def _comparable(data: dict) -> dict:
    """A report's JSON with each performance figure parsed and the figures it did not record
    (null) left out: what the records keep of it."""
    data = json.loads(json.dumps(data))
    for contract in data.get("contracts", []):
        text = (contract.get("measured") or {}).get("performance")
        if text:
            figures = json.loads(text)
            figures["ranks"] = {rank: {k: v for k, v in r.items() if v is not None} for rank, r in figures["ranks"].items()}
            contract["measured"]["performance"] = figures
    return data


def test_the_committed_reports_and_histories_are_there():
    assert len(BASELINES) >= 2 and len(HISTORY) >= 2 and len(EARLIER) == 4


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: p.name)
def test_every_committed_baseline_reads_back_whole(path):
    """Read through the records and written again, a committed baseline is the same report:
    no field lost, none added (a performance figure's unrecorded figures aside)."""
    data = json.loads(path.read_text())
    report = SessionReport.from_json(data)
    assert report.contracts and report.runs and report.schema_version == SCHEMA_VERSION
    assert _comparable(report.to_json()) == _comparable(data)


@pytest.mark.parametrize("path", HISTORY, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_stored_history_file_reads_back_whole(path):
    stored = StackHistory.read(path)
    assert stored.sessions and stored.machine.name
    assert json.loads(json.dumps(stored.to_json())) == json.loads(path.read_text())


@pytest.mark.parametrize("path", EARLIER, ids=lambda p: p.name.split(".")[-2])
def test_a_report_of_an_earlier_round_reads_back(path):
    """Reports written before the machine, the suite, the expectations' sources or the runs'
    launch records existed (the first kept the launch's exit flat in the run, and a contract's
    runs as ``{"key", "run_dir"}``) read back whole: every outcome, every run's key, exit and
    wall time; the gate, the upgrade comparison, the summary and the pins take them."""
    data = json.loads(path.read_text())
    report = SessionReport.load(path)
    assert report.outcomes == {c["nodeid"]: c["outcome"] for c in data["contracts"]}
    assert [r.key for r in report.runs] == [r["key"] for r in data["runs"]]
    recorded = {r["key"]: r for r in data["runs"]}
    for run in report.runs:
        launch = recorded[run.key].get("launch") or recorded[run.key]
        assert (run.ok, run.launch.returncode, run.launch.wall_s) == (recorded[run.key]["ok"], launch["returncode"],
                                                                      launch["wall_s"]) and run.session
    assert all(isinstance(key, str) for c in report.contracts for key in c.runs)
    assert report.inventory.versions["torch"] == data["inventory"]["packages"]["torch"]
    current = SessionReport.load(BASELINES[-1])
    result = gate.compare(report, current, history_root=REPO_ROOT / "reports" / "history")
    assert result.new and result.text().startswith("gate: ")  # the contracts added since, named
    if "suite" not in data:
        assert "the baseline records no suite identity" in result.text()
    comparison = compare.compare(report, current)
    assert comparison.contracts and comparison.verdict.text().startswith(("PASS", "FAIL"))
    assert f"# Conformance summary: session {data['session']}" in summary.render(report)
    assert "torch==" in pins.constraints(report)


def test_a_report_of_a_later_format_is_refused():
    with pytest.raises(ReportFormatError, match=f"a report of format {SCHEMA_VERSION + 1}: this suite reads format"):
        SessionReport.from_json({"schema_version": SCHEMA_VERSION + 1, "session": "s"})


def test_a_report_built_from_its_parts_reads_back_the_same():
    """Every part of a session report, built with its constructor, written and read again."""
    rank = RankRecord(steps=20, warmup_steps=2, first_step_s=1.5, step_time_s=0.1, step_time_p10_s=0.09,
                      step_time_p90_s=0.12, tokens_per_s=5120.0, tokens_per_step=512.0, peak_memory_gib=0.5,
                      memory_growth_mib_per_step=0.01, steady_times=(0.1, 0.11), steady=True, device_peak_gib=0.6,
                      device_categories_gib={"tensors": 0.4}, allocated_growth_mib_per_step=0.0,
                      peak_of_core_capacity=0.02, device_headroom_gib=23.4)
    performance = PerformanceRecord(ranks={"0": rank}, run="pretrain", warmup_rule="r",
                                    compile_cache=CompileCacheEvents(compiled=2, cached=1), core_capacity_gib=24.0)
    run = RunRecord(key="k", description="dense_native steps=2", ok=False, session="s",
                    steps=(StepRecord(1, loss=6.2, step_time_s=1.0, memory_gib=0.1,
                                      rest={"max_loss": 6.3, "grad_norm": 1.0, "tokens_per_s": 100.0}),),
                    launch=LaunchRecord(returncode=1, wall_s=3.0, stopped="cap",
                                        root_cause=RootCauseRecord("ValueError: x", "Traceback", {"rank": 1}),
                                        rest={"argv": ["torchrun"]}),
                    compile_cache=CompileCacheEvents(compiled=1), spec={"config": "dense_native"}, run_dir="/r",
                    finished_at=2.0)
    report = SessionReport(
        session="s", complete=True, exitstatus=0, started_at=1.0, finished_at=2.0, platforms=("trn2",),
        stack_id={"cpu": "cpu-a", "trn2": "trn2-b"}, rehearsal=True, markexpr="trn2",
        machine=MachineRecord(name="trn2.3xlarge LNC=2 cores 0-3", host="h", numerics={"arch": "x86_64"},
                              numerics_key="k", numerics_label="l", instance="trn2.3xlarge", lnc=2, cores="0-3",
                              neuron_versions={"driver": "2.19"}),
        suite=SuiteIdentity("r", "f", 3, "d"),
        inventory=Inventory(python="3.11.7", packages={"torch": "2.14.1", "nki": None}, torch_build="Neuron",
                            nkilib=NkilibRecord("bundled in neuronx-cc", "2.28", None, {"active_file": "x.py"}),
                            torchtitan_api=TitanApiRecord("override API: ...", {"named_overrides": True}),
                            system_packages={"aws-neuronx-dkms": "2.19"}, neuron_driver="2.19"),
        expectations={"trn2": ExpectationSourceRecord("trn2-b", "nearest", "trn2-a", "trn2-a"),
                      "cpu": ExpectationSourceRecord("cpu-a", "none", error="no file")},
        stack_preflight=(PreflightFinding("trn2", False, "torch lacks x", ("dense",)),
                         PreflightFinding("trn2", True, "facts", kind="stack fact")),
        not_launched=(NotLaunched("trn2", "moe", "session budget spent"),),
        not_covered=(NotCovered("conformance/test_moe.py::test_x", "cpu", "trn2 only"),),
        platform_profiles={"trn2": "trn2: ..."},
        contracts=(ContractRecord("conformance/test_performance.py::test_x[trn2]", "passed", 1.0, "performance", "trn2",
                                  True, runs=("k",), measured={"err": 0.1, "exact": True}, performance=performance,
                                  export_manifest=json.dumps([["w", [2], "bfloat16"]]), parameters="trn2"),
                   ContractRecord("conformance/test_y.py::test_y[trn2]", "xfailed", message="known", failure="boom",
                                  expectation="trn2-a.txt:3", repro_bundle="repro/y")),
        runs=(run,))
    assert SessionReport.from_json(json.loads(json.dumps(report.to_json()))) == report
    assert report.contracts[0].exported_dtypes == ["bfloat16"] and report.performance_figures == {
        report.contracts[0].nodeid: performance}


# The example pages (reports/examples) against the words the upgrade records write: each page's
# verdict from the parts it reports, and each performance heading a verdict's findings.
SELECTION_CPU = ("conformance/test_performance.py", "-m", "cpu")
SELECTION_TRN2 = ("conformance/test_performance.py", "-m", "trn2", "--neuron-dress-rehearsal")
POD = (*SELECTION_TRN2, "--rehearsal-host", "eks-pod-two-cores")
KEEPS = ContractVerdict()
EXAMPLE_VERDICTS = {
    "perf-a-a-torchtitan-0.3.0-over-itself.md": UpgradeVerdict(KEEPS, (Finding.PASS,), True, SELECTION_CPU),
    "perf-leak-torchtitan-0.3.0-activations-kept-alive.md": UpgradeVerdict(
        ContractVerdict(problems=("1 new contract(s) failing (not in the baseline)",)),
        (Finding.LARGER, Finding.LEAKING), False, SELECTION_CPU),
    "perf-rehearsal-trn2-a-a-with-a-a-series.md": UpgradeVerdict(KEEPS, (Finding.PASS,), True, POD),
    "perf-rehearsal-trn2-figures-only-without-a-a-series.md": UpgradeVerdict(KEEPS, (Finding.FIGURES_ONLY,), True, POD),
    "perf-rehearsal-trn2-slower-kernel-release.md": UpgradeVerdict(KEEPS, (Finding.SLOWER,), False, SELECTION_TRN2),
    "perf-slower-torchtitan-0.3.0-extra-all-reduce.md": UpgradeVerdict(KEEPS, (Finding.SLOWER,), False, SELECTION_CPU),
    "upgrade-history-transformers-5.24.0.md": UpgradeVerdict(KEEPS, (Finding.PASS,), True, SELECTION_CPU),
    "upgrade-matrix-three-candidates.md": UpgradeVerdict(
        ContractVerdict(problems=("5 newly failing",), owners=(Owner(CANDIDATE, 5, 1),)),
        partial_selection=("conformance/test_versions.py", "conformance/test_loss.py", "-m", "cpu")),
    "upgrade-torch-2.15.0.md": UpgradeVerdict(ContractVerdict(still_holding=9)),
    "upgrade-torchtitan-b5bcd76c6-over-5059f32c5.md": UpgradeVerdict(
        ContractVerdict(problems=("2 newly failing",), owners=(Owner(CANDIDATE, 2, 1),))),
    "upgrade-transformers-5.24.0.md": UpgradeVerdict(ContractVerdict(still_holding=9)),
}


def test_the_example_pages_verdicts_are_the_records_words():
    """Each committed example page's verdict line is what ``UpgradeVerdict`` writes from the
    parts that page reports, word for word; a page that built nothing says NOT BUILT."""
    pages = {p.name: p.read_text() for p in EXAMPLES.glob("*.md")}
    for name, page in sorted(pages.items()):
        found = re.search(r"^\*\*Verdict: (.+)\*\*$", page, re.M)
        if name in EXAMPLE_VERDICTS:
            assert found and found.group(1) == EXAMPLE_VERDICTS[name].text(), name
        elif found:
            assert found.group(1) == "NOT BUILT", name
    assert set(EXAMPLE_VERDICTS) <= set(pages)


def test_the_example_pages_performance_headings_are_findings():
    """Every "## Performance: ..." heading of the example pages is a verdict's findings as the
    records write them (``label``), each word a ``Finding``."""
    headings = [m.group(1) for p in EXAMPLES.glob("*.md")
                for m in re.finditer(r"^## Performance: ([A-Z +]+?)(?: \(accepted.*)?$", p.read_text(), re.M)]
    assert len(headings) >= 9
    for heading in headings:
        findings = tuple(Finding(word) for word in heading.split("+"))
        assert label(findings) == heading
    assert replace(UpgradeVerdict(KEEPS), performance=(Finding.LARGER, Finding.INCONCLUSIVE),
                   performance_passed=False).text() == (
        "FAIL (performance LARGER+INCONCLUSIVE): the candidate keeps every contract of the baseline")
