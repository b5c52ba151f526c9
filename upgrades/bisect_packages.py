"""``--bisect``: with more than one package changed, which single package change (with the
transitive changes it forces) flips each contract whose outcome changed. Each single-package
environment is built once and runs only the changed contracts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from reports.session_report import SessionReport
from upgrades import candidate_env
from upgrades.console import say
from upgrades.result import BisectFindings
from upgrades.sessions import run_suite
from upgrades.stacks import Stack


def attribute(nodeid: str, baseline: Mapping[str, str], candidate: Mapping[str, str],
              single: Mapping[str, Mapping[str, str]]) -> str:
    """Which single package change reproduces the candidate's outcome of ``nodeid``.
    ``single``: pin -> {nodeid: outcome} of that pin's own environment."""
    want = candidate.get(nodeid)
    flips = [pin for pin, outcomes in single.items() if outcomes.get(nodeid) == want]
    if len(flips) == 1:
        return f"{flips[0]} ({baseline.get(nodeid)} -> {want} with that change alone)"
    if flips:
        return f"each of {', '.join(flips)} alone gives {want}"
    seen = {pin: outcomes.get(nodeid) for pin, outcomes in single.items()}
    return (f"no single change gives {want} (alone: {seen}); the packages flip it only together")


def bisect(stack: Stack, cands: Sequence, changed: list[str], baseline: Mapping[str, str],
           candidate: Mapping[str, str], out: Path,
           options: candidate_env.InstallOptions = candidate_env.InstallOptions(),
           inherit: Sequence[str] = ()) -> BisectFindings:
    """Each asked package alone, in its own environment, on the ``changed`` contracts."""
    single = {}  # pin -> node id -> outcome
    built = reused = 0
    for cand in cands:
        say(f"upgrade: bisect: {cand.text} alone")
        folder = out / f"bisect-{candidate_env.candidate_id(stack.name, [cand], options)}"
        env = candidate_env.build(stack, [cand], say=say, options=options)
        built, reused = built + env.built, reused + (not env.built)
        report = run_suite(env, folder, changed + list(inherit))
        single[cand.text] = dict(report.outcomes)
    return BisectFindings(environments_built=built, environments_reused=reused,
                          attribution={n: attribute(n, baseline, candidate, single) for n in changed},
                          single=single)


def bisect_changed(stack: Stack, cands: Sequence, changed: list[str], baseline: SessionReport,
                   candidate: SessionReport, out: Path, options, inherit: Sequence[str]) -> BisectFindings | None:
    """Which single package flips each contract whose outcome changed (``--bisect``)."""
    if len(cands) < 2:
        say("upgrade: --bisect needs more than one candidate package; nothing to bisect")
        return None
    if not changed:
        say("upgrade: no contract changed outcome; nothing to bisect")
        return BisectFindings()
    return bisect(stack, cands, changed, baseline.outcomes, candidate.outcomes, out, options, inherit)
