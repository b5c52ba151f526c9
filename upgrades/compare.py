"""What changes between a trusted stack's baseline report and a candidate's report, for a user
deciding an upgrade: versions, contract outcomes, the figures that matter, a verdict.

Pure functions on report dicts (``report.json``), so the logic is tested on synthetic pairs
(``meta_tests/test_upgrade.py``) without installing anything.
"""

from __future__ import annotations

import json
import re

from fixtures.session.expectations import failed_differently
from reports import gate
from upgrades.verdict import ContractVerdict, Owner

GOOD = {"passed", "xfailed"}
BAD = {"failed", "error", "xpassed"}

# category -> (title in upgrade.md, blocks the upgrade)
CATEGORIES = {
    "newly failing": ("Newly failing (a regression of the candidate)", True),
    "missing": ("Missing from the candidate's run", True),
    "newly skipped": ("Skipped where the baseline ran it", True),
    "upstream fixed": ("Known deviations the candidate fixes (delete their expectations line)", False),
    "newly passing": ("Newly passing", False),
    # a newly failing contract the trusted stack fails today on this machine too: the baseline's
    # machine took other kernel paths (or the checkout changed); not the candidate's
    "fails with the trusted stack here": ("Failing on this machine with the trusted stack too (this machine's, "
                                          "not the candidate's)", False),
    "new": ("New in the candidate's run", False),
}


# Measured values that are not compared as figures: the export manifest (its dtypes are, below)
# and the performance figures (judged by the noise model of upgrades.perf_compare, never by
# equality of one launch each).
NOT_A_FIGURE = {"export_manifest", "performance"}


def categorize(before: str | None, after: str | None, message: str = "") -> str:
    if after is None:
        return "missing"
    if before is None:
        return "new"
    if before == "xfailed" and (after in ("xpassed", "passed") or "XPASS(strict)" in message):
        return "upstream fixed"  # XPASS under inherited expectations, or a pass under its own file
    if before in GOOD and after in BAD:
        return "newly failing"
    if before != "skipped" and after == "skipped":
        return "newly skipped"
    if before in BAD and after in GOOD:
        return "newly passing"
    return "unchanged"


def _run_figures(report: dict) -> dict[str, dict]:
    """Per run description: step-1 loss, mean step time after the first (compilation) step,
    peak memory, all as rank 0 recorded them."""
    out = {}
    for run in report.get("runs", []):
        steps = run.get("steps") or []
        times = [s["step_time_s"] for s in steps[1:] if s.get("step_time_s") is not None]
        mems = [s["memory_gib"] for s in steps if s.get("memory_gib") is not None]
        out[run["description"]] = {
            "ok": run.get("ok"),
            "step1_loss": steps[0]["loss"] if steps else None,
            "step_time_s": sum(times) / len(times) if times else None,
            "peak_memory_gib": max(mems) if mems else None,
        }
    return out


def launches(report: dict) -> dict:
    """Distinct runs the session used, and how many it launched itself (the rest came from
    the run cache of an earlier session of the same stack)."""
    runs = report.get("runs", [])
    return {"runs": len(runs),
            "launched": sum(1 for r in runs if r.get("session") == report.get("session"))}


def _exported_dtypes(contract: dict) -> list[str] | None:
    raw = (contract.get("measured") or {}).get("export_manifest")
    if not raw:
        return None
    try:
        manifest = json.loads(raw)
    except ValueError:
        return None
    # test_checkpoint's manifest: [[name, shape, dtype], ...]
    return sorted({str(i[2]) for i in manifest if isinstance(i, list) and len(i) == 3}) or None


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


def _suite_class_names() -> set[str]:
    """Classes the suite defines (a cause naming one is about the suite's own code, even where
    torchtitan raised it while checking that code)."""
    import ast
    from pathlib import Path

    names = set()
    for path in (Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError):
            continue
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name != "Config"}
    return names


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


def run_failure(contract: dict, runs_by_key: dict[str, dict]) -> str | None:
    """The first failure of a run the contract read that died (its launch's root cause: the
    exception a rank died of), or None: a run failure is the cause of every contract that read
    that run, however each contract quotes it."""
    for key in contract.get("runs") or []:
        run = runs_by_key.get(key) or {}
        root = (run.get("launch") or {}).get("root_cause") or {}
        if run and not run.get("ok", True) and (root.get("message") or root.get("traceback")):
            cause, _ = failure_cause(f"{root.get('traceback') or ''}\n{root.get('message') or ''}")
            if cause:
                return cause
    return None


