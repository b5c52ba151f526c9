"""Several candidates against one trusted stack, one page: ``--candidate-matrix FILE``.

    bash scripts/upgrade.sh --candidate-matrix FILE [other options] [-- pytest selection]

Each non-comment line of FILE is one candidate set, its candidates separated by whitespace
(``torch==2.15.0``; ``torch==2.15.0 transformers==5.24.0``; a wheel path). Every row is the
single upgrade check (``upgrades``) with its own folder (``row-N/``: its page, its
candidate's session); each environment is built once (the candidate environment cache), and
the trusted session runs once: on cpu the committed baseline serves every row, on trn2 the
first row's trusted session is handed to the others (``--baseline-report``). ``matrix.md``
and ``matrix.json`` have a row per candidate set: its verdict, its causes, its wall time.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrades.result import UpgradeResult
from upgrades.stacks import REPO


class MatrixUsageError(ValueError):
    pass


def rows(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise MatrixUsageError(f"--candidate-matrix {path}: no such file")
    found = [shlex.split(line.split("#", 1)[0]) for line in path.read_text().splitlines()]
    found = [r for r in found if r]
    if not found:
        raise MatrixUsageError(f"--candidate-matrix {path}: no candidate set in it (one per line)")
    return found


@dataclass(frozen=True)
class NotBuilt:
    """A row with no upgrade.json: its page's verdict (NOT BUILT) and pip's last lines."""

    verdict: str
    reason: tuple[str, ...]
    passed = False

    def to_json(self) -> Mapping[str, Any]:
        return {"verdict": self.verdict, "passed": False, "groups": [], "reason": list(self.reason)}


@dataclass(frozen=True)
class Row:
    """One candidate set of the matrix: its check's result, its wall time, its folder."""

    candidates: tuple[str, ...]
    result: UpgradeResult | NotBuilt
    wall_s: float
    folder: str

    def to_json(self) -> Mapping[str, Any]:
        return {"candidates": list(self.candidates), "result": self.result.to_json(), "wall_s": self.wall_s,
                "folder": self.folder}

    def cells(self) -> list[str]:
        """The row's verdict, the causes of its new failures (or why it did not build) and its
        performance verdict with its first change."""
        result = self.result
        if isinstance(result, NotBuilt):
            return [result.verdict, "; ".join(result.reason)[:300] or "-", "-"]
        causes = "; ".join(f"{len(g.contracts)} x `{g.cause[:80]}`" for g in result.comparison.groups[:3])
        perf = result.performance
        shown = (perf.verdict.label + "".join(f"; {c.change()}" for c in perf.verdict.comparisons[:1])) if perf else "-"
        return [result.verdict.text(), causes or "-", shown]


def row_result(folder: Path) -> UpgradeResult | NotBuilt:
    """A row's upgrade.json, or what its page says where none was written (NOT BUILT)."""
    data = folder / "upgrade.json"
    if data.is_file():
        return UpgradeResult.read(data)
    page = folder / "upgrade.md"
    text = page.read_text() if page.is_file() else "no page written"
    verdict = "NOT BUILT" if "NOT BUILT" in text else "no result"
    reason = text.split("```", 2)[1].strip().splitlines() if text.count("```") >= 2 else [text.strip()]
    return NotBuilt(verdict, tuple(reason[-3:]))


def render(rows: list[Row], title: str) -> str:
    lines = [f"# {title}", "", "| candidates | verdict | causes of new failures | performance | wall |",
             "|---|---|---|---|---|"]
    for row in rows:
        verdict, causes, shown = row.cells()
        lines.append(f"| `{' '.join(row.candidates)}` | {verdict} | {causes} | {shown} | {row.wall_s:.0f} s |")
    lines += ["", "Each row's page: `row-N/upgrade.md`."]
    return "\n".join(lines) + "\n"


def check_rows(matrix: Path, argv: list[str], out: Path, check) -> int:
    """``check(argv)`` is the single upgrade check (``upgrades.check.main``); ``argv`` its
    options without the matrix. Returns 0 when every row passed, 1 otherwise, 2 on bad input."""
    try:
        sets = rows(matrix)
    except MatrixUsageError as exc:
        print(f"upgrade: {exc}")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    options, selection = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv else (argv, [])
    entries = []
    for number, cands in enumerate(sets, start=1):
        folder = out / f"row-{number}"
        started = time.monotonic()
        check([*options, *(a for c in cands for a in ("--candidate", c)), "--out", str(folder), *selection])
        entries.append(Row(tuple(cands), row_result(folder), time.monotonic() - started, folder.name))
        trusted = folder / "trusted-suite"
        if "--tier" in options and "trn2" in options and "--baseline-report" not in options and trusted.is_dir():
            options = [*options, "--baseline-report", str(trusted)]  # the trusted session runs once
    (out / "matrix.json").write_text(json.dumps([e.to_json() for e in entries], indent=1, default=str) + "\n")
    (out / "matrix.md").write_text(render(entries, f"Upgrade matrix: {len(entries)} candidate set(s)"))
    print(f"upgrade: wrote {out / 'matrix.md'}")
    return 0 if all(e.result.passed for e in entries) else 1


def matrix_command(request, check) -> int:
    """``--candidate-matrix FILE`` (``upgrades.cli.Request``): ``check`` (the single check's
    ``main``) once per line of the file, with the command's other options."""
    args, argv = request.args, list(request.argv)
    rest = [a for i, a in enumerate(argv) if a != "--candidate-matrix" and
            (i == 0 or argv[i - 1] != "--candidate-matrix") and not a.startswith("--candidate-matrix=")]
    out = (args.out or REPO / "reports" / "out" / "upgrade" / f"matrix-{args.candidate_matrix.stem}").resolve()
    if args.out is not None:
        rest = [a for i, a in enumerate(rest) if a != "--out" and (i == 0 or rest[i - 1] != "--out")]
    return check_rows(args.candidate_matrix, rest, out, check)
