"""Before an upgrade: build the candidate stack beside the trusted one, run the suite there,
and say what changed and which package did it.

    python -m reports.upgrade --candidate transformers==5.24.0 [--candidate PKG==VER ...]
                              [--stack titan-0.3.0] [--bisect] [--out DIR] [-- PYTEST ARGS...]

1. The candidate environment (``reports.candidate_env``): the trusted venv cloned with hard
   links under ``.cache/upgrade/<id>/venv``, the pins installed over it, every version the
   resolver changed recorded, ``pip check`` required.
2. The cpu tier in that environment (``pytest conformance -m cpu``, or the PYTEST ARGS given
   after ``--``), with its own report; the session's stack preflight runs first there.
3. The comparison with the committed baseline of the trusted stack (``reports.upgrade_compare``):
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
import subprocess
import sys
import time
from pathlib import Path

from reports import candidate_env, upgrade_compare
from reports.stacks import DEFAULT_STACK, REPO, STACKS, Stack

DEFAULT_SELECTION = ["conformance", "-m", "cpu"]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def baseline_of(stack: Stack) -> Path:
    """The committed baseline of the trusted stack (its stack id, asked of its own venv)."""
    proc = subprocess.run([str(stack.venv / "bin" / "python"), "-c",
                           "from fixtures import stack; print(stack.stack_id('cpu'))"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    return REPO / "reports" / "baselines" / f"{proc.stdout.strip()}.json"


def run_suite(env: candidate_env.CandidateEnv, report_dir: Path, selection: list[str]) -> dict:
    """The suite in the candidate environment, its output live on the terminal."""
    shown = " ".join(selection) if len(selection) <= 6 else f"<{len(selection)} contracts whose outcome changed>"
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


def bisect(stack: Stack, pins: list[str], changed: list[str], baseline: dict, candidate: dict,
           out: Path) -> dict:
    single: dict[str, dict] = {}
    built = reused = 0
    for pin in pins:
        say(f"upgrade: bisect: {pin} alone")
        env = candidate_env.build(stack, [pin], say=say)
        built, reused = built + env.built, reused + (not env.built)
        report = run_suite(env, out / f"bisect-{candidate_env.candidate_id(stack.name, [pin])}", changed)
        single[pin] = {c["nodeid"]: c["outcome"] for c in report["contracts"]}
    return {
        "environments_built": built,
        "environments_reused": reused,
        "attribution": {n: attribute(n, baseline, candidate, single) for n in changed},
        "single": single,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selection = DEFAULT_SELECTION
    if "--" in argv:
        selection = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(prog="python -m reports.upgrade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", action="append", required=True, metavar="PKG==VERSION")
    parser.add_argument("--stack", default=DEFAULT_STACK, choices=sorted(STACKS))
    parser.add_argument("--bisect", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    stack = STACKS[args.stack]
    ident = candidate_env.candidate_id(stack.name, args.candidate)
    out = (args.out or REPO / "reports" / "out" / "upgrade" / ident).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        env = candidate_env.build(stack, args.candidate, say=say)
    except candidate_env.CandidateError as exc:
        say(f"upgrade: {exc}")
        (out / "upgrade.md").write_text(f"# Upgrade check: {', '.join(args.candidate)}\n\n**Verdict: "
                                        f"NOT BUILT**\n\n```\n{exc}\n```\n")
        return 2
    baseline_path = baseline_of(stack)
    baseline = json.loads(baseline_path.read_text())
    candidate = run_suite(env, out / "candidate", selection)
    if selection != DEFAULT_SELECTION:  # a partial run: compare only what it ran
        ran = {c["nodeid"] for c in candidate["contracts"]}
        baseline = {**baseline, "contracts": [c for c in baseline["contracts"] if c["nodeid"] in ran]}
    result = upgrade_compare.compare(baseline, candidate, [vars(c) for c in env.changes])
    result["baseline"] = str(baseline_path.relative_to(REPO))
    result["candidate_report"] = str(out / "candidate")
    result["selection"] = selection
    changed = [c["nodeid"] for c in result["contracts"] if c["category"] not in ("unchanged", "new", "missing")]
    bisect_result = None
    asked = [c for c in env.changes if c.kind == "candidate"]
    if args.bisect:
        if len(args.candidate) < 2:
            say("upgrade: --bisect needs more than one candidate package; nothing to bisect")
        elif not changed:
            say("upgrade: no contract changed outcome; nothing to bisect")
            bisect_result = {"environments_built": 0, "environments_reused": 0, "attribution": {}}
        else:
            bisect_result = bisect(stack, args.candidate, changed,
                                   {c["nodeid"]: c["outcome"] for c in baseline["contracts"]},
                                   {c["nodeid"]: c["outcome"] for c in candidate["contracts"]}, out)
        result["bisect"] = bisect_result
    promote = None
    if selection != DEFAULT_SELECTION:
        result["verdict"] += f" (on a partial selection: `pytest {' '.join(selection)}`; not a promotion)"
    elif result["passed"]:
        promote = [f"cp {env.constraints.relative_to(REPO)} {stack.constraints.relative_to(REPO)}",
                   f"bash scripts/setup-venv.sh {stack.name}",
                   f"CONFORMANCE_STACK={stack.name} bash scripts/conformance.sh   # gate FAILS on the drift: expected",
                   "python -m reports.baseline reports/out/cpu" + ("" if stack.name == DEFAULT_STACK else f"-{stack.name}")]
        result["promote"] = promote
        result["constraints"] = str(env.constraints.relative_to(REPO))
    title = f"Upgrade check: {', '.join(args.candidate)} over {stack.name}"
    (out / "upgrade.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "upgrade.md").write_text(upgrade_compare.render(result, title=title, promote=promote,
                                                            bisect=bisect_result))
    say(f"upgrade: {result['verdict']}")
    say(f"upgrade: wrote {out / 'upgrade.md'} and upgrade.json ({len(asked)} package(s) asked, "
        f"{len(env.changes) - len(asked)} transitive change(s))")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
