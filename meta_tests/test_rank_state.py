"""No module-level mutable state on the rank side (``fixtures/rank``), read from the source.

A rank keeps state for the life of its process (the probe dispatcher, the RoPE operators it
registered and the calls it counted, its resident size before training, a global hook) on one
object, ``fixtures.rank.process.PROCESS``. A rank-side module that binds a list, dict, set or
counter at module level and then changes it, or that rebinds a module name with ``global``,
keeps state of its own that nothing resets and no reader of ``PROCESS`` sees.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from fixtures.repo import REPO_ROOT as REPO

pytestmark = pytest.mark.meta

MUTABLE_CALLS = {"list", "dict", "set", "Counter", "defaultdict", "deque", "OrderedDict", "bytearray"}
MUTATING_METHODS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
                    "clear", "remove", "discard"}


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) in MUTABLE_CALLS
    return False


def _root(node: ast.expr) -> str | None:
    """``a`` for ``a``, ``a[k]``, ``a.b[k]``..."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutable_module_names(tree: ast.Module) -> set[str]:
    names = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and _is_mutable(statement.value):
            names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, ast.AnnAssign) and _is_mutable(statement.value) \
                and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
    return names


def _changes(node: ast.AST, names: set[str]) -> str | None:
    """What ``node`` does to one of ``names`` (item or attribute assigned or deleted, augmented,
    a mutating method called), or None."""
    targets = {ast.Assign: lambda n: n.targets, ast.AugAssign: lambda n: [n.target],
               ast.AnnAssign: lambda n: [n.target], ast.Delete: lambda n: n.targets}.get(type(node))
    for target in targets(node) if targets else ():
        if _root(target) in names and (not isinstance(target, ast.Name) or isinstance(node, ast.AugAssign)):
            return f"{_root(target)} changed"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in MUTATING_METHODS and _root(node.func.value) in names:
        return f"{_root(node.func.value)}.{node.func.attr}()"
    return None


def module_state(source: str) -> list[str]:
    """``line: what`` for each ``global`` statement and each change of a mutable value bound at
    module level, in one module's source."""
    tree = ast.parse(source)
    names = _mutable_module_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
        elif (change := _changes(node, names)) is not None:
            found.append(f"{node.lineno}: {change}")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def _rank_side_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", "fixtures/rank/*.py"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return sorted(listed)


def test_no_rank_side_module_keeps_state_at_module_level():
    found = {path: module_state((REPO / path).read_text()) for path in _rank_side_files()}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_check_sees_each_kind_of_module_state():
    """The check above finds what it looks for (and leaves constants and local state alone)."""
    source = ("import collections\n"
              "SEEN = []\n"                                   # 2
              "COUNTS: collections.Counter = collections.Counter()\n"
              "OPS = {}\n"
              "TABLE = {'a': 1}\n"                            # read only: no state
              "_hook = None\n"
              "def f(key):\n"
              "    SEEN.append(key)\n"                        # 8
              "    COUNTS[key] += 1\n"                        # 9
              "    OPS[key] = TABLE['a']\n"                   # 10
              "    global _hook\n"                            # 11
              "    local = []\n"
              "    local.append(key)\n")
    assert module_state(source) == ["8: SEEN.append()", "9: COUNTS changed", "10: OPS changed",
                                    "11: global _hook"]
    assert _rank_side_files() and all(path.startswith("fixtures/rank/") for path in _rank_side_files())
