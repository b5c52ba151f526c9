"""What changes between a trusted stack's baseline report and a candidate's report, for a user
deciding an upgrade: versions, contract outcomes, the figures that matter, a verdict.

Pure functions on report dicts (``report.json``), so the logic is tested on synthetic pairs
(``meta_tests/test_upgrade.py``) without installing anything.
"""

from __future__ import annotations

import json

GOOD = {"passed", "xfailed"}
BAD = {"failed", "error", "xpassed"}

# category -> (title in upgrade.md, blocks the upgrade)
CATEGORIES = {
    "newly failing": ("Newly failing (a regression of the candidate)", True),
    "missing": ("Missing from the candidate's run", True),
    "newly skipped": ("Skipped where the baseline ran it", True),
    "upstream fixed": ("Known deviations the candidate fixes (delete their expectations line)", False),
    "newly passing": ("Newly passing", False),
    "new": ("New in the candidate's run", False),
}


def categorize(before: str | None, after: str | None, message: str = "") -> str:
    if after is None:
        return "missing"
    if before is None:
        return "new"
    if before == "xfailed" and (after == "xpassed" or "XPASS(strict)" in message):
        return "upstream fixed"
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


def compare(baseline: dict, candidate: dict, changes: list[dict], pip_check: list[str] | None = None) -> dict:
    """The upgrade result as JSON-able data. ``changes``: {name, old, new, kind} per package."""
    base = {c["nodeid"]: c for c in baseline.get("contracts", [])}
    cand = {c["nodeid"]: c for c in candidate.get("contracts", [])}
    contracts = []
    for nodeid in sorted(set(base) | set(cand)):
        b, c = base.get(nodeid), cand.get(nodeid)
        category = categorize(b and b["outcome"], c and c["outcome"], (c or {}).get("message", ""))
        entry = {"nodeid": nodeid, "before": b and b["outcome"], "after": c and c["outcome"],
                 "category": category}
        if category == "newly failing":
            entry["repro_bundle"] = c.get("repro_bundle")
            entry["message"] = (c.get("message") or "")[-600:]
        if category == "upstream fixed":
            entry["expectation"] = (b or {}).get("expectation") or (c or {}).get("expectation")
        contracts.append(entry)

    measured, unchanged_figures = [], []
    for nodeid in sorted(set(base) & set(cand)):
        mb, mc = base[nodeid].get("measured") or {}, cand[nodeid].get("measured") or {}
        pairs = [(name, mb[name], mc[name]) for name in sorted(set(mb) & set(mc)) if name != "export_manifest"]
        db, dc = _exported_dtypes(base[nodeid]), _exported_dtypes(cand[nodeid])
        if db and dc:
            pairs.append(("exported dtypes", db, dc))
        for name, before, after in pairs:
            if before != after:
                measured.append({"nodeid": nodeid, "name": name, "before": before, "after": after})
            else:
                unchanged_figures.append(f"{nodeid.split('::', 1)[-1]}: {name} = {_fmt(before)}")

    runs_b, runs_c = _run_figures(baseline), _run_figures(candidate)
    runs = [{"run": name, "before": runs_b[name], "after": runs_c[name]}
            for name in sorted(set(runs_b) & set(runs_c))]

    blocking = {k for k, (_, blocks) in CATEGORIES.items() if blocks}
    counts = {k: sum(1 for c in contracts if c["category"] == k) for k in CATEGORIES}
    problems = [f"{counts[k]} {k}" for k in CATEGORIES if k in blocking and counts[k]]
    if pip_check:
        problems.append("pip check fails")
    if not candidate.get("complete", False):
        problems.append("the candidate's session did not complete")
    fixed = counts["upstream fixed"]
    if problems:
        verdict = "FAIL: " + ", ".join(problems)
    elif fixed:
        verdict = (f"PASS once {fixed} expectations line(s) are deleted: the candidate keeps every "
                   "contract and fixes known deviations")
    else:
        verdict = "PASS: the candidate keeps every contract of the baseline"
    return {
        "verdict": verdict,
        "passed": not problems,
        "baseline_stack": baseline.get("stack_id"),
        "candidate_stack": candidate.get("stack_id"),
        "versions": changes,
        "contracts": contracts,
        "counts": counts,
        "measured": measured,
        "unchanged_figures": unchanged_figures,
        "runs": runs,
        "launches": {"baseline": launches(baseline), "candidate": launches(candidate)},
        "pip_check": pip_check or [],
        "stack_preflight": candidate.get("stack_preflight", []),
    }


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
    lines += ["## Versions (trusted -> candidate)", "", "| package | trusted | candidate | change |", "|---|---|---|---|"]
    for c in result["versions"]:
        lines.append(f"| {c['name']} | {c['old'] or 'not installed'} | {c['new'] or 'removed'} | {c['kind']} |")
    if result["pip_check"]:
        lines += ["", "pip check: " + "; ".join(result["pip_check"])]
    lines += ["", "## Contracts", ""]
    counts = result["counts"]
    unchanged = sum(1 for c in result["contracts"] if c["category"] == "unchanged")
    lines.append(", ".join([f"{unchanged} unchanged"] + [f"{n} {k}" for k, n in counts.items() if n]) + ".")
    if result.get("selection"):
        lines.append(f"Selection run in the candidate: `pytest {' '.join(result['selection'])}`.")
    for key, (heading, _) in CATEGORIES.items():
        picked = [c for c in result["contracts"] if c["category"] == key]
        if not picked:
            continue
        lines += ["", f"### {heading}", ""]
        for c in picked:
            extra = ""
            if c.get("repro_bundle"):
                extra = f" (repro bundle: `{c['repro_bundle']}`)"
            if c.get("expectation"):
                extra = f" (delete `{c['expectation']}`)"
            lines.append(f"- `{c['nodeid']}`: {c['before'] or 'absent'} -> {c['after'] or 'absent'}{extra}")
    if bisect:
        lines += ["", "## Bisect: which package change flips each contract", "",
                  f"{bisect['environments_built']} environment(s) built, {bisect['environments_reused']} reused "
                  "(one per asked package, each with the transitive changes it forces).", ""]
        groups: dict[str, list[str]] = {}
        for nodeid, who in bisect["attribution"].items():
            groups.setdefault(who, []).append(nodeid)
        for who, nodeids in groups.items():
            lines.append(f"- {who}: {len(nodeids)} contract(s)")
            lines += [f"  - `{n}`" for n in nodeids]
    lines += ["", "## Figures that moved", ""]
    if result["measured"]:
        lines += ["| contract | figure | trusted | candidate |", "|---|---|---|---|"]
        for m in result["measured"]:
            lines.append(f"| `{m['nodeid'].split('::', 1)[-1]}` | {m['name']} | {_fmt(m['before'])} | {_fmt(m['after'])} |")
    else:
        lines.append("No measured figure of a contract changed.")
    if result.get("unchanged_figures"):
        lines += ["", f"Unchanged ({len(result['unchanged_figures'])}):", ""]
        lines += [f"- `{text}`" for text in result["unchanged_figures"]]
    lines += ["", "## Training runs (rank 0)", "",
              f"Runs used: trusted session {result['launches']['baseline']['runs']} "
              f"({result['launches']['baseline']['launched']} launched in it, the rest from the run cache), "
              f"candidate session {result['launches']['candidate']['runs']} "
              f"({result['launches']['candidate']['launched']} launched).", "",
              "| run | step-1 loss | step time s | peak memory GiB |", "|---|---|---|---|"]
    for r in result["runs"]:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['run']} | {_fmt(b['step1_loss'])} -> {_fmt(a['step1_loss'])} | "
                     f"{_fmt(b['step_time_s'])} -> {_fmt(a['step_time_s'])} | "
                     f"{_fmt(b['peak_memory_gib'])} -> {_fmt(a['peak_memory_gib'])} |")
    if promote:
        lines += ["", "## Promote the candidate", "", "```bash", *promote, "```"]
    return "\n".join(lines) + "\n"
