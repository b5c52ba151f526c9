"""The per-session report: report.json, junit.xml, summary.md, loss curves, repro bundles.

Written to ``--report-dir`` (default ``reports/out/<session id>/``, an ignored folder). The
report is first written at session start marked ``"complete": false`` and rewritten at the
end, so an interrupted session (Ctrl-C, SIGTERM) still leaves a partial report saying so,
with what had finished. Under pytest-xdist the controller writes the report; workers write
run records and repro bundles into the same folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from _pytest.junitxml import xml_key

from fixtures import repo
from fixtures.session import session_state
from fixtures.session.expectations import own_file_command, tier_stack_id
from fixtures.runs.result import RunResult
from fixtures.tiers.tier_name import Tier
from reports import bundle, gate, identity, inventory, neuron_debug, summary
from reports.collector import Collector
from reports.inventory_record import Inventory
from reports.layout import run_record_path
from reports.redact import scrub_text
from reports.run_record import RunRecord
from reports.session_report import NotCovered, NotLaunched, PreflightFinding, SessionReport

REPORT_DIR_ENV = "CONFORMANCE_REPORT_DIR"
REPORT_DIR = pytest.StashKey[Path]()
COLLECTOR = pytest.StashKey[Collector]()  # one record per contract (controller only)
STARTED = pytest.StashKey[float]()
# A contract area is a marker whose description in pyproject.toml starts with this.
AREA_DESCRIPTION_PREFIX = "contracts on "


def areas(config: pytest.Config) -> tuple[str, ...]:
    """The contract areas, as pyproject.toml registers them (``<area>: contracts on ...``)."""
    found = []
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        if description.strip().startswith(AREA_DESCRIPTION_PREFIX):
            found.append(name.split("(", 1)[0].strip())
    return tuple(found)



def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--report-dir", default=None,
                    help="where the session report goes (default reports/out/<session id>)")
    group.addoption("--gate-baseline", default=None,
                    help="compare this session's report with a baseline report.json and fail "
                         "the session on drift, new failures, missing or newly skipped contracts; "
                         "'auto': the committed baseline of this session's stack, "
                         "reports/baselines/<stack id>.json (a missing one fails the gate); "
                         "'if-present': that baseline when it exists (scripts/trn2.sh)")


def report_dir(config: pytest.Config) -> Path:
    return config.stash[REPORT_DIR]


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _terminate_as_interrupt(signum, frame):  # SIGTERM -> the same clean-up as Ctrl-C
    raise KeyboardInterrupt(f"received signal {signal.Signals(signum).name}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        config.stash[REPORT_DIR] = Path(os.environ[REPORT_DIR_ENV])
    else:
        chosen = config.getoption("--report-dir")
        directory = Path(chosen) if chosen else repo.REPO_ROOT / "reports" / "out" / repo.session_id()
        directory = directory.resolve()
        directory.mkdir(parents=True, exist_ok=True)
        # A reused report folder holds the previous session's run records and repro bundles:
        # this session's report replaces that one, so they must not leak into it.
        for stale in ("runs", "repro", "neuron"):
            shutil.rmtree(directory / stale, ignore_errors=True)
        config.stash[REPORT_DIR] = directory
        os.environ[REPORT_DIR_ENV] = str(directory)
        if not config.option.xmlpath:
            config.option.xmlpath = str(directory / "junit.xml")
        config.stash[COLLECTOR] = Collector()
        config.stash[STARTED] = time.time()
        _write_report(config, complete=False, exitstatus=None)
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)


def pytest_conformance_run(item: pytest.Item, result: RunResult) -> None:
    """A test used a run: keep the run's record in the report folder and name it on the test
    by its key (the record is ``runs/<key>.json``)."""
    _record_run(item.config, result)
    if ("run", result.key) not in item.user_properties:
        item.user_properties.append(("run", result.key))


def _record_run(config: pytest.Config, result: RunResult) -> None:
    record_path = run_record_path(report_dir(config), result.key)
    record_path.parent.mkdir(exist_ok=True)
    if not record_path.exists():
        tmp = record_path.with_name(record_path.name + ".tmp")
        tmp.write_text(json.dumps(result.to_json(), indent=1))
        os.replace(tmp, record_path)
        summary.plot_losses(result, record_path.with_suffix(".png"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tier = session_state.tier_of(item)
    area = next((a for a in areas(item.config) if item.get_closest_marker(a)), None)
    item.user_properties.append(("tier", tier))
    item.user_properties.append(("area", area))
    # junit.xml carries it on every case: a dashboard must not count a rehearsal as trn2
    item.user_properties.append(("rehearsal", tier == Tier.TRN2 and session_state.is_rehearsal(item.config)))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The controller collects one record per test; junit.xml's test suite says whether the
    session is a Neuron dress rehearsal."""
    if not _is_worker(session.config):
        session.config.pluginmanager.register(session.config.stash[COLLECTOR], "conformance-collector")
    trn2 = session_state.trn2_profile(session.config)
    if trn2 is not None and not _is_worker(session.config) and not session.config.getoption("--plan"):

        snapshot = report_dir(session.config) / "neuron" / neuron_debug.START_SNAPSHOT
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(neuron_debug.neuron_ls_all())
    xml = session.config.stash.get(xml_key, None)
    if xml is not None and trn2 is not None:
        rehearsal = session_state.is_rehearsal(session.config)
        xml.add_global_property("rehearsal", str(rehearsal).lower())
        xml.add_global_property("evidence", "CPU only: NEURON DRESS REHEARSAL on stand-ins, not trn2"
                                if rehearsal else "trn2 hardware")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    _scrub_report(report)
    if report.failed and not hasattr(report, "wasxfail"):
        path = bundle.write_bundle(report_dir(item.config), item, report,
                                   session_started=item.config.stash.get(STARTED, 0.0))
        # relative to the report folder: the report and its bundles move together
        item.user_properties.append(("repro_bundle", os.path.relpath(path, report_dir(item.config))))
        report.user_properties = list(item.user_properties)
        report.sections.append(("repro bundle", f"everything needed to replay this: {path}"))


