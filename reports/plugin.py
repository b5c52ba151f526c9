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
import platform
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from fixtures import repo
from fixtures.session import session_state
from fixtures.session.expectations import expectation_source, own_file_command, tier_stack_id
from fixtures.runs.result import RunResult
from fixtures.tiers.tier_profile import cpu_profile
from fixtures.tiers import machine as machine_numerics
from fixtures.tiers import stack
from fixtures.tiers.tier_name import Tier
from reports import bundle, gate, inventory, neuron_debug, summary
from reports.layout import run_record_path
from reports.redact import scrub_text

SCHEMA_VERSION = 1
REPORT_DIR_ENV = "CONFORMANCE_REPORT_DIR"
REPORT_DIR = pytest.StashKey[Path]()
RECORDS = pytest.StashKey[dict]()  # node id -> the contract's record (controller only)
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
        config.stash[RECORDS] = {}
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
        record = result.to_json()
        tmp = record_path.with_name(record_path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, record_path)
        summary.plot_losses(record, record_path.with_suffix(".png"))


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
    from _pytest.junitxml import xml_key

    if not _is_worker(session.config):
        session.config.pluginmanager.register(_Collector(session.config), "conformance-collector")
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


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when != "call" and report.failed:
        return "error"
    return report.outcome




class _Collector:
    """Keeps one record per test from the reports the controller sees."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = self.config.stash[RECORDS]
        rec = records.setdefault(report.nodeid, {
            "nodeid": report.nodeid,
            "outcome": "passed",
            "duration_s": 0.0,
            "area": None,
            "tier": None,
        })
        rec["duration_s"] += report.duration
        outcome = _outcome(report)
        if report.when == "call":
            rec["outcome"] = outcome
        elif outcome != "passed" and rec["outcome"] == "passed":  # setup/teardown
            rec["outcome"] = outcome
        if report.failed or outcome in ("skipped", "xfailed"):
            text = report.longreprtext if report.failed else str(getattr(report, "wasxfail", "")) or report.longreprtext
            rec["message"] = scrub_text(text[-4000:], dict(os.environ))
        if outcome == "xfailed" and report.longreprtext:  # the failure itself, beside the recorded reason
            rec["failure"] = scrub_text(report.longreprtext[-4000:], dict(os.environ))
        for name, value in report.user_properties:
            if name == "run":
                rec.setdefault("runs", [])
                if value not in rec["runs"]:
                    rec["runs"].append(value)
            elif name in ("repro_bundle", "expectation", "tier", "area", "rehearsal"):
                rec[name] = value
            else:  # figures a contract measured (record_property): errors, losses, dtypes
                rec.setdefault("measured", {})[name] = value if isinstance(value, (int, float, bool)) else str(value)
        if "[" in report.nodeid:
            rec["parameters"] = report.nodeid.split("[", 1)[1].rstrip("]")


def machine(config: pytest.Config) -> dict:
    """What the performance figures belong to: the trn2 instance type (a rehearsal says it is
    one), else the CPU model, its logical CPUs and memory (a cpu figure is only comparable on
    the same machine)."""
    trn2 = session_state.trn2_profile(config)
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    host = f"{model} x{psutil.cpu_count()}, {psutil.virtual_memory().total / 2**30:.0f} GiB"
    # the numerics identity (fixtures.tiers.machine): the kernel paths the session's figures
    # were computed on; a baseline of another key was computed on other paths
    described = machine_numerics.describe()
    numerics = {"numerics": described, "numerics_key": machine_numerics.key(described),
                "numerics_label": machine_numerics.label(described)}
    if trn2 is not None and trn2.instance:
        # what a trn2 figure also depends on: the LNC, the cores the session was given, the
        # Neuron runtime's and driver's versions (a figure of another of these is another machine's)
        neuron = {"lnc": trn2.lnc, "cores": f"{trn2.first_core}-{trn2.first_core + trn2.nproc_per_node - 1}",
                  "neuron_versions": {**stack.deb_versions(), "driver": stack.neuron_driver_version()}}
        return {"name": f"{trn2.instance} LNC={trn2.lnc} cores {neuron['cores']}"
                        + (" (rehearsal on " + host + ")" if trn2.rehearsal else ""),
                "instance": trn2.instance, "host": host, **neuron, **numerics}
    return {"name": host, "host": host, **numerics}


def suite_identity(config: pytest.Config) -> dict:
    """What the suite itself was when it measured: its assets' recipe and files (the tiny
    checkpoints, tokenizer and dataset every cpu figure comes from), and its contract set. A
    baseline of another suite measured other things: the gate and the upgrade page compare no
    figure across it."""
    import hashlib

    from fixtures.data import assets

    recipe = assets.recipe_key()
    manifest = session_state.cache_root(config) / "assets" / recipe / "manifest.json"
    files = json.loads(manifest.read_text())["files"] if manifest.is_file() else None
    nodeids = sorted(config.stash[RECORDS])
    return {"assets_recipe": recipe,
            "assets_files": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
            if files else None,
            "contracts": len(nodeids),
            "contracts_digest": hashlib.sha256("\n".join(nodeids).encode()).hexdigest()[:16]}


def _profiles(config: pytest.Config) -> dict:

    out = {"cpu": cpu_profile().describe()}
    trn2 = session_state.trn2_profile(config)
    if trn2 is not None:
        out["trn2"] = trn2.describe()
    return out


def _expectation_sources(config: pytest.Config, tiers) -> dict:
    """Per tier run: whose expectations file applied (its own, or inherited, and from whom)."""
    out = {}
    for tier in sorted(tiers):
        try:
            out[tier] = expectation_source(config, tier_stack_id(config, tier)).as_dict()
        except pytest.UsageError as exc:
            out[tier] = {"stack": tier_stack_id(config, tier), "how": "none", "error": str(exc)}
    return out


def inherited_note(report: dict) -> str | None:
    """The line the gate and the console give a session whose expectations were inherited."""
    inherited = {t: e for t, e in (report.get("expectations") or {}).items() if e.get("inherited_from")}
    if not inherited:
        return None
    return "; ".join(f"{t}: stack {e['stack']} has no expectations file of its own, {e['file_stack']}'s "
                     "were applied: its own deviations are not reviewed yet, so it is not a trusted stack"
                     for t, e in sorted(inherited.items()))


def _write_report(config: pytest.Config, complete: bool, exitstatus) -> dict:
    directory = report_dir(config)
    run_records = []
    for path in sorted((directory / "runs").glob("*.json")) if (directory / "runs").exists() else []:
        run_records.append(json.loads(path.read_text()))
    report = {
        "schema_version": SCHEMA_VERSION,
        "complete": complete,
        "exitstatus": None if exitstatus is None else int(exitstatus),
        "session": repo.session_id(),
        "started_at": config.stash[STARTED],
        "finished_at": time.time() if complete or exitstatus is not None else None,
        "platforms": sorted({r["tier"] for r in config.stash[RECORDS].values() if r.get("tier")}),
        "stack_id": {t: tier_stack_id(config, t) for t in Tier},
        "expectations": _expectation_sources(config, {r["tier"] for r in config.stash[RECORDS].values()
                                                      if r.get("tier")}),
        "rehearsal": session_state.is_rehearsal(config),
        "machine": machine(config),
        "suite": suite_identity(config),
        "platform_profiles": _profiles(config),
        "not_covered": [n for n in session_state.not_covered(config)
                        if n["tier"] in {r["tier"] for r in config.stash[RECORDS].values()}],
        "inventory": inventory.inventory(),
        "stack_preflight": [{"tier": c.tier.name, **found}
                            for c in session_state.run_caches(config) for found in c.guards.preflight_results],
        "not_launched": [{"tier": c.tier.name, **refused}
                         for c in session_state.run_caches(config) for refused in c.guards.not_launched],
        "markexpr": config.option.markexpr,
        "contracts": sorted(config.stash[RECORDS].values(), key=lambda r: r["nodeid"]),
        "runs": run_records,
    }
    tmp = directory / "report.json.tmp"
    tmp.write_text(scrub_text(json.dumps(report, indent=1), dict(os.environ)))
    os.replace(tmp, directory / "report.json")
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config) or config.getoption("--plan"):
        return  # --plan prints what a session would launch; it runs nothing to report on
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    report = _write_report(config, complete=not interrupted, exitstatus=exitstatus)
    baseline_path = config.getoption("--gate-baseline")
    gate_result = None
    gate_note = None
    if baseline_path:

        if baseline_path in ("auto", "if-present"):
            candidate = gate.baseline_for(report)
            if baseline_path == "if-present" and (report.get("rehearsal") or not candidate.is_file()):
                why = ("a dress rehearsal is never gated: it is not trn2 evidence" if report.get("rehearsal")
                       else f"no committed baseline of this stack ({candidate.name})")
                gate_note = f"gate: not gated, {why}"
                baseline_path = None
            else:
                baseline_path = candidate
        if baseline_path is not None:
            gate_result = gate.compare_with_file(Path(baseline_path), report)
            (report_dir(config) / "gate.txt").write_text(gate_result.text())
            if not gate_result.ok and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            (report_dir(config) / "gate.txt").write_text(gate_note + "\n")
    inherited = inherited_note(report)
    if inherited and (report_dir(config) / "gate.txt").exists():
        with open(report_dir(config) / "gate.txt", "a") as f:
            f.write(f"  expectations: {inherited}\n")
    junit = Path(config.option.xmlpath or "")
    if junit.is_file():  # belt and braces: written by pytest's junitxml plugin
        junit.write_text(scrub_text(junit.read_text(), dict(os.environ)))
    text = summary.render(report, gate_result)
    (report_dir(config) / "summary.md").write_text(scrub_text(text, dict(os.environ)))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        size = sum(p.stat().st_size for p in report_dir(config).rglob("*") if p.is_file())
        state = "complete" if not interrupted else "INCOMPLETE (interrupted)"
        reporter.write_line("")
        reporter.write_sep("-", f"conformance report ({state}): {report_dir(config)} ({size / 1e6:.1f} MB)")
        for found in report["stack_preflight"]:
            if not found["ok"]:
                reporter.write_line(found["message"], red=True)
        if gate_result is not None:
            reporter.write_line(gate_result.text(), red=not gate_result.ok, green=gate_result.ok)
        elif gate_note is not None:
            reporter.write_line(gate_note)
        if inherited:
            reporter.write_line(f"expectations: {inherited}", yellow=True)
            reporter.write_line(f"write this stack's own file from this session (then review it): "
                                f"{own_file_command(report_dir(config))}")
