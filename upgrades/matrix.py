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
from pathlib import Path


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


def row_result(folder: Path) -> dict:
    """A row's upgrade.json, or what its page says where none was written (NOT BUILT)."""
    data = folder / "upgrade.json"
    if data.is_file():
        return json.loads(data.read_text())
    page = folder / "upgrade.md"
    text = page.read_text() if page.is_file() else "no page written"
    verdict = "NOT BUILT" if "NOT BUILT" in text else "no result"
    reason = text.split("```", 2)[1].strip().splitlines() if text.count("```") >= 2 else [text.strip()]
    return {"verdict": verdict, "passed": False, "groups": [], "reason": reason[-3:]}


def render(entries: list[dict], title: str) -> str:
    lines = [f"# {title}", "", "| candidates | verdict | causes of new failures | performance | wall |",
             "|---|---|---|---|---|"]
    for e in entries:
        causes = "; ".join(f"{len(g['contracts'])} x `{g['cause'][:80]}`" for g in e["result"].get("groups", [])[:3])
        if e["result"].get("reason"):
            causes = "; ".join(e["result"]["reason"])[:300]
        perf = e["result"].get("performance") or {}
        shown = perf.get("verdict", "-") + "".join(f"; {c['change']}" for c in perf.get("comparisons", [])[:1])
        lines.append(f"| `{' '.join(e['candidates'])}` | {e['result']['verdict']} | {causes or '-'} | {shown} | "
                     f"{e['wall_s']:.0f} s |")
    lines += ["", "Each row's page: `row-N/upgrade.md`."]
    return "\n".join(lines) + "\n"


def run(matrix: Path, argv: list[str], out: Path, check) -> int:
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
        entries.append({"candidates": cands, "result": row_result(folder), "wall_s": time.monotonic() - started,
                        "folder": folder.name})
        trusted = folder / "trusted-suite"
        if "--tier" in options and "trn2" in options and "--baseline-report" not in options and trusted.is_dir():
            options = [*options, "--baseline-report", str(trusted)]  # the trusted session runs once
    (out / "matrix.json").write_text(json.dumps(entries, indent=1, default=str) + "\n")
    (out / "matrix.md").write_text(render(entries, f"Upgrade matrix: {len(entries)} candidate set(s)"))
    print(f"upgrade: wrote {out / 'matrix.md'}")
    return 0 if all(e["result"].get("passed") for e in entries) else 1