def _scrub_report(report: pytest.TestReport) -> None:
    """Secret values never reach the terminal, junit.xml or any report: drop them from the
    failure text and captured output before anything renders the report."""
    env = dict(os.environ)
    text = report.longreprtext
    scrubbed = scrub_text(text, env) if text else text
    if scrubbed != text:
        report.longrepr = scrubbed
    report.sections = [(title, scrub_text(body, env)) for title, body in report.sections]


def inherited_note(report: SessionReport) -> str | None:
    """The line the gate and the console give a session whose expectations were inherited."""
    inherited = report.inherited_expectations
    if not inherited:
        return None
    return "; ".join(f"{t}: stack {e.stack} has no expectations file of its own, {e.file_stack}'s "
                     "were applied: its own deviations are not reviewed yet, so it is not a trusted stack"
                     for t, e in sorted(inherited.items()))


def _session_report(config: pytest.Config, complete: bool, exitstatus) -> SessionReport:
    """The session's report as it stands: every contract recorded so far, every run used."""
    directory = report_dir(config)
    runs = [RunRecord.from_json(json.loads(path.read_text()))
            for path in (sorted((directory / "runs").glob("*.json")) if (directory / "runs").exists() else [])]
    contracts = sorted(config.stash[COLLECTOR].records.values(), key=lambda r: r.nodeid)
    tiers = {c.tier for c in contracts if c.tier}
    caches = session_state.run_caches(config)
    return SessionReport(
        complete=complete, exitstatus=None if exitstatus is None else int(exitstatus), session=repo.session_id(),
        started_at=config.stash[STARTED], finished_at=time.time() if complete or exitstatus is not None else None,
        platforms=tuple(sorted(tiers)), stack_id={t: tier_stack_id(config, t) for t in Tier},
        expectations=identity.expectation_sources(config, tiers), rehearsal=session_state.is_rehearsal(config),
        machine=identity.machine(config), suite=identity.suite_identity(config, (c.nodeid for c in contracts)),
        platform_profiles=identity.platform_profiles(config),
        not_covered=tuple(n for n in map(NotCovered.from_json, session_state.not_covered(config)) if n.tier in tiers),
        inventory=Inventory.from_json(inventory.inventory()),
        stack_preflight=tuple(PreflightFinding.from_json({"tier": c.tier.name, **found})
                              for c in caches for found in c.guards.preflight_results),
        not_launched=tuple(NotLaunched.from_json({"tier": c.tier.name, **refused})
                           for c in caches for refused in c.guards.not_launched),
        markexpr=config.option.markexpr, contracts=tuple(contracts), runs=tuple(runs))


