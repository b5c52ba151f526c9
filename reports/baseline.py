"""Promote a session's report to the committed baseline of its stack.

    python -m reports.baseline RUN_DIR

Checks the report is complete and has no failure (known deviations, i.e. strict xfails,
are part of a baseline), then writes ``reports/baselines/<stack id>.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reports.cli import command_parser
from reports.gate import baseline_for
from reports.pins import read_trusted_report


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("reports.baseline", __doc__)
    parser.add_argument("run", type=Path)
    args = parser.parse_args(argv)
    report = read_trusted_report(args.run, "not a baseline")
    if report is None:
        return 1
    if len(report.platforms) != 1:
        print(f"not a baseline: a baseline covers one tier, this report has {list(report.platforms)}", file=sys.stderr)
        return 1
    target = baseline_for(report)
    report.write(target)
    print(f"wrote {target} ({len(report.contracts)} contracts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