def group_failures(contracts: list[dict], runs_by_key: dict[str, dict] | None = None) -> list[dict]:
    """The newly failing contracts grouped by cause (a run's first failure where a run they
    read died; else the same cause line and culprit file): the count, whose cause it is, the
    contracts and one representative repro bundle."""
    runs_by_key = runs_by_key or {}
    found = []
    for c in contracts:
        if c["category"] != "newly failing":
            continue
        message = (c.get("message") or "").strip()
        if c.get("differently"):  # both reasons, recorded and now, are the cause
            found.append((c, c["differently"], None))
            continue
        died = run_failure(c, runs_by_key)
        if died is None and message.startswith("not run: "):  # stopped by a cause that killed runs before
            died = _normalised(message.removeprefix("not run: ").split(" (a fact of this stack", 1)[0])[:300]
        found.append((c, *((f"a run died: {died}", None) if died else failure_cause(message))))
    # a message cut before the raising frame still belongs with the same cause's known culprit
    culprit_of: dict[str, str] = {}
    for _, cause, culprit in found:
        if culprit:
            culprit_of.setdefault(cause, culprit)
    groups: dict[tuple, dict] = {}
    for c, cause, culprit in found:
        culprit = culprit or culprit_of.get(cause)
        group = groups.setdefault((cause, culprit), {"cause": cause, "culprit": culprit,
                                                     "owner": cause_owner(cause.removeprefix("a run died: "), culprit),
                                                     "contracts": [], "repro_bundle": c.get("repro_bundle")})
        group["contracts"].append(c["nodeid"])
    return sorted(groups.values(), key=lambda g: (-len(g["contracts"]), g["cause"]))


def deviation_remeasured(before: dict, after: dict) -> str | None:
    """None where a known deviation was measured again in the candidate; else why not: the
    candidate's xfail came from a run that did not train (the contract never reached the
    deviation it records), named by the run's own failure."""
    failure = after.get("failure") or ""
    if "contract: the run " in failure and "trains every step on every rank" in failure:
        cause, _ = failure_cause(failure)
        return f"not re-measured: its run died of {cause}"
    return None


def mark_against_today(measured: list[dict], today: dict | None) -> int:
    """Each moved figure that a trusted session of today's checkout also measured gets its value
    today (``today``), and is marked ``stale_baseline`` where the committed baseline's value is not
    what the trusted stack measures now (the move is then the checkout's, not the candidate's,
    when the candidate equals today's). Returns how many figures today's session measured."""
    if not today:
        return 0
    now = {c["nodeid"]: c.get("measured") or {} for c in today.get("contracts", [])}
    seen = 0
    for m in measured:
        if m["name"] in now.get(m["nodeid"], {}):
            seen += 1
            m["today"] = now[m["nodeid"]][m["name"]]
            m["stale_baseline"] = m["today"] != m["before"]
            m["candidates_move"] = m["today"] != m["after"]
    return seen


def mark_outcomes_against_today(contracts: list[dict], today: dict | None) -> int:
    """Each newly failing contract that the trusted stack also fails in ``today``'s session (on
    this machine, this checkout) is recategorised: the failure is this machine's, not the
    candidate's. Returns how many."""
    now = {c["nodeid"]: c["outcome"] for c in (today or {}).get("contracts", [])}
    moved = 0
    for c in contracts:
        if c["category"] == "newly failing" and now.get(c["nodeid"]) in BAD:
            c["category"], c["today"] = "fails with the trusted stack here", now[c["nodeid"]]
            moved += 1
    return moved


def suspects(result: dict) -> list[str]:
    """The contracts a trusted session on this machine should answer for before the candidate is
    blamed: those newly failing and those whose figures moved."""
    return sorted({c["nodeid"] for c in result["contracts"] if c["category"] == "newly failing"}
                  | {m["nodeid"] for m in result["measured"]})


