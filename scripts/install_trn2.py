"""The trn2 install (``bash scripts/install-trn2.sh``), run by the target environment's python.

1. Record every installed distribution; the protected ones (torch and the Neuron stack,
   transformers, torchtitan) must be there.
2. The suite's own dependencies (pyproject ``[project] dependencies``, ranges) that are
   missing or outside their range are resolved first with ``pip install --dry-run``, every
   installed distribution pinned to its version (``-c``). One whose range the environment's
   version does not meet, that cannot install without changing what is there, or whose
   version would break an installed distribution's requirement (the dry run's report read
   against them: ``would_break``), stops the install before anything is written, with pip's
   own reason.
3. ``pip install --no-deps -e .``: the suite itself, then the missing dependencies. Where the
   environment has the suite's build backend (pyproject ``[build-system] requires``:
   setuptools, which torch declares on Python >= 3.12), ``--no-build-isolation``: pip's
   isolated build would fetch setuptools from the index, which a host without network lacks.
4. Check: the protected packages are exactly as before, and ``pip check`` shows no problem
   that was not there before (the problems recorded before the install are printed as not the
   suite's). Print what the install changed (added distributions, and any version that moved).

Every failure is a sentence (``install-trn2: ...``) with pip's own reason, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
SUITE = "qwen3-trn-conformance"
PROTECTED = ("torch", "torch-neuronx", "neuronx-cc", "nki", "nki-library", "transformers", "torchtitan",
             "torchtitan-neuron", "libneuronxla", "neuronx-cc-stubs")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


# The stack a Neuron training environment must have, by the module each provides: a package is
# found by what it provides, not only by its name (the Neuron fork of torchtitan, installed from
# its repository, may be a distribution named torchtitan-neuron that provides ``torchtitan``).
STACK_MODULES = {"torch": "torch", "torch-neuronx": "torch_neuronx", "torchtitan": "torchtitan",
                 "transformers": "transformers"}


def provided(module: str) -> list[str]:
    """The installed distributions whose files hold top-level ``module``."""
    from importlib import metadata

    return metadata.packages_distributions().get(module, [])


def missing_from(before: dict[str, str]) -> list[str]:
    """The stack's packages neither installed under their name nor provided by another."""
    return [p for p, module in STACK_MODULES.items() if p not in before and not provided(module)]


def installed() -> dict[str, str]:
    out = subprocess.run([*PIP, "list", "--format=json"], capture_output=True, text=True, check=True).stdout
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(out)}


class InstallError(RuntimeError):
    """A failed step, as the sentence the user reads."""


def pip_check() -> set[str]:
    """The problems ``pip check`` prints, one a line (it exits 1 when there are any); a pip
    check that fails without naming one is an error, not an empty set."""
    proc = subprocess.run([*PIP, "check"], capture_output=True, text=True)
    problems = {line.strip() for line in proc.stdout.splitlines() if line.strip() and "No broken" not in line}
    if proc.returncode != 0 and not problems:
        raise InstallError(f"pip check failed without naming a problem: {(proc.stderr.strip() or 'no output')[-800:]}")
    return problems


def build_system() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]


