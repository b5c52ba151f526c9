"""Write a stack's own expectations file from a session that inherited another stack's, or
pin an existing file's deviations to the failures a session measured.

    python -m reports.write_expectations REPORT_DIR [--expectations-dir DIR]
    python -m reports.write_expectations --pin FILE REPORT_DIR [REPORT_DIR ...]

The first session on a stack nobody has seen (a real Neuron release) runs with the nearest
known stack's expectations. This writes ``<expectations dir>/<stack id>.txt`` for each tier
whose expectations were inherited: every inherited deviation that held (an xfail) is kept with
its reason and link; one that no longer holds (an XPASS) is left out, with a comment; every
contract that failed is a commented line to review (a deviation of this stack to record with
its reason and link, or a defect to fix). An existing file is never overwritten.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

from fixtures.session.expectations import (EXPECTATIONS_DIR, LINE_FORMAT, NOT_MEASURED, SIGNATURE_PREFIX, Expectation,
                                           parse)
from reports.cli import command_parser
from reports.session_report import ExpectationSourceRecord, SessionReport


def file_text(report: SessionReport, tier: str, source: ExpectationSourceRecord,
              inherited: Mapping[str, Expectation]) -> str:
    contracts = [c for c in report.contracts if c.tier == tier]
    lines = [f"# Known deviations of {source.stack}, written by reports.write_expectations from session "
             f"{report.session}, which inherited {source.file_stack}'s. Review every line before a "
             "baseline is promoted.", f"# Format: {LINE_FORMAT}"]
    for c in sorted(contracts, key=lambda c: c.nodeid):
        exp = inherited.get(c.nodeid)
        if c.outcome == "xfailed" and exp is not None:
            lines.append(exp.line())  # it held here: failed as recorded, signature included
        elif c.outcome == "xpassed" and exp is not None:
            lines.append(f"# no longer deviates on this stack (XPASS), left out: {exp.nodeid}")
        elif c.outcome in ("failed", "error"):
            first = next((l.strip() for l in (c.message or "").splitlines() if l.strip().startswith("E ")),
                         "see the report")
            lines.append(f"# FAILED on this stack, review (a deviation to record, or a defect): {c.nodeid} "
                         f"| {first[:200]}")
    return "\n".join(lines) + "\n"


_CONTRACT = re.compile(r"^(?:E\s+)?(?:AssertionError: )?contract: (.+?)\s*$", re.M)
_ACTUAL = re.compile(r"^(?:E\s+)?actual:\s+(.+?)\s*$", re.M)
_EXCEPTION = re.compile(r"^(?:E\s+)?(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+?)\s*$", re.M)
_NUMBER = re.compile(r"\d\.\d|/work/|/tmp/|\.cache/")  # a figure or a path: moves by machine and checkout


def _readable(text: str, figures: bool = False) -> str:
    """``text`` as a regex that reads like it: re.escape without escaping spaces, quotes and
    dashes; a rank number matches any rank; with ``figures``, every decimal or scientific number
    matches any (a tolerance in a contract's wording may change without the deviation changing)."""
    escaped = re.escape(text).replace("\\ ", " ").replace("\\-", "-").replace("\\'", "'")
    escaped = re.sub(r"rank(\d+)\\\]", r"rank\\d+\\]", escaped)
    if figures:
        escaped = re.sub(r"(?<![\w\\])\d+(?:\\\.\d+(?:e-?\d+)?|e-?\d+)(?!\w)", r"[-+.e\\d]+", escaped)
    return escaped


def signature_of(failure: str) -> str:
    """A failure signature (a regex for ``Expectation.holds_for``) from a measured failure: the
    contract's own line with its actual value where that value is no figure or path (a figure
    moves by machine and kernel path, the deviation does not); else the exception type and the
    start of its message; else the failure's first line."""
    contract = _CONTRACT.search(failure)
    if contract:
        signature = _readable(f"contract: {contract.group(1)}", figures=True)
        actual = _ACTUAL.search(failure, contract.end())
        if actual and not _NUMBER.search(actual.group(1)[:60]):
            signature += r"[\s\S]*?actual: +" + _readable(actual.group(1)[:60])
        return signature
    found = [(n, m) for n, m in _EXCEPTION.findall(failure) if n not in ("ChildFailedError", "AssertionError")] \
        or _EXCEPTION.findall(failure)
    if found:
        name, message = found[-1]
        return _readable(f"{name}: {_NUMBER.split(message)[0][:80]}")
    first = next((l.strip() for l in failure.splitlines() if l.strip()), "")
    return _readable(first[:80]) if first else NOT_MEASURED


def pin(path: Path, reports: list[SessionReport]) -> tuple[str, list[str], list[str]]:
    """``path`` with each deviation's signature taken from the first report where it xfailed:
    (the new text, the node ids pinned, those no report saw fail as a deviation)."""
    failures = {}
    for report in reports:
        for c in report.contracts:
            if c.outcome == "xfailed" and c.failure and c.nodeid not in failures:
                failures[c.nodeid] = c.failure
    expectations = {e.source.rsplit(":", 1)[1]: e for e in parse(path).values()}
    lines, pinned, unseen = [], [], []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        exp = expectations.get(str(number))
        if exp is None:
            lines.append(raw)
        elif exp.nodeid in failures:
            lines.append(f"{exp.nodeid} | {exp.reason} | {exp.link} | {SIGNATURE_PREFIX}{signature_of(failures[exp.nodeid])}")
            pinned.append(exp.nodeid)
        else:
            lines.append(exp.line())
            unseen.append(exp.nodeid)
    return "\n".join(lines) + "\n", pinned, unseen


def pin_main(args) -> int:
    reports = [SessionReport.load(r) for r in args.reports]
    text, pinned, unseen = pin(args.pin, reports)
    args.pin.write_text(text)
    print(f"pinned {len(pinned)} deviation(s) of {args.pin.name} to their measured failures")
    for nodeid in unseen:
        print(f"  not seen failing as a deviation in these sessions, left as it was: {nodeid}")
    return 0 if not unseen else 1


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("reports.write_expectations", __doc__)
    parser.add_argument("run", type=Path)
    parser.add_argument("reports", type=Path, nargs="*", help="with --pin: more sessions to read")
    parser.add_argument("--expectations-dir", type=Path, default=EXPECTATIONS_DIR)
    parser.add_argument("--pin", type=Path, metavar="FILE",
                        help="pin FILE's deviations to the failures the given sessions measured")
    args = parser.parse_args(argv)
    if args.pin is not None:
        args.reports = [args.run, *args.reports]
        return pin_main(args)
    report = SessionReport.load(args.run)
    sources = report.inherited_expectations
    if not sources:
        print("write_expectations: the session applied each stack's own expectations; nothing to write",
              file=sys.stderr)
        return 2
    targets = {tier: args.expectations_dir / f"{source.stack}.txt" for tier, source in sources.items()}
    existing = [str(t) for t in targets.values() if t.exists()]
    if existing:
        print(f"write_expectations: {', '.join(existing)} exists; nothing overwritten", file=sys.stderr)
        return 2
    for tier, target in sorted(targets.items()):
        source = sources[tier]
        target.write_text(file_text(report, tier, source, parse(args.expectations_dir / f"{source.file_stack}.txt")))
        print(f"wrote {target}: review it, then rerun the session on its own expectations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