def compare(baseline: dict, candidate: dict, changes: list[dict], pip_check: list[str] | None = None,
            today: dict | None = None) -> dict:
    """The upgrade result as JSON-able data. ``changes``: {name, old, new, kind} per package.
    ``today``: a trusted session of this checkout (all of the selection, or the cross-version
    contracts the upgrade runs anyway), to tell a moved figure from a stale baseline."""
    base = {c["nodeid"]: c for c in baseline.get("contracts", [])}
    cand = {c["nodeid"]: c for c in candidate.get("contracts", [])}
    contracts = [_contract_change(nodeid, base.get(nodeid), cand.get(nodeid))
                 for nodeid in sorted(set(base) | set(cand))]
    mark_outcomes_against_today(contracts, today)
    other_suite = gate.other_suite(baseline, candidate)  # another suite measured other things
    measured, unchanged_figures, compared_figures = ([], [], 0) if other_suite else _figure_changes(base, cand)
    runs_b, runs_c = _run_figures(baseline), _run_figures(candidate)
    runs = [{"run": name, "before": runs_b[name], "after": runs_c[name]}
            for name in sorted(set(runs_b) & set(runs_c))]
    counts = {k: sum(1 for c in contracts if c["category"] == k) for k in CATEGORIES}
    groups = group_failures(contracts, {r.get("key"): r for r in candidate.get("runs", []) if r.get("key")})
    xfails = [c for c in contracts if c["category"] == "unchanged" and c["before"] == "xfailed"
              and c["after"] == "xfailed"]
    still = [c for c in xfails if not c.get("not_remeasured")]
    unmeasured = [c for c in xfails if c.get("not_remeasured")]
    problems = _problems(contracts, counts, pip_check, candidate)
    remeasured = mark_against_today(measured, today)
    verdict = contract_verdict(problems, groups, counts["upstream fixed"], still,
                               counts["fails with the trusted stack here"])
    return {
        "verdict": verdict.text(),
        "contract_verdict": verdict.to_json(),
        "passed": verdict.passed,
        "baseline_session": baseline.get("session"),
        "today_session": (today or {}).get("session"),
        "figures_remeasured_today": remeasured,
        "other_suite": other_suite,
        "baseline_stack": baseline.get("stack_id"),
        "candidate_stack": candidate.get("stack_id"),
        "versions": changes,
        "contracts": contracts,
        "counts": counts,
        "measured": measured,
        "unchanged_figures": unchanged_figures,
        "figures_compared": compared_figures,
        "groups": groups,
        "still_holding": [{"nodeid": c["nodeid"], "expectation": c.get("expectation")} for c in still],
        "not_remeasured": [{"nodeid": c["nodeid"], "why": c["not_remeasured"]} for c in unmeasured],
        "runs": runs,
        "launches": {"baseline": launches(baseline), "candidate": launches(candidate)},
        "pip_check": pip_check or [],
        "stack_preflight": candidate.get("stack_preflight", []),
    }


def _contract_change(nodeid: str, b: dict | None, c: dict | None) -> dict:
    """One contract's outcome before and after, its category, and what explains it."""
    category = categorize(b and b["outcome"], c and c["outcome"], (c or {}).get("message", ""))
    entry = {"nodeid": nodeid, "before": b and b["outcome"], "after": c and c["outcome"], "category": category}
    if category == "newly failing":
        entry["repro_bundle"] = c.get("repro_bundle")
        entry["message"] = c.get("message") or ""
        entry["runs"] = c.get("runs") or []
        entry["differently"] = failed_differently(entry["message"])  # a known deviation failing otherwise
    if category == "unchanged" and entry["before"] == "xfailed" and entry["after"] == "xfailed":
        entry["expectation"] = (c or {}).get("expectation")
        entry["not_remeasured"] = deviation_remeasured(b, c)
    if category == "upstream fixed":
        entry["expectation"] = (b or {}).get("expectation") or (c or {}).get("expectation")
    return entry


def _figure_changes(base: dict, cand: dict) -> tuple[list[dict], list[str], int]:
    """The figures both sessions measured: those that moved, those that did not, how many."""
    measured, unchanged_figures, compared_figures = [], [], 0
    for nodeid in sorted(set(base) & set(cand)):
        mb, mc = base[nodeid].get("measured") or {}, cand[nodeid].get("measured") or {}
        pairs = [(name, mb[name], mc[name]) for name in sorted(set(mb) & set(mc)) if name not in NOT_A_FIGURE]
        db, dc = _exported_dtypes(base[nodeid]), _exported_dtypes(cand[nodeid])
        if db and dc:
            pairs.append(("exported dtypes", db, dc))
        for name, before, after in pairs:
            compared_figures += 1
            if before != after:
                measured.append({"nodeid": nodeid, "name": name, "before": before, "after": after})
            else:
                unchanged_figures.append(f"{nodeid.split('::', 1)[-1]}: {name} = {_fmt(before)}")
    return measured, unchanged_figures, compared_figures


