"""The README's two generated tables: the contract areas (from the area markers in
``pyproject.toml`` and the contract files that carry them) and the known deviations (from the
expectation files, one column per stack). Never written by hand:

    python -m reports.readme_tables            # prints both blocks
    python -m reports.readme_tables --write    # rewrites them in README.md, between their markers

``meta_tests/test_readme.py`` fails when README.md's blocks differ from what this prints.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCKS = ("areas", "deviations")
_AREA = re.compile(r"^(\w+): contracts on (.*)$")
_MARK = re.compile(r"pytestmark\s*=\s*\[?\s*pytest\.mark\.(\w+)")
_TEST = re.compile(r"^def (test_\w+)\(", re.M)


def area_markers(root: Path = REPO) -> dict[str, str]:
    """Each area marker and what its contracts are about, from pyproject.toml."""
    markers = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    return {m.group(1): m.group(2) for m in map(_AREA.match, markers) if m}


def areas_table(root: Path = REPO) -> list[str]:
    described = area_markers(root)
    files: dict[str, list[tuple[str, int]]] = {}
    for path in sorted((root / "conformance").glob("test_*.py")):
        text = path.read_text()
        mark = _MARK.search(text)
        if mark:
            files.setdefault(mark.group(1), []).append((path.name, len(_TEST.findall(text))))
    lines = ["| area (`-m`) | contract file | contracts | about |", "|---|---|---|---|"]
    for area, about in described.items():
        for name, count in files.get(area, []):
            lines.append(f"| `{area}` | `conformance/{name}` | {count} | {about} |")
    return lines


def deviations_table(root: Path = REPO) -> list[str]:
    folder = root / "conformance" / "expectations"
    stacks = [p.stem for p in sorted(folder.glob("*.txt"))]
    held: dict[str, set[str]] = {}
    for stack in stacks:
        for line in (folder / f"{stack}.txt").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                nodeid = line.split("|", 1)[0].strip()
                held.setdefault(re.sub(r"\[(cpu|trn2)-?", "[", nodeid).replace("[]", ""), set()).add(stack)
    empty = [s for s in stacks if not any(s in v for v in held.values())]
    shown = [s for s in stacks if s not in empty]
    lines = ["| known deviation (strict xfail) | " + " | ".join(f"`{s}`" for s in shown) + " |",
             "|---|" + "---|" * len(shown)]
    for nodeid in sorted(held):
        lines.append(f"| `{nodeid.removeprefix('conformance/')}` | "
                     + " | ".join("x" if s in held[nodeid] else "" for s in shown) + " |")
    if empty:
        lines += ["", "No deviation recorded (nothing measured there yet): "
                  + ", ".join(f"`{s}`" for s in empty) + "."]
    return lines


def blocks(root: Path = REPO) -> dict[str, list[str]]:
    return {"areas": areas_table(root), "deviations": deviations_table(root)}


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- generated:{name} (python -m reports.readme_tables --write) -->", f"<!-- end:{name} -->")


def rewrite(text: str, generated: dict[str, list[str]]) -> str:
    for name, lines in generated.items():
        begin, end = _markers(name)
        if begin not in text or end not in text:
            raise ValueError(f"README.md has no {begin} ... {end} block")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + "\n".join(lines) + "\n" + end + tail
    return text


def main(argv: list[str]) -> int:
    generated = blocks()
    if "--write" in argv:
        readme = REPO / "README.md"
        readme.write_text(rewrite(readme.read_text(), generated))
        return 0
    for name, lines in generated.items():
        print("\n".join([_markers(name)[0], *lines, _markers(name)[1]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
