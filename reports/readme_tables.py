"""The docs' generated tables: in README.md the contract areas (from the area markers in
``pyproject.toml`` and the contract files that carry them) and the known deviations (from the
expectation files, one column per stack); in ``docs/extending.md`` the probes (from
``fixtures.rank.probes.registry`` and the contract files that read them) and the keys of a
rehearsal host file (``fixtures.tiers.rehearsal_host``). Never written by hand:

    python -m reports.readme_tables            # prints every block
    python -m reports.readme_tables --write    # rewrites them in their files, between their markers

``meta_tests/test_readme.py`` fails when a file's blocks differ from what this prints.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from fixtures.rank.probes import registry
from fixtures.rank.probes.spec import specs_of
from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
from fixtures.tiers import rehearsal_host
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


def probes_table(root: Path = REPO) -> list[str]:
    """One row per probe file (``fixtures.rank.probes``, registry order), with the contract files
    and harness modules that read it (``probes.<name>`` in their source)."""
    readers = [*sorted((root / "conformance").glob("test_*.py")), *sorted((root / "fixtures" / "runs").glob("*.py")),
               *sorted((root / "fixtures" / "data").glob("*.py"))]
    sources = {str(path.relative_to(root)).removeprefix("conformance/"): path.read_text() for path in readers}
    lines = ["| probe | file (per rank) | format | opt-in | records | read by |", "|---|---|---|---|---|---|"]
    for module in registry.PROBES:
        name = module.__name__.rsplit(".", 1)[1]
        readers = [f for f, text in sources.items() if re.search(rf"\bprobes\.{name}\b", text)]
        for spec in specs_of(module):
            lines.append(f"| `{name}` | `{spec.pattern}` | {spec.format.value} | "
                         f"{f'`{spec.opt_in}`' if spec.opt_in else 'always'} | {spec.about} | "
                         f"{', '.join(f'`{r}`' for r in readers) or '-'} |")
    return lines


def blocks(root: Path = REPO) -> dict[str, list[str]]:
    return {"areas": areas_table(root), "deviations": deviations_table(root)}


def host_keys_table(root: Path = REPO) -> list[str]:
    """One row per key of a rehearsal host file (``fixtures.tiers.rehearsal_host``: the type that
    reads them and refuses any other key)."""
    lines = ["| key | default | what it is |", "|---|---|---|"]
    lines += [f"| `{key}` | `{default}` | {doc} |" for key, default, doc in rehearsal_host.key_rows()]
    return lines


# Generated blocks of files other than README.md.
DOC_BLOCKS = {"docs/extending.md": lambda root: {"probes": probes_table(root), "host-keys": host_keys_table(root)}}


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


def every_block(root: Path = REPO) -> dict[str, dict[str, list[str]]]:
    """File (relative to the repository) -> its generated blocks."""
    return {"README.md": blocks(root), **{path: make(root) for path, make in DOC_BLOCKS.items()}}


def main(argv: list[str]) -> int:
    for path, generated in every_block().items():
        if "--write" in argv:
            target = REPO / path
            target.write_text(rewrite(target.read_text(), generated))
            continue
        for name, lines in generated.items():
            print("\n".join([_markers(name)[0], *lines, _markers(name)[1]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