def _problems(contracts: list[dict], counts: dict, pip_check: list[str] | None, candidate: dict) -> list[str]:
    """What fails the candidate: blocking categories, a new contract that fails (as the
    gate), pip check, an incomplete session."""
    blocking = {k for k, (_, blocks) in CATEGORIES.items() if blocks}
    problems = [f"{counts[k]} {k}" for k in CATEGORIES if k in blocking and counts[k]]
    new_failing = [c for c in contracts if c["category"] == "new" and c["after"] in BAD]
    if new_failing:
        problems.append(f"{len(new_failing)} new contract(s) failing (not in the baseline)")
    if pip_check:
        problems.append("pip check fails")
    if not candidate.get("complete", False):
        problems.append("the candidate's session did not complete")
    return problems


def contract_verdict(problems: list[str], groups: list[dict], fixed: int, still: list[dict],
                     fail_here_too: int) -> ContractVerdict:
    """The contracts' side of the verdict, with the failures' owners in name order (its
    ``body`` says which parts a verdict shows: problems outrank fixes, fixes the deviations)."""
    owners: dict[str, list[dict]] = {}
    for g in groups:
        owners.setdefault(g["owner"], []).append(g)
    return ContractVerdict(problems=tuple(problems),
                           owners=tuple(Owner(owner, sum(len(g["contracts"]) for g in gs), len(gs))
                                        for owner, gs in sorted(owners.items())),
                           fixed=fixed, still_holding=len(still), fail_here_too=fail_here_too)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str) and value.startswith("["):
        try:
            values = json.loads(value)
        except ValueError:
            values = None
        if values and all(isinstance(v, (int, float)) for v in values):
            return f"max abs {max(abs(v) for v in values):.3g} over {len(values)} values"
    return str(value)


def render(result: dict, *, title: str, promote: list[str] | None = None,
           bisect: dict | None = None) -> str:
    lines = [f"# {title}", "", f"**Verdict: {result['verdict']}**", ""]
    for found in result.get("stack_preflight", []):
        if not found.get("ok", True):
            lines += ["The candidate's stack preflight failed, so no run was launched:", "", "```",
                      found["message"], "```", ""]
    lines += ["## Versions (trusted -> candidate)", "",
              "| package | trusted | candidate | change | build |", "|---|---|---|---|---|"]
    for c in result["versions"]:
        build = ""
        if c.get("commit"):
            build = f"git {c['commit'][:10]}" + (f", {c['date'][:10]}" if c.get("date") else ", date not known")
        if c.get("source"):
            build = f"{c['source']}" + (f": {build}" if build else "")
        lines.append(f"| {c['name']} | {c['old'] or 'not installed'} | {c['new'] or 'removed'} | {c['kind']} | {build} |")
    if result["pip_check"]:
        lines += ["", "pip check: " + "; ".join(result["pip_check"])]
    lines += _contracts_section(result)
    lines += _bisect_section(bisect)
    lines += [""] + (result.get("performance") or {}).get("lines", [])
    lines += _figures_section(result)
    lines += _runs_section(result)
    if promote:
        lines += ["", "## Promote the candidate", "", "```bash", *promote, "```"]
    return "\n".join(lines) + "\n"


def _contracts_section(result: dict) -> list[str]:
    """Outcomes: counts, failures by cause, deviations, and each category."""
    lines: list[str] = []
    lines += ["", "## Contracts", ""]
    counts = result["counts"]
    unchanged = sum(1 for c in result["contracts"] if c["category"] == "unchanged")
    lines.append(", ".join([f"{unchanged} unchanged"] + [f"{n} {k}" for k, n in counts.items() if n]) + ".")
    if result.get("selection"):
        lines.append(f"Selection run in the candidate: `pytest {' '.join(result['selection'])}`.")
    if result.get("groups"):
        lines += ["", "### Newly failing, by cause", ""]
        for g in result["groups"]:
            where = f" in `{g['culprit']}`" if g.get("culprit") else ""
            bundle = f"; repro bundle: `{g['repro_bundle']}`" if g.get("repro_bundle") else ""
            lines.append(f"- **{len(g['contracts'])} contract(s)**, {g['owner']}{where}: `{g['cause']}`{bundle}")
            lines += [f"  - `{n}`" for n in g["contracts"][:12]]
            if len(g["contracts"]) > 12:
                lines.append(f"  - ... and {len(g['contracts']) - 12} more")
    if result.get("still_holding"):
        lines += ["", "### Known deviations still holding", ""]
        recorded = (result.get("baseline_stack") or {}).get("cpu") or (result.get("baseline_stack") or {}).get("trn2")
        if recorded:
            lines.append(f"Their reasons were recorded on the trusted stack ({recorded}): where a reason names "
                         "a package version, it is that stack's, measured again here on the candidate's.")
            lines.append("")
        lines += [f"- `{c['nodeid']}`" + (f" ({c['expectation']})" if c.get("expectation") else "")
                  for c in result["still_holding"]]
    if result.get("not_remeasured"):
        lines += ["", "### Known deviations not re-measured", ""]
        lines += [f"- `{c['nodeid']}`: {c['why']}" for c in result["not_remeasured"]]
    for key, (heading, _) in CATEGORIES.items():
        picked = [c for c in result["contracts"] if c["category"] == key]
        if not picked or key == "newly failing" and result.get("groups"):
            continue
        lines += ["", f"### {heading}", ""]
        for c in picked:
            extra = ""
            if c.get("repro_bundle"):
                extra = f" (repro bundle: `{c['repro_bundle']}`)"
            if c.get("expectation"):
                extra = f" (delete `{c['expectation']}`)"
            lines.append(f"- `{c['nodeid']}`: {c['before'] or 'absent'} -> {c['after'] or 'absent'}{extra}")
    return lines


