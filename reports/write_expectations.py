"""Write a stack's own expectations file from a session that inherited another stack's.

    python -m reports.write_expectations REPORT_DIR [--expectations-dir DIR]

The first session on a stack nobody has seen (a real Neuron release) runs with the nearest
known stack's expectations. This writes ``<expectations dir>/<stack id>.txt`` for each tier
whose expectations were inherited: every inherited deviation that held (an xfail) is kept with
its reason and link; one that no longer holds (an XPASS) is left out, with a comment; every
contract that failed is a commented line to review (a deviation of this stack to record with
its reason and link, or a defect to fix). An existing file is never overwritten.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fixtures.session.expectations import EXPECTATIONS_DIR, parse
from reports.cli import command_parser
from reports.pins import read_report


def file_text(report: dict, tier: str, source: dict, inherited: dict) -> str:
    contracts = [c for c in report["contracts"] if c.get("tier") == tier]
    lines = [f"# Known deviations of {source['stack']}, written by reports.write_expectations from session "
             f"{report['session']}, which inherited {source['file_stack']}'s. Review every line before a "
             "baseline is promoted.", "# Format: <node id> | <reason> | <link>"]
    for c in sorted(contracts, key=lambda c: c["nodeid"]):
        exp = inherited.get(c["nodeid"])
        if c["outcome"] == "xfailed" and exp is not None:
            lines.append(f"{exp.nodeid} | {exp.reason} | {exp.link}")
        elif c["outcome"] == "xpassed" and exp is not None:
            lines.append(f"# no longer deviates on this stack (XPASS), left out: {exp.nodeid}")
        elif c["outcome"] in ("failed", "error"):
            first = next((l.strip() for l in (c.get("message") or "").splitlines() if l.strip().startswith("E ")),
                         "see the report")
            lines.append(f"# FAILED on this stack, review (a deviation to record, or a defect): {c['nodeid']} "
                         f"| {first[:200]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("reports.write_expectations", __doc__)
    parser.add_argument("run", type=Path)
    parser.add_argument("--expectations-dir", type=Path, default=EXPECTATIONS_DIR)
    args = parser.parse_args(argv)
    report = read_report(args.run)
    sources = {t: s for t, s in (report.get("expectations") or {}).items() if s.get("inherited_from")}
    if not sources:
        print("write_expectations: the session applied each stack's own expectations; nothing to write",
              file=sys.stderr)
        return 2
    targets = {tier: args.expectations_dir / f"{source['stack']}.txt" for tier, source in sources.items()}
    existing = [str(t) for t in targets.values() if t.exists()]
    if existing:
        print(f"write_expectations: {', '.join(existing)} exists; nothing overwritten", file=sys.stderr)
        return 2
    for tier, target in sorted(targets.items()):
        source = sources[tier]
        target.write_text(file_text(report, tier, source, parse(args.expectations_dir / f"{source['file_stack']}.txt")))
        print(f"wrote {target}: review it, then rerun the session on its own expectations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
