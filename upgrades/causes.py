"""Why newly failing contracts fail: each failure's cause line and culprit file, whose cause
it is (the suite's own gap or the candidate's behaviour), and the failures grouped by cause
(a run that died is the cause of every contract that read it). Read by ``upgrades.compare``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from reports.run_record import RunRecord
from reports.session_report import ContractRecord
from upgrades.comparison import ContractChange, FailureGroup

# A failure's cause: its most specific exception line (an AssertionError only where nothing more
# specific is said) and the culprit file (the last ``path.py:N: Error`` line of the traceback).
_EXCEPTION = re.compile(r"^\s*(?:E\s+)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Gap|Failed|Exit)\b.*)$")
_CULPRIT = re.compile(r"^(\S+\.py):\d+: \w+", re.M)
_MACHINE = re.compile(r"(/[\w.+-]+)+/([\w.+-]+)")
_RUN_KEY = re.compile(r"\b[0-9a-f]{20}\b")
# Where a cause lies: the suite's own code calling the stack wrong, or the stack's behaviour.
SUITE_GAP = "the suite's own gap (fix the suite)"
CANDIDATE = "the candidate's behaviour"


def _normalised(line: str) -> str:
    """A cause line without what differs between machines and runs: paths to their last part,
    run keys dropped."""
    return _RUN_KEY.sub("<run>", _MACHINE.sub(r"\2", line)).strip()


_RANK_LINE = re.compile(r"^\[rank\d+\]:\s?(.*)$")
_FRAME = re.compile(r'File "([^"]+)", line \d+')


def _relative_source(path: str) -> str:
    """A traceback's file as a user would name it: inside an installed package from its
    package (``torchtitan/protocols/module.py``), inside the suite from the repository."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    for root in ("fixtures/", "conformance/", "reports/", "upgrades/", "meta_tests/"):
        if path.startswith(root):
            return path
        if "/" + root in path:
            return root + path.split("/" + root, 1)[1]
    return path.rsplit("/", 1)[-1]


def failure_cause(message: str) -> tuple[str, str | None]:
    """(cause line, culprit file) of one failure's message: the exception a rank died of (and
    the file that raised it), else the most specific exception line (an AssertionError only
    where nothing more specific is said) and the last ``path.py:N:`` of the traceback."""
    lines = [l[1:].strip() if l.startswith("E") else l.strip() for l in message.splitlines()]
    frame = None
    for line in lines:
        rank = _RANK_LINE.match(line)
        if not rank:
            continue
        inner = rank.group(1).strip()
        found = _FRAME.search(inner)
        if found:
            frame = found.group(1)
            continue
        exc = _EXCEPTION.match(inner)
        if exc:
            return _normalised(exc.group(1))[:300], (_relative_source(frame) if frame else None)
    specific = [m.group(1) for m in map(_EXCEPTION.match, lines) if m and not m.group(1).startswith("AssertionError")]
    contract = [l for l in lines if l.startswith(("contract:", "AssertionError: contract:"))]
    # pytest's own exception lines (``E   ...``): an assertion of pytest.raises(match=...) among them
    raised = [l[1:].strip() for l in message.splitlines() if l.startswith("E ") and l[1:].strip()]
    cause = (specific[0] if specific else contract[0] if contract else raised[0] if raised
             else lines[0] if lines else "no message")
    culprits = _CULPRIT.findall(message)
    return _normalised(cause)[:300], (_relative_source(culprits[-1]) if culprits else None)


@lru_cache(maxsize=1)
def _suite_class_names() -> frozenset[str]:
    """Classes the suite defines (a cause naming one is about the suite's own code, even where
    torchtitan raised it while checking that code)."""
    names = set()
    for path in (Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError):
            continue
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name != "Config"}
    return frozenset(names)


