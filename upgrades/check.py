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

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fixtures.oracles.performance import CPU_PERF, TRN2_PERF, PerfPolicy
from fixtures.tiers import pins
from fixtures.tiers.tier_name import Tier
from upgrades import bisect_commits, candidate_env, candidates, compare, matrix, perf_compare, perf_history
from upgrades.result import UpgradeResult
from upgrades.stacks import DEFAULT_STACK, REPO, STACKS, Stack

DEFAULT_SELECTION = ["conformance", "-m", "cpu"]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def baseline_of(stack: Stack) -> Path:
    """The committed baseline of the trusted stack (its stack id, asked of its own venv)."""
    proc = subprocess.run([str(stack.venv / "bin" / "python"), "-c",
                           "from fixtures.tiers import stack; print(stack.stack_id('cpu'))"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    return REPO / "reports" / "baselines" / f"{proc.stdout.strip()}.json"


def pin_moves(changes, pinned: dict[str, str] | None = None) -> list[str]:
    """The one command that moves every changed package the suite pins exactly (pyproject.toml's
    cpu extra, read by the venv script and the tier profile: ``fixtures.tiers.pins``) to the
    candidate's version; nothing when the change moves none of them."""
    pinned = pins.cpu_pins() if pinned is None else pinned
    moved = [f"{c.name}=={c.new}" for c in changes
             if c.old and c.new and pinned.get(pins.canonicalize_name(c.name)) == c.old]
    return [f"python -m fixtures.tiers.pins {' '.join(moved)}"] if moved else []


def new_stack_steps(cands, constraints: Path, stack) -> list[str]:
    """Promotion of a build no package index serves (a wheel file, a git reference, a checkout):
    pinning it in the trusted stack's constraints would name a version pip cannot fetch, and the
    stack's extra requires its own torchtitan. It becomes a stack of its own, built from a
    wheelhouse as titan-5059f32 is: the steps, with the names to fill in."""
    built = [c for c in cands if c.kind != "index"]

    def short(c) -> str:  # a commit, else the version's local label (0.2.2+gitabc1234 -> abc1234)
        local = (c.version or "").partition("+")[2].removeprefix("git")
        return (c.commit or local or c.version or "build")[:7]

    name = "-".join(("titan" if c.name == "torchtitan" else c.name) + f"-{short(c)}" for c in built)
    rel = constraints.relative_to(REPO) if constraints.is_relative_to(REPO) else constraints
    steps = [f"# {', '.join(c.describe() for c in built)}: a build no index serves; promoting it means a new "
             f"stack ({name}), not new pins of {stack.name}"]
    for c in built:
        if c.kind == "wheel":
            steps.append(f"cp {c.install[-1]} WHEELHOUSE/")
        else:
            steps.append(f"pip wheel --no-deps -w WHEELHOUSE {' '.join(c.install)}")
    steps += ["(cd WHEELHOUSE && sha256sum *.whl > SHA256SUMS)",
              f"cp {rel} requirements/cpu-{name}-constraints.txt",
              f"# add {name} to scripts/setup-venv.sh's stack table (venv, constraints, wheel), as titan-5059f32 is",
              f"CONFORMANCE_WHEELHOUSE=WHEELHOUSE bash scripts/setup-venv.sh {name}",
              f"CONFORMANCE_STACK={name} bash scripts/conformance.sh   # no file of its own: inherits the nearest",
              f"python -m reports.write_expectations reports/out/cpu-{name}   # then review, rerun, and promote its baseline"]
    return steps


def describe_selection(selection: list[str]) -> str:
    """A long pytest argument list in a few words: how many node ids it names (contracts) and
    the options it passes, never its argument count called contracts."""
    nodeids = [a for a in selection if "::" in a]
    options = " ".join(a for a in selection if "::" not in a)
    return (f"<{len(nodeids)} contracts> " if nodeids else "") + options


def run_suite(env: candidate_env.CandidateEnv, report_dir: Path, selection: list[str]) -> dict:
    """The suite in the candidate environment, its output live on the terminal."""
    shown = " ".join(selection) if len(selection) <= 6 else describe_selection(selection)
    say(f"upgrade: running `pytest {shown}` in {env.venv}")
    started = time.monotonic()
    proc = subprocess.run([str(env.python), "-m", "pytest", *selection, "--report-dir", str(report_dir)],
                          cwd=REPO)
    say(f"upgrade: the candidate's session exited {proc.returncode} after {time.monotonic() - started:.0f} s")
    path = report_dir / "report.json"
    if not path.exists():
        raise candidate_env.CandidateError(f"the candidate's session wrote no report ({path})")
    return json.loads(path.read_text())


def attribute(nodeid: str, baseline: dict, candidate: dict, single: dict[str, dict]) -> str:
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


def bisect(stack: Stack, cands: list, changed: list[str], baseline: dict, candidate: dict,
           out: Path, options: candidate_env.InstallOptions = candidate_env.InstallOptions(),
           inherit: list[str] = ()) -> dict:
    single: dict[str, dict] = {}
    built = reused = 0
    for cand in cands:
        say(f"upgrade: bisect: {cand.text} alone")
        env = candidate_env.build(stack, [cand], say=say, options=options)
        built, reused = built + env.built, reused + (not env.built)
        report = run_suite(env, out / f"bisect-{candidate_env.candidate_id(stack.name, [cand], options)}",
                           changed + list(inherit))
        single[cand.text] = {c["nodeid"]: c["outcome"] for c in report["contracts"]}
    return {
        "environments_built": built,
        "environments_reused": reused,
        "attribution": {n: attribute(n, baseline, candidate, single) for n in changed},
        "single": single,
    }


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2: bad input is a usage error, not a verdict
        say(f"upgrade: {message} (python -m upgrades --help)")
        raise SystemExit(2)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    selection = DEFAULT_SELECTION
    if "--" in argv:
        selection = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = _Parser(prog="python -m upgrades", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", action="append", default=[], metavar="CANDIDATE",
                        help="name==version, a wheel file, 'name @ git+URL@commit', or a checkout folder")
    parser.add_argument("--candidate-set", type=Path, default=None, metavar="FILE",
                        help="a JSON file of candidates: a Neuron release's 'packages' or a 'candidates' list")
    parser.add_argument("--no-deps", action="store_true", help="install only what is named (a Neuron venv)")
    parser.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    parser.add_argument("--index-url", default=None, metavar="URL")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    parser.add_argument("--git-repo", type=Path, default=None,
                        help="a clone of the candidate's repository, for commit dates (and --bisect-commits)")
    parser.add_argument("--bisect-commits", nargs=2, default=None, metavar=("PACKAGE", "GOOD..BAD"),
                        help="the first commit of GOOD..BAD (of --git-repo) that flips the contracts whose "
                             "outcome changed over the range (upgrades.bisect_commits)")
    parser.add_argument("--bisect-with-deps", action="store_true",
                        help="--bisect-commits: install each build with the requirements it adds (from the index), "
                             "for a range across which the package's requirements change (default: --no-deps)")
    parser.add_argument("--stack", default=DEFAULT_STACK, choices=sorted(STACKS))
    parser.add_argument("--tier", default=Tier.CPU, type=Tier, choices=tuple(Tier),
                        help="trn2: the candidate is a copy of the active Neuron environment ($VIRTUAL_ENV, or "
                             "--trusted-venv) with the candidates installed over it; the trusted session is run "
                             "there on the same selection unless --baseline-report names one")
    parser.add_argument("--trusted-venv", type=Path, default=None)
    parser.add_argument("--baseline-report", type=Path, default=None, metavar="REPORT_DIR",
                        help="the trusted session's report folder to compare with, instead of running it")
    parser.add_argument("--bisect", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--trusted-today", action="store_true",
                        help="cpu: also run the trusted stack on the selection with today's checkout, and mark "
                             "every moved figure with its value there (the committed baseline may be older than "
                             "the checkout: a move the trusted stack shows today is not the candidate's); "
                             "without it, the figures of the trusted stack's cross-version session, which the "
                             "upgrade runs anyway, are used")
    parser.add_argument("--performance-launches", type=int, default=5, metavar="N",
                        help="performance sessions of each stack, in ABBA order (upgrades.perf_compare); "
                             "0: no performance check (the page says so)")
    parser.add_argument("--performance-max-launches", type=int, default=9, metavar="N",
                        help="an INCONCLUSIVE verdict adds one pair at a time to the same series, up to N a side")
    parser.add_argument("--history", type=Path, default=perf_history.HISTORY, metavar="DIR",
                        help="the stored performance history (upgrades.perf_history): the candidate is compared "
                             "with its oldest and latest stack on this machine, and the trusted sessions are stored")
    parser.add_argument("--accept-performance", action="store_true",
                        help="a SLOWER/LARGER/LEAKING performance verdict does not fail the upgrade; the page records it")
    parser.add_argument("--candidate-matrix", type=Path, default=None, metavar="FILE",
                        help="several candidate sets, one per line, each checked against the one trusted stack; "
                             "one page with a row per set (upgrades.matrix)")
    return parser.parse_args(argv), selection


def install_options(args) -> candidate_env.InstallOptions:
    index = [a for url in args.extra_index_url for a in ("--extra-index-url", url)]
    index += ["--index-url", args.index_url] if args.index_url else []
    index += [a for d in args.find_links for a in ("--find-links", d)]
    return candidate_env.InstallOptions(no_deps=args.no_deps, index_options=tuple(index))


def trusted_stack_id(stack: Stack) -> str:
    return baseline_of(stack).stem


COMPAT_CONTRACTS = ["conformance/test_compat.py", "-m", "cpu"]


def trusted_artifacts(stack: Stack, out: Path) -> list[str]:
    """What the trusted stack writes for the candidate to read (``fixtures.runs.trusted_artifacts``):
    its cross-version contracts run in the trusted venv (their runs come from its run cache
    after the first time), then the folder written from that session; the pytest options
    that hand it to the candidate. Where the trusted stack cannot write it, the candidate's
    cross-version contracts read the candidate's own runs, and the page says so."""
    python = stack.venv / "bin" / "python"
    report_dir, folder = out / "trusted", out / "trusted-artifacts"
    say(f"upgrade: the trusted stack writes its checkpoint and export for the candidate ({folder})")
    proc = subprocess.run([str(python), "-m", "pytest", *COMPAT_CONTRACTS, "-q", "--report-dir", str(report_dir)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"upgrade: the trusted stack's own cross-version contracts exited {proc.returncode}: "
            "the candidate reads its own runs instead\n" + proc.stdout[-1500:])
        return []
    proc = subprocess.run([str(python), "-m", "fixtures.runs.trusted_artifacts", "write", str(report_dir), str(folder)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"upgrade: {proc.stderr.strip()}: the candidate reads its own runs instead")
        return []
    return ["--trusted-artifacts", str(folder)]


def rehearsal_options(selection: list[str]) -> list[str]:
    """The rehearsal's options of the selection that the performance sessions must share with
    it: the rehearsal itself and its host (without the host, the sessions ran on the default
    host, another machine than the suite's sessions and the history's A/A series)."""
    out = []
    for index, arg in enumerate(selection):
        if arg == "--neuron-dress-rehearsal" or arg.startswith("--rehearsal-host="):
            out.append(arg)
        elif arg == "--rehearsal-host" and index + 1 < len(selection):
            out += [arg, selection[index + 1]]
    return out


def performance_policy(args, launches: list[perf_compare.Launch]) -> PerfPolicy:
    """The tier's thresholds: cpu's, measured here; trn2's from an A/A series of this host type
    in the stored history (``upgrades.perf_history.aa_policy``), else its stakes, unjudged."""
    if args.tier != Tier.TRN2:
        return CPU_PERF
    trusted = next((l for l in launches if l.stack == "trusted" and l.report is not None), None)
    if trusted is None:
        return TRN2_PERF
    stored = perf_history.load(args.history, trusted.machine_name, trusted.report.get("suite"))
    return perf_history.aa_policy(TRN2_PERF, stored, trusted.machine_name, trusted.stack_id) or TRN2_PERF


def performance_check(args, trusted_python: Path, env, out: Path, candidate_extra: list[str],
                      selection: list[str]) -> dict:
    """The interleaved performance sessions of both stacks, their verdict and the stored
    history's comparison (a dict for ``upgrade.json``, with the page's section under ``"lines"``);
    the trusted sessions are stored in the history."""
    if args.performance_launches <= 0:
        # asking for no launches is the user's explicit acceptance of a page without figures
        return {"verdict": str(perf_compare.Finding.NOT_MEASURED), "passed": True, "accepted": True,
                "lines": ["## Performance: NOT MEASURED (accepted: the user asked for `--performance-launches 0`)",
                          "", "Step time and memory were not compared; this page says nothing about them.", ""]}
    rehearsal = rehearsal_options(selection)
    run = lambda pairs, start: perf_compare.interleaved(
        trusted_python, env.python, out / "perf", pairs, tier=args.tier, trusted_extra=rehearsal,
        candidate_extra=rehearsal + candidate_extra, cwd=REPO, say=say, start=start)
    launches = run(args.performance_launches, 0)
    policy = performance_policy(args, launches)
    verdict = perf_compare.judge(launches, policy, accepted=args.accept_performance)
    # INCONCLUSIVE from noise adds pairs to the same series (never starts over) up to the cap
    while verdict.more_launches_could_decide and len(launches) // 2 < args.performance_max_launches:
        say(f"upgrade: performance INCONCLUSIVE after {len(launches) // 2} launches a side: one more pair")
        launches += run(1, len(launches) // 2)
        verdict = perf_compare.judge(launches, policy, accepted=args.accept_performance)
    say(f"upgrade: performance {verdict.verdict}" + "".join(f"; {c.figure} {c.change()}" for c in verdict.comparisons))
    warm = []
    if args.tier in perf_compare.COMPILE_CACHE_TIERS:  # each stack's first step again, on its first launch's cache
        for side, python, extra in (("trusted", trusted_python, rehearsal),
                                    ("candidate", env.python, rehearsal + candidate_extra)):
            first = next(l for l in launches if l.stack == side)
            say(f"upgrade: performance: a {side} session on its first launch's compile cache (warm)")
            warm.append(perf_compare.warm_session(first, python, args.tier, extra, cwd=REPO))
    history, figures = perf_history.history_lines(args.history, launches, policy, out, f"upgrade check {out.name}")
    return {**verdict.to_json(), "policy": policy.to_json(), "history": figures,
            "lines": perf_compare.render(verdict, policy, launches, warm=warm) + history}


def bisect_commits_main(args, selection: list[str]) -> int:

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
        result = bisect_commits.run(stack, package, args.git_repo.resolve(), range_text, selection, out,
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
    return matrix.run(args.candidate_matrix, rest, out, main)


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
    return stack, (["conformance", "-m", "trn2"] if selection == DEFAULT_SELECTION else selection)


@dataclass(frozen=True)
class BaselineChoice:
    """What the candidate is compared with, and how its session is told so."""

    report: dict  # the baseline report
    path: Path
    inherit: list[str]  # --inherit-expectations STACK: the trusted stack's expectations
    extra: list[str]  # every further option of the candidate's session (artifacts, constraints)
    today: dict | None  # today's trusted report, where one was run

    @property
    def candidate_options(self) -> list[str]:
        return [*self.inherit, *self.extra]


def _baseline(args, stack: Stack, env, out: Path, selection: list[str]) -> BaselineChoice:
    """On trn2 the trusted session run here (or --baseline-report), on cpu the committed
    baseline plus the trusted stack's artifacts and the candidate's pins."""
    trusted = candidate_env.CandidateEnv(stack=stack.name, pins=[], root=stack.venv.parent, venv=stack.venv)
    if args.tier == Tier.TRN2:
        if args.baseline_report is not None:
            path = args.baseline_report.resolve() / "report.json"
            baseline = json.loads(path.read_text())
        else:
            baseline = run_suite(trusted, out / "trusted-suite", selection)
            path = out / "trusted-suite" / "report.json"
        return BaselineChoice(baseline, path, ["--inherit-expectations", baseline["stack_id"]["trn2"]], [], None)
    path = baseline_of(stack)
    extra = trusted_artifacts(stack, out)
    today_report = out / "trusted" / "report.json"
    if args.trusted_today:
        run_suite(trusted, out / "trusted-today", selection)
        today_report = out / "trusted-today" / "report.json"
    if env.constraints is not None:  # the pins move with the candidate
        extra += ["--stack-constraints", str(env.constraints)]
    today = json.loads(today_report.read_text()) if today_report.is_file() else None
    return BaselineChoice(json.loads(path.read_text()), path, ["--inherit-expectations", trusted_stack_id(stack)],
                          extra, today)


def trusted_here(args, stack: Stack, baseline: dict, candidate: dict, result: dict, out: Path,
                 today: dict | None) -> dict | None:
    """Before blaming the candidate: where the baseline was recorded on another machine (its
    kernel paths, ``fixtures.tiers.machine``) and contracts newly fail or figures moved, the
    trusted stack runs those contracts, only those not already in today's trusted session
    (``today``: ``--trusted-today``, or the cross-version contracts the upgrade runs anyway),
    here. Returns today's session with these added, or None where nothing needs asking."""
    if args.tier == Tier.TRN2:  # on trn2 the baseline is a trusted session run here
        return None
    key = lambda report: (report.get("machine") or {}).get("numerics_key")
    if key(baseline) is not None and key(baseline) == key(candidate):
        return None
    covered = {c["nodeid"] for c in (today or {}).get("contracts", [])}
    asked = [nodeid for nodeid in compare.suspects(result) if nodeid not in covered]
    if not asked:
        return None
    where = (baseline.get("machine") or {}).get("numerics_label") or "an unrecorded machine"
    say(f"upgrade: the baseline was recorded on {where}, this machine is "
        f"{(candidate.get('machine') or {}).get('numerics_label', '?')}: the trusted stack runs the {len(asked)} "
        "contract(s) that failed or moved, here, before the candidate is blamed")
    trusted = candidate_env.CandidateEnv(stack=stack.name, pins=[], root=stack.venv.parent, venv=stack.venv)
    here = run_suite(trusted, out / "trusted-here", [*asked, "-m", args.tier])
    if today is None:
        return here
    rerun = set(asked)
    return {**here, "contracts": [c for c in today["contracts"] if c["nodeid"] not in rerun] + here["contracts"],
            "session": f"{today.get('session')} + {here.get('session')}"}


def _place_paths(comparison: dict, baseline_path: Path, out: Path) -> None:
    """Bundle and baseline paths relative to the page's folder (or the repository)."""
    for entry in comparison["contracts"] + comparison["groups"]:
        if entry.get("repro_bundle"):
            entry["repro_bundle"] = f"candidate/{entry['repro_bundle']}"
    comparison["baseline"] = (str(baseline_path.relative_to(REPO)) if baseline_path.is_relative_to(REPO)
                              else baseline_path.name)
    if baseline_path.is_relative_to(out):
        comparison["baseline"] = str(baseline_path.relative_to(out))
    comparison["candidate_report"] = "candidate"


def _bisect_changed(args, stack, cands, baseline, candidate, comparison, out, options, inherit) -> dict | None:
    """Which single package flips each contract whose outcome changed (``--bisect``)."""
    changed = [c["nodeid"] for c in comparison["contracts"] if c["category"] not in ("unchanged", "new", "missing")]
    if len(cands) < 2:
        say("upgrade: --bisect needs more than one candidate package; nothing to bisect")
        return None
    if not changed:
        say("upgrade: no contract changed outcome; nothing to bisect")
        return {"environments_built": 0, "environments_reused": 0, "attribution": {}}
    return bisect(stack, cands, changed, {c["nodeid"]: c["outcome"] for c in baseline["contracts"]},
                  {c["nodeid"]: c["outcome"] for c in candidate["contracts"]}, out, options, inherit)


def _promotion(result: UpgradeResult, stack: Stack, env, cands) -> list[str] | None:
    """The commands that promote a PASS (none on a selection, or for a stack without pins)."""
    if result.partial or not result.passed or stack.constraints is None:
        return None
    if any(c.kind != "index" for c in cands):
        return new_stack_steps(cands, env.constraints, stack)
    return [f"cp {env.constraints.relative_to(REPO)} {stack.constraints.relative_to(REPO)}",
            *pin_moves(env.changes),
            f"bash scripts/setup-venv.sh {stack.name}",
            f"CONFORMANCE_STACK={stack.name} bash scripts/conformance.sh   # gate FAILS on the drift: expected",
            "python -m reports.baseline reports/out/cpu" + ("" if stack.name == DEFAULT_STACK else f"-{stack.name}")]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, selection = parse_args(argv)
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
    chosen = _baseline(args, stack, env, out, selection)
    baseline, today = chosen.report, chosen.today
    candidate = run_suite(env, out / "candidate", selection + chosen.candidate_options)
    if selection not in (DEFAULT_SELECTION, ["conformance", "-m", "trn2"]) or args.tier == Tier.TRN2:
        ran = {c["nodeid"] for c in candidate["contracts"]}  # compare only what both ran
        baseline = {**baseline, "contracts": [c for c in baseline["contracts"] if c["nodeid"] in ran]}
    comparison = compare.compare(baseline, candidate, [asdict(c) for c in env.changes], today=today)
    here = trusted_here(args, stack, baseline, candidate, comparison, out, today)
    if here is not None:  # asked the trusted stack on this machine: judge again with its answers
        today = here
        comparison = compare.compare(baseline, candidate, [asdict(c) for c in env.changes], today=today)
    _place_paths(comparison, chosen.path, out)
    result = UpgradeResult(comparison, selection=selection, candidates=[c.to_json() for c in cands],
                           partial=selection != DEFAULT_SELECTION)
    result.performance = performance_check(args, stack.venv / "bin" / "python", env, out, chosen.candidate_options,
                                           selection)
    if args.bisect:
        result.bisected = True
        result.bisect = _bisect_changed(args, stack, cands, baseline, candidate, comparison, out, options,
                                        chosen.inherit)
    result.promote = _promotion(result, stack, env, cands)
    if result.promote is not None:
        result.constraints = str(env.constraints.relative_to(REPO))
    written = result.to_json()
    (out / "upgrade.json").write_text(json.dumps(written, indent=1) + "\n")
    (out / "upgrade.md").write_text(compare.render(written, title=title, promote=result.promote,
                                                   bisect=result.bisect))
    asked = [c for c in env.changes if c.kind == "candidate"]
    say(f"upgrade: {written['verdict']}")
    say(f"upgrade: wrote {out / 'upgrade.md'} and upgrade.json ({len(asked)} package(s) asked, "
        f"{len(env.changes) - len(asked)} transitive change(s))")
    return 0 if result.passed else 1

if __name__ == "__main__":
    sys.exit(main())
