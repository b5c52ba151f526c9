"""Before an upgrade: build the candidate stack beside the trusted one, run the suite there,
and say what changed and which package did it.

    python -m upgrades --candidate transformers==5.24.0 [--candidate PKG==VER ...]
                              [--stack titan-0.3.0] [--bisect] [--out DIR] [-- PYTEST ARGS...]

1. The candidate environment (``upgrades.candidate_env``): the trusted venv cloned with hard
   links under ``.cache/upgrade/<id>/venv``, the pins installed over it, every version the
   resolver changed recorded, ``pip check`` required.
2. The cpu tier in that environment (``pytest conformance -m cpu``, or the PYTEST ARGS given
   after ``--``), with its own report; the session's stack preflight runs first there.
3. The comparison with the committed baseline of the trusted stack (``upgrades.compare``):
   ``upgrade.md`` and ``upgrade.json`` in ``--out`` (default ``reports/out/upgrade/<id>/``), a
   verdict line, and, when the candidate passes, its constraints file and the commands that
   promote it.
4. ``--bisect``: with more than one package changed, for each contract whose outcome changed,
   which single package change (with the transitive changes it forces) flips it. Each
   single-package environment is built once and runs only the changed contracts.

On a Neuron host the same flow applies to the trn2 tier, with the Neuron packages from AWS's
index and torch kept as the Neuron build (see the README).
Exit status: 0 when the verdict passes, 1 when it fails, 2 when the candidate cannot be built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fixtures.tiers.tier_name import Tier
from upgrades import bisect_commits, bisect_packages, candidate_env, cli, compare, matrix, page, sessions
from upgrades.cli import DEFAULT_SELECTION, TRN2_SELECTION, Request
from upgrades.console import say
from upgrades.performance_check import performance_check
from upgrades.promotion import promotion
from upgrades.result import UpgradeResult, verdict_of
from upgrades.stacks import REPO


def main(argv: list[str] | None = None) -> int:
    request = cli.parse(list(sys.argv[1:] if argv is None else argv), __doc__)
    if isinstance(request, int):
        return request
    if request.args.bisect_commits:
        return bisect_commits.bisect_command(request)
    if request.args.candidate_matrix is not None:
        return matrix.matrix_command(request, main)
    return upgrade(request)


def upgrade(request: Request) -> int:
    """The candidate environment built, the check run in it, its page and upgrade.json written."""
    stack, cands, options = request.stack, request.candidates, request.options
    out = (request.args.out or REPO / "reports" / "out" / "upgrade" /
           candidate_env.candidate_id(stack.name, cands, options)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    title = f"Upgrade check: {', '.join(c.describe() for c in cands)} over {stack.name}"
    try:
        env = candidate_env.build(stack, cands, say=say, options=options)
    except candidate_env.CandidateError as exc:
        say(f"upgrade: {exc}")
        (out / "upgrade.md").write_text(f"# {title}\n\n**Verdict: NOT BUILT**\n\n```\n{exc}\n```\n")
        return 2
    result = check(request, env, out)
    (out / "upgrade.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    (out / "upgrade.md").write_text(page.render(result, title=title))
    asked = [c for c in env.changes if c.kind == "candidate"]
    say(f"upgrade: {result.verdict.text()}")
    say(f"upgrade: wrote {out / 'upgrade.md'} and upgrade.json ({len(asked)} package(s) asked, "
        f"{len(env.changes) - len(asked)} transitive change(s))")
    return 0 if result.passed else 1


def check(request: Request, env: candidate_env.CandidateEnv, out: Path) -> UpgradeResult:
    """The candidate's session against the baseline, then the trusted stack asked here where the
    baseline took other kernel paths, the performance sessions and the bisection: one result."""
    args, stack, selection = request.args, request.stack, request.selection
    chosen = sessions.choose_baseline(args, stack, env, out, selection)
    baseline, today = chosen.report, chosen.today
    candidate = sessions.run_suite(env, out / "candidate", selection + chosen.candidate_options)
    if selection not in (DEFAULT_SELECTION, TRN2_SELECTION) or args.tier == Tier.TRN2:
        baseline = sessions.only_what_both_ran(baseline, candidate)  # compare only what both ran
    comparison = compare.compare(baseline, candidate, env.changes, today=today)
    here = sessions.trusted_here(args, stack, baseline, candidate, comparison.suspects(), out, today)
    if here is not None:  # asked the trusted stack on this machine: judge again with its answers
        comparison = compare.compare(baseline, candidate, env.changes, today=here)
    partial = selection != DEFAULT_SELECTION
    performance = performance_check(args, stack.venv / "bin" / "python", env.python, out, chosen.candidate_options,
                                    selection)
    bisected = bisect_packages.bisect_changed(stack, request.candidates, comparison.changed_outcomes(), baseline,
                                              candidate, out, request.options, chosen.inherit) if args.bisect else None
    passed = verdict_of(comparison.verdict, performance, tuple(selection), partial).passed
    promote = promotion(passed, partial, stack, env, request.candidates)
    return UpgradeResult(comparison.placed(chosen.page_path(out), "candidate"), selection=tuple(selection),
                         candidates=request.candidates, partial=partial, performance=performance, bisect=bisected,
                         bisected=args.bisect, promote=promote,
                         constraints=str(env.constraints.relative_to(REPO)) if promote is not None else None)


if __name__ == "__main__":
    sys.exit(main())