def cause_owner(cause: str, culprit: str | None) -> str:
    """Whose the cause is: the suite's (a ``HarnessGap``, raised in the harness's own
    ``fixtures/`` code, or naming a class of the suite) or the candidate's (a contract's
    assertion, or raised in the stack about the stack's own code)."""
    if "HarnessGap" in cause or "harness gap" in cause.lower():
        return SUITE_GAP
    if culprit and culprit.startswith("fixtures/") and not culprit.startswith("fixtures/contract.py"):
        return SUITE_GAP
    if culprit and culprit.startswith("conformance/") and not cause.startswith("AssertionError"):
        return SUITE_GAP  # a contract's own code raised: the test broke, not the stack
    words = set(re.findall(r"[A-Za-z_]\w+", cause))
    if words & _suite_class_names():
        return SUITE_GAP
    return CANDIDATE


def run_failure(runs: Iterable[str], runs_by_key: Mapping[str, RunRecord]) -> str | None:
    """The first failure of a run the contract read (``runs``: their keys) that died (its
    launch's root cause: the exception a rank died of), or None: a run failure is the cause of
    every contract that read that run, however each contract quotes it."""
    for key in runs:
        run = runs_by_key.get(key)
        root = run.launch.root_cause if run else None
        if run and not run.ok and root and (root.message or root.traceback):
            cause, _ = failure_cause(f"{root.traceback or ''}\n{root.message or ''}")
            if cause:
                return cause
    return None


def _cause_of(change: ContractChange, runs_by_key: Mapping[str, RunRecord]) -> tuple[str, str | None]:
    """(cause, culprit) of one newly failing contract."""
    failing = change.failing
    message = failing.message.strip()
    if failing.differently:  # both reasons, recorded and now, are the cause
        return failing.differently, None
    died = run_failure(failing.runs, runs_by_key)
    if died is None and message.startswith("not run: "):  # stopped by a cause that killed runs before
        died = _normalised(message.removeprefix("not run: ").split(" (a fact of this stack", 1)[0])[:300]
    return (f"a run died: {died}", None) if died else failure_cause(message)


def group_failures(contracts: Iterable[ContractChange],
                   runs_by_key: Mapping[str, RunRecord] | None = None) -> list[FailureGroup]:
    """The newly failing contracts grouped by cause (a run's first failure where a run they
    read died; else the same cause line and culprit file): the count, whose cause it is, the
    contracts and one representative repro bundle."""
    runs_by_key = runs_by_key or {}
    found = [(c, *_cause_of(c, runs_by_key)) for c in contracts if c.category == "newly failing"]
    # a message cut before the raising frame still belongs with the same cause's known culprit
    culprit_of = {}
    for _, cause, culprit in found:
        if culprit:
            culprit_of.setdefault(cause, culprit)
    groups = {}  # (cause, culprit) -> (first contract's bundle, contracts)
    for c, cause, culprit in found:
        culprit = culprit or culprit_of.get(cause)
        groups.setdefault((cause, culprit), (c.repro_bundle, []))[1].append(c.nodeid)
    made = [FailureGroup(cause=cause, culprit=culprit, owner=cause_owner(cause.removeprefix("a run died: "), culprit),
                         contracts=tuple(nodeids), repro_bundle=bundle)
            for (cause, culprit), (bundle, nodeids) in groups.items()]
    return sorted(made, key=lambda g: (-len(g.contracts), g.cause))


def deviation_remeasured(after: ContractRecord) -> str | None:
    """None where a known deviation was measured again in the candidate; else why not: the
    candidate's xfail came from a run that did not train (the contract never reached the
    deviation it records), named by the run's own failure."""
    failure = after.failure or ""
    if "contract: the run " in failure and "trains every step on every rank" in failure:
        cause, _ = failure_cause(failure)
        return f"not re-measured: its run died of {cause}"
    return None


def explain(contracts: Sequence[ContractChange], candidate: Mapping[str, ContractRecord],
            runs_by_key: Mapping[str, RunRecord]) -> tuple[list[FailureGroup], Mapping[str, str]]:
    """The newly failing contracts grouped by cause (``group_failures``), and for each known
    deviation both sides hold, why the candidate did not measure it again where it did not
    (``deviation_remeasured``; node id -> why)."""
    unmeasured = {c.nodeid: why for c in contracts
                  if c.holds_a_deviation and (why := deviation_remeasured(candidate[c.nodeid]))}
    return group_failures(contracts, runs_by_key), unmeasured
