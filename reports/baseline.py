"""Promote a session's report to the committed baseline of its stack.

    python -m reports.baseline RUN_DIR

Checks the report is complete and has no failure (known deviations, i.e. strict xfails,
are part of a baseline), then writes ``reports/baselines/<stack id>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reports.gate import baseline_for
from reports.pins import NotTrusted, read_report, trusted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.baseline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    args = parser.parse_args(argv)
    report = read_report(args.run)
    try:
        trusted(report)
    except NotTrusted as exc:
        print(f"not a baseline: {exc}", file=sys.stderr)
        return 1
    tiers = report["platforms"]
    if len(tiers) != 1:
        print(f"not a baseline: a baseline covers one tier, this report has {tiers}", file=sys.stderr)
        return 1
    target = baseline_for(report)
    target.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {target} ({len(report['contracts'])} contracts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
