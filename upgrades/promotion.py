"""The commands that promote a candidate that passed: its constraints over the trusted stack's,
the suite's exact pins moved, the venv rebuilt, the baseline re-recorded; or, for a build no
package index serves, the steps of a new stack of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fixtures.tiers import pins
from upgrades.candidate_env import Change
from upgrades.candidates import Candidate
from upgrades.stacks import DEFAULT_STACK, REPO, Stack


def pin_moves(changes: Sequence[Change], pinned: Mapping[str, str] | None = None) -> list[str]:
    """The one command that moves every changed package the suite pins exactly (pyproject.toml's
    cpu extra, read by the venv script and the tier profile: ``fixtures.tiers.pins``) to the
    candidate's version; nothing when the change moves none of them."""
    pinned = pins.cpu_pins() if pinned is None else pinned
    moved = [f"{c.name}=={c.new}" for c in changes
             if c.old and c.new and pinned.get(pins.canonicalize_name(c.name)) == c.old]
    return [f"python -m fixtures.tiers.pins {' '.join(moved)}"] if moved else []


def new_stack_steps(cands: Sequence[Candidate], constraints: Path, stack: Stack) -> list[str]:
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


def promotion(passed: bool, partial: bool, stack: Stack, env, cands: Sequence[Candidate]) -> tuple[str, ...] | None:
    """The commands that promote a PASS (none on a selection, or for a stack without pins)."""
    if partial or not passed or stack.constraints is None:
        return None
    if any(c.kind != "index" for c in cands):
        return tuple(new_stack_steps(cands, env.constraints, stack))
    return (f"cp {env.constraints.relative_to(REPO)} {stack.constraints.relative_to(REPO)}",
            *pin_moves(env.changes),
            f"bash scripts/setup-venv.sh {stack.name}",
            f"CONFORMANCE_STACK={stack.name} bash scripts/conformance.sh   # gate FAILS on the drift: expected",
            "python -m reports.baseline reports/out/cpu" + ("" if stack.name == DEFAULT_STACK else f"-{stack.name}"))
