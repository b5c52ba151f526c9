"""Emit a passing run's stack as pins: a pip constraints file and the version table.

    python -m reports.pins RUN [--constraints FILE] [--table FILE]

The write-up the suite grew from says to pin versions but has no version table, and says
to install with ``--no-deps`` while showing ``pip install -r``. A run that passed every
contract emits both: ``pip install --no-deps -c FILE ...`` keeps exactly the versions that
passed (and, on a Neuron host, keeps pip from replacing the Neuron build of torch).
Refuses a run with failures, errors or an incomplete report: only a trusted stack is pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reports.cli import command_parser
from reports.session_report import SessionReport


class NotTrusted(RuntimeError):
    pass


def read_trusted_report(run: Path, refusal: str) -> SessionReport | None:
    """The report at ``run`` if its stack is trusted (``trusted``); else None, after saying
    on stderr ``refusal: why``."""
    report = SessionReport.load(run)
    try:
        trusted(report)
    except NotTrusted as exc:
        print(f"{refusal}: {exc}", file=sys.stderr)
        return None
    return report


def trusted(report: SessionReport) -> None:
    bad = [c.nodeid for c in report.contracts if c.outcome in ("failed", "error", "xpassed")]
    if not report.complete:
        raise NotTrusted("the report is incomplete (interrupted session)")
    if bad:
        raise NotTrusted(f"{len(bad)} contracts did not pass, e.g. {bad[0]}")
    if not report.contracts:
        raise NotTrusted("the report has no contracts")
    if report.rehearsal:
        raise NotTrusted("the session was a Neuron dress rehearsal on CPU stand-ins: it is not "
                         "evidence for any stack's versions")
    inherited = {t: e.file_stack for t, e in report.inherited_expectations.items()}
    if inherited:
        raise NotTrusted("the session applied another stack's expectations ("
                         + ", ".join(f"{t}: {s}'s" for t, s in sorted(inherited.items()))
                         + "): write and review the stack's own file first (python -m reports.write_expectations)")


def constraints(report: SessionReport) -> str:
    inv = report.inventory
    lines = [
        f"# Stack that passed every contract in session {report.session}",
        f"# python {inv.python}, torch build: {inv.torch_build}",
        "# install with: pip install --no-deps -c THIS_FILE <packages>",
    ]
    lines += [f"{name}=={version}" for name, version in sorted(inv.packages.items()) if version]
    return "\n".join(lines) + "\n"


def version_table(report: SessionReport) -> str:
    inv = report.inventory
    rows = [f"| {name} | {version} |" for name, version in inv.packages.items() if version]
    rows.append(f"| python | {inv.python} |")
    for name, version in inv.system_packages.items():
        if version:
            rows.append(f"| {name} (system) | {version} |")
    if inv.neuron_driver:
        rows.append(f"| neuron driver | {inv.neuron_driver} |")
    return "| package | version |\n|---|---|\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("reports.pins", __doc__)
    parser.add_argument("run", type=Path, help="a report.json, or the report folder holding it")
    parser.add_argument("--constraints", type=Path)
    parser.add_argument("--table", type=Path)
    args = parser.parse_args(argv)
    report = read_trusted_report(args.run, "not emitting pins")
    if report is None:
        return 1
    if args.constraints:
        args.constraints.write_text(constraints(report))
    if args.table:
        args.table.write_text(version_table(report))
    if not (args.constraints or args.table):
        print(version_table(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