def _write_report(config: pytest.Config, complete: bool, exitstatus) -> SessionReport:
    report = _session_report(config, complete, exitstatus)
    directory = report_dir(config)
    tmp = directory / "report.json.tmp"
    tmp.write_text(scrub_text(json.dumps(report.to_json(), indent=1), dict(os.environ)))
    os.replace(tmp, directory / "report.json")
    return report


def _gate(config: pytest.Config, report: SessionReport) -> tuple[gate.GateResult | None, str | None]:
    """``--gate-baseline``: the session against its baseline (gate.txt), or why it is not gated."""
    baseline_path = config.getoption("--gate-baseline")
    if not baseline_path:
        return None, None
    if baseline_path in ("auto", "if-present"):
        candidate = gate.baseline_for(report)
        if baseline_path == "if-present" and (report.rehearsal or not candidate.is_file()):
            why = ("a dress rehearsal is never gated: it is not trn2 evidence" if report.rehearsal
                   else f"no committed baseline of this stack ({candidate.name})")
            note = f"gate: not gated, {why}"
            (report_dir(config) / "gate.txt").write_text(note + "\n")
            return None, note
        baseline_path = candidate
    result = gate.compare_with_file(Path(baseline_path), report)
    (report_dir(config) / "gate.txt").write_text(result.text())
    return result, None


def _tell(config: pytest.Config, report: SessionReport, gate_result, gate_note, inherited, interrupted) -> None:
    """The report's folder, what stopped runs, the gate and inherited expectations, on the console."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    size = sum(p.stat().st_size for p in report_dir(config).rglob("*") if p.is_file())
    state = "complete" if not interrupted else "INCOMPLETE (interrupted)"
    reporter.write_line("")
    reporter.write_sep("-", f"conformance report ({state}): {report_dir(config)} ({size / 1e6:.1f} MB)")
    for found in report.stack_preflight:
        if not found.ok:
            reporter.write_line(found.message, red=True)
    if gate_result is not None:
        reporter.write_line(gate_result.text(), red=not gate_result.ok, green=gate_result.ok)
    elif gate_note is not None:
        reporter.write_line(gate_note)
    if inherited:
        reporter.write_line(f"expectations: {inherited}", yellow=True)
        reporter.write_line(f"write this stack's own file from this session (then review it): "
                            f"{own_file_command(report_dir(config))}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config) or config.getoption("--plan"):
        return  # --plan prints what a session would launch; it runs nothing to report on
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    report = _write_report(config, complete=not interrupted, exitstatus=exitstatus)
    gate_result, gate_note = _gate(config, report)
    if gate_result is not None and not gate_result.ok and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    inherited = inherited_note(report)
    if inherited and (report_dir(config) / "gate.txt").exists():
        with open(report_dir(config) / "gate.txt", "a") as f:
            f.write(f"  expectations: {inherited}\n")
    junit = Path(config.option.xmlpath or "")
    if junit.is_file():  # belt and braces: written by pytest's junitxml plugin
        junit.write_text(scrub_text(junit.read_text(), dict(os.environ)))
    text = summary.render(report, gate_result)
    (report_dir(config) / "summary.md").write_text(scrub_text(text, dict(os.environ)))
    _tell(config, report, gate_result, gate_note, inherited, interrupted)