def backend_needs(have: dict[str, str]) -> list[str]:
    """What the environment lacks to build the suite editable itself, without pip's build
    isolation: pyproject's ``[build-system] requires``, then what the backend's own PEP 660
    hook ``get_requires_for_build_editable`` asks for (setuptools before 70.1 asks for
    ``wheel``: its ``bdist_wheel`` came from there, setuptools changelog v70.1.0). Empty: it
    can."""
    missing, outside = unmet([Requirement(r) for r in build_system()["requires"]], have)
    if missing or outside:
        return [f"{r} (not installed)" for r in missing] + outside
    hook = (f"import json, {build_system()['build-backend']} as backend; "
            "print(json.dumps(backend.get_requires_for_build_editable()))")
    proc = subprocess.run([sys.executable, "-c", hook], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"the build backend's get_requires_for_build_editable failed: {proc.stderr.strip()[-400:]}"]
    asked = [Requirement(r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    missing, outside = unmet(asked, have)
    return [f"{r} (not installed; {build_system()['build-backend']} asks for it)" for r in missing] + outside


def install_suite(have: dict[str, str]) -> None:
    """``pip install --no-deps -e REPO``: without build isolation where the environment can
    build the suite itself (nothing fetched), else isolated (pip fetches the backend)."""
    lacking = backend_needs(have)
    isolation = [] if lacking else ["--no-build-isolation"]
    proc = subprocess.run([*PIP, "install", "--quiet", "--no-deps", *isolation, "-e", str(REPO)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        backend = ("the environment's own build backend" if isolation else
                   f"an isolated build, for which pip fetches {', '.join(build_system()['requires'])} from the "
                   f"index, as this environment lacks {'; '.join(lacking)}: install that, or give pip an index")
        raise InstallError(f"installing the suite itself (editable, {backend}) failed. pip says:\n"
                           f"{pip_reason(proc.stdout + proc.stderr)}")


def suite_requirements() -> list[Requirement]:
    return [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]


def unmet(requirements: list[Requirement], have: dict[str, str]) -> tuple[list[Requirement], list[str]]:
    """(the requirements to install: not installed), (those installed outside their range,
    each as a sentence): the suite never moves a version the environment already has."""
    missing, outside = [], []
    for req in requirements:
        version = have.get(canonicalize_name(req.name))
        if version is None:
            missing.append(req)
            continue
        try:
            ok = req.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            outside.append(f"{req.name} {version} is installed; the suite needs {req}")
    return missing, outside


def pip_reason(output: str) -> str:
    """pip's explanation of a failed resolution: from "The conflict is caused by" (stdout) or
    the ERROR lines, whichever it printed."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "conflict is caused by" in line:
            return "\n".join(l for l in lines[i:i + 12] if l.strip())
    errors = [l for l in lines if l.startswith("ERROR")]
    return "\n".join(errors[-6:]) or "\n".join(lines[-6:])


NO_INDEX_SIGNS = ("(from versions: none)", "No matching distribution found")


def install_pinned(wanted: list[Requirement], pins: str, mode: str, failing: str) -> bool:
    """``pip install MODE -c PINS WANTED``; False, with pip's own reason, where it fails. pip
    finding no version at all of a dependency means no index answered (a host without
    network, ``PIP_NO_INDEX``, an unreachable index): said so, with what to do."""
    proc = subprocess.run([*PIP, "install", mode, "-c", pins, *map(str, wanted)], capture_output=True, text=True)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if any(sign in output for sign in NO_INDEX_SIGNS):
            failing = (f"pip found no version at all of {', '.join(str(r) for r in wanted)}: no package index "
                       "answered (a host without network, PIP_NO_INDEX, or an unreachable index); give pip an "
                       "index, or a folder of their wheels (PIP_FIND_LINKS=DIR); nothing was changed")
        print(f"install-trn2: {failing}. pip says:\n{pip_reason(output)}", file=sys.stderr)
    return proc.returncode == 0


def would_break(wanted: list[Requirement], pins: str) -> list[str]:
    """The installed distributions' requirements that installing ``wanted`` would break, each
    as a sentence: pip's resolver does not weigh what is already installed (it warns after
    the install), so the dry run's report (``pip install --dry-run --report``, pip >= 22.2)
    is read against every installed distribution's ``Requires-Dist`` (markers evaluated, extras
    off) before anything is written."""
    from importlib import metadata

    with tempfile.TemporaryDirectory(prefix="install-trn2-") as folder:
        report = Path(folder) / "report.json"
        proc = subprocess.run([*PIP, "install", "--dry-run", "--quiet", "--report", str(report), "-c", pins,
                               *map(str, wanted)], capture_output=True, text=True)
        if proc.returncode != 0 or not report.is_file():
            raise InstallError(f"pip's dry-run report failed. pip says:\n{pip_reason(proc.stdout + proc.stderr)}")
        adds = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text()).get("install", [])}
    broken = []
    for dist in metadata.distributions():
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:  # pip check names a distribution whose metadata it cannot read
                continue
            version = adds.get(canonicalize_name(req.name))
            if version is None or (req.marker and not req.marker.evaluate({"extra": ""})):
                continue
            if not req.specifier.contains(Version(version), prereleases=True):
                broken.append(f"{dist.metadata['Name']} {dist.version} requires {req}; the install would add "
                              f"{req.name} {version}")
    return sorted(set(broken))


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    added = [f"+ {name} {after[name]}" for name in sorted(after) if name not in before]
    moved = [f"~ {name} {before[name]} -> {after[name]}" for name in sorted(after)
             if name in before and before[name] != after[name]]
    removed = [f"- {name} {before[name]}" for name in sorted(before) if name not in after]
    return added + moved + removed


# reports.inventory reads it (the pip check contract): inside the environment, so a copy of the
# venv (an upgrade's candidate) carries it
PIP_CHECK_BEFORE = Path(sys.prefix) / "share" / SUITE / "pip-check-before-install.txt"


def record_problems_before(problems: set[str]) -> None:
    """Keep what pip check reported before the install: the contract then judges only what the
    suite or the stack under test changed."""
    PIP_CHECK_BEFORE.parent.mkdir(parents=True, exist_ok=True)
    PIP_CHECK_BEFORE.write_text("".join(f"{p}\n" for p in sorted(problems)))


def main() -> int:
    try:
        return install()
    except InstallError as exc:
        print(f"install-trn2: {exc}", file=sys.stderr)
        return 1


def install() -> int:
    before = installed()
    missing_stack = missing_from(before)
    if missing_stack:
        print(f"install-trn2: {sys.executable} is not a Neuron training environment: "
              f"{', '.join(missing_stack)} not installed (activate the Neuron venv, or the container's "
              "python, first)", file=sys.stderr)
        return 2
    wanted, outside = unmet(suite_requirements(), before)
    if outside:
        print("install-trn2: this environment has a version the suite cannot use, and the install never "
              "moves one (nothing was changed):\n  " + "\n  ".join(outside), file=sys.stderr)
        return 1
    problems_before = pip_check()
    for problem in sorted(problems_before):
        print(f"install-trn2: pip check: there before the install, not the suite's: {problem}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="installed-pins-", delete=False) as f:
        f.write("".join(f"{name}=={version}\n" for name, version in sorted(before.items()) if name != SUITE))
    pins = f.name
    if wanted:
        names = " ".join(str(r) for r in wanted)
        print(f"install-trn2: the suite's missing dependencies: {names} (everything installed pinned: {pins})")
        if not install_pinned(wanted, pins, "--dry-run", failing="the missing dependencies do not install "
                              "without changing what the environment has; nothing was changed"):
            return 1
        if broken := would_break(wanted, pins):
            raise InstallError("the missing dependencies would break what the environment has (nothing was "
                               "changed):\n  " + "\n  ".join(broken))
    install_suite(before)
    if wanted and not install_pinned(wanted, pins, "--quiet", failing="installing the missing dependencies "
                                     "failed after the dry run passed"):
        return 1
    after = installed()
    print("install-trn2: what the install changed:\n  " + "\n  ".join(changes(before, after) or ["nothing"]))
    changed = [f"{p}: {before.get(p)} -> {after.get(p)}" for p in PROTECTED if before.get(p) != after.get(p)]
    if changed:
        print(f"install-trn2: a protected package changed: {'; '.join(changed)}", file=sys.stderr)
        return 1
    moved = [line for line in changes(before, after) if not line.startswith("+")]
    if moved:
        print("install-trn2: a version the environment had moved: " + "; ".join(moved), file=sys.stderr)
        return 1
    new_problems = pip_check() - problems_before
    if new_problems:
        print("install-trn2: pip check finds new problems:\n  " + "\n  ".join(sorted(new_problems)),
              file=sys.stderr)
        return 1
    record_problems_before(problems_before)
    kept = ", ".join(f"{p} {before[p]}" for p in PROTECTED if p in before)
    print(f"install-trn2: the suite is installed in {sys.prefix}; untouched: {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
