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

from packaging.utils import canonicalize_name

from fixtures.tiers.tier_profile import NKI_LIBRARY_NEURON_ONLY
from upgrades.candidates import Candidate, CandidateUsageError, parse
from reports.inventory import pip_check_problems
from upgrades.stacks import REPO, STACKS, Stack

CACHE = REPO / ".cache" / "upgrade"


class CandidateError(RuntimeError):
    """The candidate environment cannot be built or is inconsistent (message says why)."""


@dataclass(frozen=True)
class Change:
    name: str
    old: str | None  # None: not installed before
    new: str | None  # None: removed
    kind: str  # "candidate" (asked for) or "transitive" (what the resolver did for it)
    commit: str | None = None  # a git build's commit (wheel label, direct reference, checkout)
    date: str | None = None  # that commit's date, where a repository says it
    source: str | None = None  # how it was given: index, wheel, direct, checkout


@dataclass(frozen=True)
class InstallOptions:
    """What pip gets beside the candidates: ``--no-deps`` (only what is named, as a Neuron venv
    needs: pip must not replace the Neuron build of torch) and index options passed through
    (``--extra-index-url``, ``--index-url``, ``--find-links``)."""

    no_deps: bool = False
    index_options: tuple[str, ...] = ()

    def args(self) -> list[str]:
        return (["--no-deps"] if self.no_deps else []) + list(self.index_options)


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
        candidate = parse(text)
    except CandidateUsageError as exc:
        raise CandidateError(str(exc)) from None
    if candidate.kind != "index":
        raise CandidateError(f"candidate {text!r} must pin one exact version (name==version)")
    return candidate.name, candidate.version


def _as_candidates(pins) -> list:

    out = []
    for pin in pins:
        if isinstance(pin, Candidate):
            out.append(pin)
            continue
        try:
            out.append(parse(pin))
        except CandidateUsageError as exc:
            raise CandidateError(str(exc)) from None
    return out


def _wheel_digest(candidate: Candidate) -> str:
    """``#sha256=...`` of a wheel file candidate's bytes; empty for any other kind."""
    if candidate.kind != "wheel":
        return ""
    with open(candidate.install[0], "rb") as wheel:
        return "#sha256=" + hashlib.file_digest(wheel, "sha256").hexdigest()


def candidate_id(stack: str, pins, options: InstallOptions = InstallOptions()) -> str:
    """One id per (stack, candidates, install options, the resolver's own constraints): the same
    set in any order is one id; a checkout at another commit is another, and so is the same set
    under another ``PIP_CONSTRAINT`` or ``PIP_CONFIG_FILE`` (a NOT BUILT attempt under a
    constraint and a later build with it lifted are two attempts, two folders). A wheel file
    is named by its content too: a wheel rebuilt at the same path (a local build keeps its
    version) is another candidate, never judged by the environment of the one it replaced."""
    norm = sorted(f"{' '.join(c.install)}@{c.commit or ''}{_wheel_digest(c)}" for c in _as_candidates(pins))
    resolver = [os.environ.get("PIP_CONSTRAINT"), os.environ.get("PIP_CONFIG_FILE")]
    payload = [stack, norm, options.no_deps, list(options.index_options)] + ([resolver] if any(resolver) else [])
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:12]


def installed(python: Path) -> dict[str, str]:
    """canonical name -> version of every distribution in the environment of ``python``."""
    proc = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CandidateError(f"pip list failed in {python}: {proc.stderr[-500:]}")
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(proc.stdout)}


def diff(before: dict[str, str], after: dict[str, str], asked) -> list[Change]:
    """Every distribution whose version changed; ``asked``: the names asked for, or
    name -> Candidate (its commit, date and form go on its line)."""
    changes = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            cand = asked.get(name) if isinstance(asked, dict) else None
            changes.append(Change(name, before.get(name), after.get(name),
                                  "candidate" if name in asked else "transitive",
                                  commit=cand.commit if cand else None, date=cand.date if cand else None,
                                  source=cand.kind if cand else None))
    return changes


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system: a real copy
        shutil.copy2(src, dst)