def _bisect_section(bisect: dict | None) -> list[str]:
    """Which package change flips each contract (--bisect)."""
    if not bisect:
        return []
    lines = ["", "## Bisect: which package change flips each contract", "",
              f"{bisect['environments_built']} environment(s) built, {bisect['environments_reused']} reused "
              "(one per asked package, each with the transitive changes it forces).", ""]
    groups: dict[str, list[str]] = {}
    for nodeid, who in bisect["attribution"].items():
        groups.setdefault(who, []).append(nodeid)
    for who, nodeids in groups.items():
        lines.append(f"- {who}: {len(nodeids)} contract(s)")
        lines += [f"  - `{n}`" for n in nodeids]
    return lines


def _figures_section(result: dict) -> list[str]:
    """The measured figures against the trusted stack's."""
    lines: list[str] = []
    lines += ["## Figures that moved", ""]
    if result.get("other_suite"):
        return lines + [f"Not compared: {result['other_suite']}.", ""]
    if result.get("baseline_session"):
        lines.append(f"Compared with the trusted session `{result['baseline_session']}`"
                     + (f"; {result.get('figures_remeasured_today', 0)} of the moved figures re-measured by the "
                        f"trusted stack today (session `{result['today_session']}`)" if result.get("today_session")
                        else "; none re-measured on this checkout") + ".")
        lines.append("")
    if result["measured"]:
        lines += ["| contract | figure | trusted | trusted today | candidate | whose move |", "|---|---|---|---|---|---|"]
        for m in result["measured"]:
            if "today" not in m:
                whose = "not re-measured today"
            elif not m["candidates_move"]:
                whose = ("this machine's or the checkout's (the trusted stack measures the same here today): "
                         "not the candidate's")
            else:
                whose = "the candidate's" + (" (the baseline is stale too)" if m["stale_baseline"] else "")
            lines.append(f"| `{m['nodeid'].split('::', 1)[-1]}` | {m['name']} | {_fmt(m['before'])} | "
                         f"{_fmt(m['today']) if 'today' in m else '-'} | {_fmt(m['after'])} | {whose} |")
    elif result.get("figures_compared", 0):
        lines.append(f"None of the {result['figures_compared']} figures both sessions measured changed.")
    else:
        lines.append("No figure was compared: the candidate measured none of the figures the baseline "
                     "measured (nothing can be said of them).")
    if result.get("unchanged_figures"):
        lines += ["", f"Unchanged ({len(result['unchanged_figures'])}):", ""]
        lines += [f"- `{text}`" for text in result["unchanged_figures"]]
    return lines


def _runs_section(result: dict) -> list[str]:
    """The training runs of both sessions, rank 0's step-1 loss, step time and memory."""
    lines: list[str] = []
    lines += ["", "## Training runs (rank 0)", "",
              f"Runs used: trusted session {result['launches']['baseline']['runs']} "
              f"({result['launches']['baseline']['launched']} launched in it, the rest from the run cache), "
              f"candidate session {result['launches']['candidate']['runs']} "
              f"({result['launches']['candidate']['launched']} launched).", "",
              "Step time and memory here are one launch of each, not judged (the Performance section "
              "judges them over interleaved launches).", "",
              "| run | step-1 loss | step time s | peak memory GiB |", "|---|---|---|---|"]
    for r in result["runs"]:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['run']} | {_fmt(b['step1_loss'])} -> {_fmt(a['step1_loss'])} | "
                     f"{_fmt(b['step_time_s'])} -> {_fmt(a['step_time_s'])} | "
                     f"{_fmt(b['peak_memory_gib'])} -> {_fmt(a['peak_memory_gib'])} |")
    return lines
