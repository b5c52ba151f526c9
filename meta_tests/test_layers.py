"""The harness's layers, as rules on its import graph (read from the source, nothing imported).

- The rank side (``fixtures/rank``: everything a launched rank imports from this
  repository) imports nothing from the pytest side: no other ``fixtures`` module, no
  ``reports``, no pytest. So the run cache's source hash (``fixtures.runs.cache``) can be
  that folder alone, and a change to the tier profile or the reports relaunches nothing.
- The Neuron stand-ins (``neuron_standins``, distributions of their own) import nothing of
  the harness.
- No module imports itself back through others (module level and function level alike),
  and the layers go one way: ``upgrades`` (the upgrade tool) over ``reports`` (the session
  reports) over ``fixtures`` (the harness); no layer imports one above it.
- The suite's own modules are imported at the top of a module. A function-level import of one
  is for what must not load when its module is imported, with its reason on its line
  (``# deferred: <why>``): a heavy library a torch-free reader must not pay for, or a cycle the
  layers name. Held for the upgrade tool and the reports (``DEFERRED_RULE_ROOTS``).
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
PACKAGES = ("fixtures", "reports", "upgrades")  # lowest layer first
# The harness's rooms, ground floor first (``fixtures/__init__.py`` says what each holds).
ROOMS = ("fixtures.rank", "fixtures.repo", "fixtures.oracles", "fixtures.tiers", "fixtures.data",
         "fixtures.launch", "fixtures.runs", "fixtures.contract", "fixtures.session")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_files(root: str) -> list[Path]:
    """The suite's Python files under ``root``: what git tracks or would track, never an ignored
    folder's (``reports/out/`` holds whole clones of the suite: the mutation benchmark's)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", f"{root}/*.py"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    return sorted(REPO / p for p in listed)


def _modules(*roots: str) -> dict[str, Path]:
    return {_module_name(p): p for root in roots for p in _source_files(root)}


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (``from a import b`` counts as
    ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def internal_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (a name resolved to its module)."""
    graph = defaultdict(set)
    for name, path in modules.items():
        for imported in imports_of(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                graph[name].add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's first appearance, found by depth-first search."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def room_of(module: str) -> str | None:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


def upward_between_rooms(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a room of the harness into one above it."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if room_of(a) and room_of(b) and ROOMS.index(room_of(b)) > ROOMS.index(room_of(a)))


def test_the_harness_rooms_import_only_rooms_below():
    """Every harness module sits in a room, and a room imports only rooms below it."""
    modules = _modules("fixtures")
    assert not sorted(m for m in modules if m != "fixtures" and room_of(m) is None), "modules in no room"
    graph = internal_graph(modules)
    assert graph and not upward_between_rooms(graph), upward_between_rooms(graph)


def test_rank_side_imports_nothing_from_the_pytest_side():
    offending = {}
    for name, path in _modules("fixtures/rank").items():
        bad = sorted(m for m in imports_of(path)
                     if (m.split(".")[0] in PACKAGES and not m.startswith("fixtures.rank")
                         and m != "fixtures") or m.split(".")[0] in ("pytest", "_pytest"))
        if bad:
            offending[name] = bad
    assert not offending, f"rank-side modules importing pytest-side code: {offending}"


def test_the_standins_import_nothing_of_the_harness():
    offending = {name: sorted(m for m in imports_of(path) if m.split(".")[0] in PACKAGES)
                 for name, path in _modules("neuron_standins").items()}
    offending = {k: v for k, v in offending.items() if v}
    assert len(_modules("neuron_standins")) >= 15
    assert not offending, f"stand-ins importing the harness: {offending}"


def test_the_import_graph_has_no_cycle():
    graph = internal_graph(_modules(*PACKAGES))
    assert graph, "no internal imports found: the graph reader is broken"
    assert not cycles(graph), cycles(graph)
    layer = {package: rank for rank, package in enumerate(PACKAGES)}
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if layer[b.split(".")[0]] > layer[a.split(".")[0]])
    assert not upward, f"a layer importing one above it: {upward}"


DEFERRED_RULE_ROOTS = ("upgrades", "reports")
DEFERRED = "# deferred: "


def unexplained_deferred_imports(path: Path) -> list[str]:
    """The function-level imports of the suite's own modules in ``path`` whose line gives no
    reason (``# deferred: <why>``)."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for function in ast.walk(ast.parse(text)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            if any(n.split(".")[0] in PACKAGES for n in names) and DEFERRED not in lines[node.lineno - 1]:
                found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{node.lineno}")
    return sorted(set(found))


def test_a_function_level_import_of_the_suite_says_why():
    """The upgrade tool and the reports import the suite's modules at the top; a deferred import
    names its reason on its line."""
    files = [p for root in DEFERRED_RULE_ROOTS for p in _source_files(root)]
    assert len(files) > 30
    offending = [line for path in files for line in unexplained_deferred_imports(path)]
    assert not offending, f"function-level imports of the suite without '{DEFERRED}<why>': {offending}"


def test_the_checks_see_a_cycle_and_a_layer_break(tmp_path):
    """Not vacuous: the cycle finder finds a planted cycle, and the rank-side rule reads the
    import forms the harness uses."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert upward_between_rooms({"fixtures.data.assets": {"fixtures.session.plugin", "fixtures.tiers.stack"}}) == [
        "fixtures.data.assets -> fixtures.session.plugin"]
    planted = tmp_path / "m.py"
    planted.write_text("def f():\n    from fixtures.tiers.tier_profile import TierProfile\n"
                       "    import reports.gate  # deferred: a test of the rule\n    import json\n")
    assert "fixtures.tiers.tier_profile" in imports_of(planted)
    assert [line.rsplit("/", 1)[-1] for line in unexplained_deferred_imports(planted)] == ["m.py:2"]