def clone_venv(src: Path, dst: Path) -> None:
    """``dst`` as a venv of its own sharing ``src``'s files by hard links (paths made absolute
    first: the scripts' ``#!`` lines name the venv by its absolute path)."""
    src, dst = Path(src).resolve(), Path(dst).resolve()
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
    requirements, ``fixtures.tiers.tier_profile.NKI_LIBRARY_NEURON_ONLY``)."""

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


def pip_constraints(python: Path) -> list[str]:
    """The constraint files pip applies on its own: its configuration (``pip config list``:
    ``global.constraint``, ``install.constraint``, a site or user pip.conf) and ``PIP_CONSTRAINT``."""
    proc = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True)
    found = [line.split("=", 1)[1].strip().strip("'\"") for line in proc.stdout.splitlines()
             if line.split("=", 1)[0].endswith(".constraint")]
    if os.environ.get("PIP_CONSTRAINT"):
        found.append(f"{os.environ['PIP_CONSTRAINT']} (PIP_CONSTRAINT)")
    return found


def pip_failure(stdout: str, stderr: str, python: Path) -> str:
    """pip's own reason for a failed install: its ERROR lines (stderr) and the resolver's
    "The conflict is caused by:" block (stdout), and the constraint files pip's configuration
    adds when the conflict names a constraint (a corporate constraints file, a machine cap)."""
    keep = lambda lines: [l for l in lines if l.strip() and not l.startswith("WARNING: Location")]  # noqa: E731
    out = keep(stderr.splitlines())[-12:]
    lines = stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if "conflict is caused by" in l), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("To fix this")), len(lines))
        out += keep(lines[start:end])
    if "(constraint)" in stdout + stderr:
        configured = pip_constraints(python)
        out.append("constraints pip applies from its configuration: "
                   + (", ".join(configured) if configured else "none found (pip config list, PIP_CONSTRAINT)")
                   + "; to lift them for one command: PIP_CONSTRAINT=/dev/null, or PIP_CONFIG_FILE=/dev/null")
    return "\n".join(out)


def build(stack: Stack, pins, say=print, options: InstallOptions = InstallOptions(),
          check: bool = True) -> CandidateEnv:
    """The candidate environment of ``pins`` (candidate strings or ``upgrades.candidates.Candidate``)
    over ``stack``, built once and then reused. ``check=False``: no ``pip check`` (a bisection's
    midpoint installed ``--no-deps`` declares requirements of its own day; whether it imports
    is what decides)."""
    cands = _as_candidates(pins)
    asked = {c.name: c for c in cands}
    ident = candidate_id(stack.name, cands, options)
    root = CACHE / ident
    env = CandidateEnv(stack=stack.name, pins=sorted(c.text for c in cands), root=root, venv=root / "venv")
    state = root / "env.json"
    if state.exists() and env.python.exists():
        data = json.loads(state.read_text())
        env.changes = [Change(**c) for c in data["changes"]]
        env.constraints = Path(data["constraints"]) if data.get("constraints") not in (None, "None") else None
        say(f"upgrade: reusing the candidate environment {env.venv} ({', '.join(env.pins)})")
        return env
    if not (stack.venv / "bin" / "python").exists():
        raise CandidateError(f"the trusted venv {stack.venv} does not exist: run "
                             f"`bash scripts/setup-venv.sh {stack.name}` first")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    say(f"upgrade: cloning {stack.venv} -> {env.venv} (hard links, no download of what did not change)")
    clone_venv(stack.venv, env.venv)
    install = [a for c in cands for a in c.install]
    say(f"upgrade: pip install {' '.join(options.args() + install)} over the trusted stack")
    # not --quiet: the resolver's "The conflict is caused by:" block is an INFO line on stdout
    proc = subprocess.run([str(env.python), "-m", "pip", "install", "--disable-pip-version-check",
                           *options.args(), *install], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CandidateError(f"pip could not install {' '.join(install)} over {stack.name}:\n"
                             + pip_failure(proc.stdout, proc.stderr, env.python))
    env.changes = diff(installed(stack.venv / "bin" / "python"), installed(env.python), asked)
    for change in env.changes:
        say(f"upgrade:   {change.kind:10} {change.name}: {change.old or 'not installed'} -> {change.new or 'removed'}"
            + (f" (commit {change.commit[:10]})" if change.commit else ""))
    missing = [c.text for c in cands if not any(ch.name == c.name for ch in env.changes)]
    if missing:
        say(f"upgrade:   unchanged: {', '.join(missing)} (already what the trusted stack has)")
    problems = pip_check(env.python) if check else []
    if problems:
        raise CandidateError("pip check fails in the candidate environment, so it is not a stack:\n  "
                             + "\n  ".join(problems))
    if stack.constraints is not None:  # a cpu stack's pins; a Neuron environment has none of ours
        env.constraints = root / "constraints.txt"
        write_constraints(stack.constraints, env.changes, env.constraints)
    env.built = True
    state.write_text(json.dumps(env.to_json(), indent=1))
    return env


if __name__ == "__main__":  # a manual check: python -m upgrades.candidate_env STACK PIN...

    print(json.dumps(build(STACKS[sys.argv[1]], sys.argv[2:]).to_json(), indent=1))
