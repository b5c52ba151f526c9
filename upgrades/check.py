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
import os
import sys
from pathlib import Path

from fixtures.tiers.tier_name import Tier
from upgrades import bisect_commits, bisect_packages, candidate_env, candidates, compare, matrix, page
from upgrades.cli import DEFAULT_SELECTION, TRN2_SELECTION, install_options, parse_args
from upgrades.console import say
from upgrades.performance_check import performance_check
from upgrades.promotion import promotion
from upgrades.result import UpgradeResult, verdict_of
from upgrades.sessions import run_suite
from upgrades.stacks import REPO, STACKS, Stack
from upgrades.trusted import choose_baseline, only_what_both_ran, trusted_here, trusted_stack_id


def bisect_commits_main(args, selection: list[str]) -> int:
    """``--bisect-commits PACKAGE GOOD..BAD``: the first commit of the range that flips each
    changed contract (``upgrades.bisect_commits``)."""
    package, range_text = args.bisect_commits
    stack = STACKS[args.stack]
    if args.git_repo is None:
        say("upgrade: --bisect-commits needs --git-repo (a clone holding the range)")
        return 2
    out = (args.out or REPO / "reports" / "out" / "bisect" / f"{package}-{range_text.replace('..', '-')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        options = (candidate_env.InstallOptions(no_deps=False, index_options=install_options(args).index_options)
                   if args.bisect_with_deps else None)
        result = bisect_commits.bisect_range(stack, package, args.git_repo.resolve(), range_text, selection, out,
                                             run_suite, ["--inherit-expectations", trusted_stack_id(stack)], say=say,
                                             options=options)
    except bisect_commits.RangeError as exc:
        say(f"upgrade: {exc}")
        return 2
    for flip in result["bisect"]["flips"]:
        c = flip["commit"]
        say(f"upgrade: first bad commit {c['sha'][:9]} ({c['date'][:10]}) {c['subject']}: "
            f"{len(flip['contracts'])} contract(s)")
    say(f"upgrade: {result['builds']} builds ({result['skipped']} skipped) in {result['wall_s'] / 60:.1f} min; "
        f"wrote {out / 'bisect.md'}")
    return 0


def _matrix_main(args, argv: list[str]) -> int:
    """``--candidate-matrix``: this command once per line of the file (upgrades.matrix)."""
    rest = [a for i, a in enumerate(argv) if a != "--candidate-matrix" and
            (i == 0 or argv[i - 1] != "--candidate-matrix") and not a.startswith("--candidate-matrix=")]
    out = (args.out or REPO / "reports" / "out" / "upgrade" / f"matrix-{args.candidate_matrix.stem}").resolve()
    if args.out is not None:
        rest = [a for i, a in enumerate(rest) if a != "--out" and (i == 0 or rest[i - 1] != "--out")]
    return matrix.check_rows(args.candidate_matrix, rest, out, main)


def _candidates(args) -> list | None:
    """The candidates asked for, or None after saying why not (a usage error)."""
    try:
        cands = [candidates.parse(text, git_repo=args.git_repo) for text in args.candidate]
        if args.candidate_set is not None:
            cands += candidates.from_set_file(args.candidate_set, git_repo=args.git_repo)
    except candidates.CandidateUsageError as exc:
        say(f"upgrade: {exc}")
        return None
    if not cands:
        say("upgrade: no candidate given (--candidate or --candidate-set)")
        return None
    return cands


def _trusted_stack(args, selection: list[str]) -> tuple[Stack | None, list[str]]:
    """The trusted stack (on trn2: the active Neuron environment) and the selection to run."""
    if args.tier != Tier.TRN2:
        return STACKS[args.stack], selection
    venv = args.trusted_venv or (Path(os.environ["VIRTUAL_ENV"]) if os.environ.get("VIRTUAL_ENV") else None)
    if venv is None or not (venv / "bin" / "python").exists():
        say("upgrade: --tier trn2 copies the active Neuron environment: activate it or pass --trusted-venv")
        return None, selection
    stack = Stack(f"trn2-{venv.resolve().name}", venv.resolve(), None)
    return stack, (TRN2_SELECTION if selection == DEFAULT_SELECTION else selection)


def check(args, stack: Stack, cands: list, env, out: Path, selection: list[str]) -> UpgradeResult:
    """The candidate's session against the baseline, then the trusted stack asked here where the
    baseline took other kernel paths, the performance sessions and the bisection: one result."""
    chosen = choose_baseline(args, stack, env, out, selection)
    baseline, today = chosen.report, chosen.today
    candidate = run_suite(env, out / "candidate", selection + chosen.candidate_options)
    if selection not in (DEFAULT_SELECTION, TRN2_SELECTION) or args.tier == Tier.TRN2:
        baseline = only_what_both_ran(baseline, candidate)  # compare only what both ran
    comparison = compare.compare(baseline, candidate, env.changes, today=today)
    here = trusted_here(args, stack, baseline, candidate, comparison, out, today)
    if here is not None:  # asked the trusted stack on this machine: judge again with its answers
        comparison = compare.compare(baseline, candidate, env.changes, today=here)
    partial = selection != DEFAULT_SELECTION
    performance = performance_check(args, stack.venv / "bin" / "python", env.python, out, chosen.candidate_options,
                                    selection)
    bisected = bisect_packages.bisect_changed(stack, cands, comparison.changed_outcomes(), baseline, candidate, out,
                                              install_options(args), chosen.inherit) if args.bisect else None
    passed = verdict_of(comparison.verdict, performance, tuple(selection), partial).passed
    promote = promotion(passed, partial, stack, env, cands)
    return UpgradeResult(comparison.placed(chosen.page_path(out), "candidate"), selection=tuple(selection),
                         candidates=tuple(cands), partial=partial, performance=performance, bisect=bisected,
                         bisected=args.bisect, promote=promote,
                         constraints=str(env.constraints.relative_to(REPO)) if promote is not None else None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, selection = parse_args(argv, __doc__)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.bisect_commits:
        return bisect_commits_main(args, selection)
    if args.candidate_matrix is not None:
        return _matrix_main(args, argv)
    cands = _candidates(args)
    if cands is None:
        return 2
    stack, selection = _trusted_stack(args, selection)
    if stack is None:
        return 2
    options = install_options(args)
    out = (args.out or REPO / "reports" / "out" / "upgrade" / candidate_env.candidate_id(stack.name, cands, options)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    title = f"Upgrade check: {', '.join(c.describe() for c in cands)} over {stack.name}"
    try:
        env = candidate_env.build(stack, cands, say=say, options=options)
    except candidate_env.CandidateError as exc:
        say(f"upgrade: {exc}")
        (out / "upgrade.md").write_text(f"# {title}\n\n**Verdict: NOT BUILT**\n\n```\n{exc}\n```\n")
        return 2
    result = check(args, stack, cands, env, out, selection)
    (out / "upgrade.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    (out / "upgrade.md").write_text(page.render(result, title=title))
    asked = [c for c in env.changes if c.kind == "candidate"]
    say(f"upgrade: {result.verdict.text()}")
    say(f"upgrade: wrote {out / 'upgrade.md'} and upgrade.json ({len(asked)} package(s) asked, "
        f"{len(env.changes) - len(asked)} transitive change(s))")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
