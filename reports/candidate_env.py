"""A candidate environment beside a trusted one: the trusted venv cloned with hard links, the
candidate pins installed over it, every version change recorded.

Hard links mean torch (and everything else that did not change) costs no copy and no
download: pip replaces the files of the packages it changes (unlink, then write) and never
edits a file in place, and the few files this module rewrites (the ``bin/`` scripts whose
``#!`` line names the trusted venv) are written as new files. The trusted venv is never
touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from reports.stacks import REPO, Stack

CACHE = REPO / ".cache" / "upgrade"


class CandidateError(RuntimeError):
    """The candidate environment cannot be built or is inconsistent (message says why)."""


@dataclass(frozen=True)
class Change:
    name: str
    old: str | None  # None: not installed before
    new: str | None  # None: removed
    kind: str  # "candidate" (asked for) or "transitive" (what the resolver did for it)


@dataclass
class CandidateEnv:
    stack: str
    pins: list[str]
    root: Path
    venv: Path
    changes: list[Change] = field(default_factory=list)
    constraints: Path | None = None
    built: bool = False  # False: an existing environment was reused

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def to_json(self) -> dict:
        return {"stack": self.stack, "pins": self.pins, "root": str(self.root), "venv": str(self.venv),
                "changes": [asdict(c) for c in self.changes], "constraints": str(self.constraints),
                "built": self.built}


def parse_pin(text: str) -> tuple[str, str]:
    """``name==version`` -> (canonical name, version); anything looser is refused: a candidate
    is an exact stack."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise CandidateError(f"candidate {text!r} is not a requirement: {exc}") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise CandidateError(f"candidate {text!r} must pin one exact version (name==version)")
    return canonicalize_name(req.name), specs[0].version


def candidate_id(stack: str, pins: list[str]) -> str:
    norm = sorted(f"{n}=={v}" for n, v in map(parse_pin, pins))
    return hashlib.sha256(json.dumps([stack, norm]).encode()).hexdigest()[:12]


def installed(python: Path) -> dict[str, str]:
    """canonical name -> version of every distribution in the environment of ``python``."""
    proc = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CandidateError(f"pip list failed in {python}: {proc.stderr[-500:]}")
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(proc.stdout)}


def diff(before: dict[str, str], after: dict[str, str], asked: set[str]) -> list[Change]:
    changes = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append(Change(name, before.get(name), after.get(name),
                                  "candidate" if name in asked else "transitive"))
    return changes


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system: a real copy
        shutil.copy2(src, dst)


def clone_venv(src: Path, dst: Path) -> None:
    """``dst`` as a venv of its own sharing ``src``'s files by hard links."""
    shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    old, new = str(src).encode(), str(dst).encode()
    for path in list((dst / "bin").iterdir()) + [dst / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old not in data[:4096]:
            continue
        tmp = path.with_name(path.name + ".conformance-tmp")
        tmp.write_bytes(data.replace(old, new))
        shutil.copymode(path, tmp)
        os.replace(tmp, path)  # a new inode: the trusted venv's file is untouched
    (dst / ".installed").unlink(missing_ok=True)


def pip_check(python: Path) -> list[str]:
    """pip check's complaints, less the ones the cpu tier allows (nki-library's Neuron-only
    requirements, ``fixtures.tier_profile.NKI_LIBRARY_NEURON_ONLY``)."""
    from fixtures.tier_profile import NKI_LIBRARY_NEURON_ONLY
    from reports.inventory import pip_check_problems

    return pip_check_problems(str(python), NKI_LIBRARY_NEURON_ONLY)[0]


def write_constraints(trusted: Path, changes: list[Change], target: Path) -> None:
    """The trusted constraints with every changed package at its new version (a removed one
    dropped, a new one added)."""
    changed = {c.name: c for c in changes}
    lines = []
    for raw in trusted.read_text().splitlines():
        name = canonicalize_name(raw.split("==", 1)[0]) if "==" in raw else None
        if name in changed:
            if changed[name].new is not None:
                lines.append(f"{raw.split('==', 1)[0]}=={changed[name].new}")
            continue
        lines.append(raw)
    known = {canonicalize_name(l.split("==", 1)[0]) for l in lines if "==" in l}
    lines += [f"{c.name}=={c.new}" for c in changes if c.new and c.name not in known
              and c.name != "qwen3-trn-conformance"]
    target.write_text("\n".join(lines) + "\n")


def build(stack: Stack, pins: list[str], say=print) -> CandidateEnv:
    """The candidate environment of ``pins`` over ``stack``, built once and then reused."""
    asked = {name for name, _ in map(parse_pin, pins)}
    ident = candidate_id(stack.name, pins)
    root = CACHE / ident
    env = CandidateEnv(stack=stack.name, pins=sorted(pins), root=root, venv=root / "venv")
    state = root / "env.json"
    if state.exists() and env.python.exists():
        data = json.loads(state.read_text())
        env.changes = [Change(**c) for c in data["changes"]]
        env.constraints = Path(data["constraints"])
        say(f"upgrade: reusing the candidate environment {env.venv} ({', '.join(pins)})")
        return env
    if not (stack.venv / "bin" / "python").exists():
        raise CandidateError(f"the trusted venv {stack.venv} does not exist: run "
                             f"`bash scripts/setup-venv.sh {stack.name}` first")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    say(f"upgrade: cloning {stack.venv} -> {env.venv} (hard links, no download of what did not change)")
    clone_venv(stack.venv, env.venv)
    say(f"upgrade: pip install {' '.join(pins)} over the trusted stack")
    proc = subprocess.run([str(env.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *pins], capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [l for l in proc.stderr.splitlines() if not l.startswith("WARNING: Location")]
        raise CandidateError(f"pip could not install {' '.join(pins)} over {stack.name}:\n" + "\n".join(errors[-20:]))
    env.changes = diff(installed(stack.venv / "bin" / "python"), installed(env.python), asked)
    for change in env.changes:
        say(f"upgrade:   {change.kind:10} {change.name}: {change.old or 'not installed'} -> {change.new or 'removed'}")
    problems = pip_check(env.python)
    if problems:
        raise CandidateError("pip check fails in the candidate environment, so it is not a stack:\n  "
                             + "\n  ".join(problems))
    env.constraints = root / "constraints.txt"
    write_constraints(stack.constraints, env.changes, env.constraints)
    env.built = True
    state.write_text(json.dumps(env.to_json(), indent=1))
    return env


if __name__ == "__main__":  # a manual check: python -m reports.candidate_env STACK PIN...
    from reports.stacks import STACKS

    print(json.dumps(build(STACKS[sys.argv[1]], sys.argv[2:]).to_json(), indent=1))
