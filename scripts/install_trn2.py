"""The trn2 install (``bash scripts/install-trn2.sh``), run by the target environment's python.

1. Record the protected packages (torch and the Neuron stack, transformers, torchtitan).
2. ``pip install --no-deps -e .``: the suite itself, nothing else.
3. The suite's own dependencies (pyproject ``[project] dependencies``) that are missing, and
   only those, with every installed distribution pinned to its version (``-c``): an install
   that would change anything already there fails instead.
4. Check: the protected packages are exactly as before, and ``pip check`` shows no problem
   that was not there before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PROTECTED = ("torch", "torch-neuronx", "neuronx-cc", "nki", "nki-library", "transformers", "torchtitan",
             "torchtitan-neuron", "libneuronxla", "neuronx-cc-stubs")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def installed() -> dict[str, str]:
    out = subprocess.run([*PIP, "list", "--format=json"], capture_output=True, text=True, check=True).stdout
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(out)}


def pip_check() -> set[str]:
    proc = subprocess.run([*PIP, "check"], capture_output=True, text=True)
    return {line.strip() for line in proc.stdout.splitlines() if line.strip() and "No broken" not in line}


def main() -> int:
    before = installed()
    missing_stack = [p for p in ("torch", "torch-neuronx", "torchtitan", "transformers") if p not in before]
    if missing_stack:
        print(f"install-trn2: {sys.executable} is not a Neuron training environment: "
              f"{', '.join(missing_stack)} not installed (activate the Neuron venv, or the container's "
              "python, first)", file=sys.stderr)
        return 2
    problems_before = pip_check()
    subprocess.run([*PIP, "install", "--quiet", "--no-deps", "-e", str(REPO)], check=True)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [d for d in deps if canonicalize_name(Requirement(d).name) not in before]
    if wanted:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("".join(f"{name}=={version}\n" for name, version in sorted(before.items())
                            if name != "qwen3-trn-conformance"))
        print(f"install-trn2: installing the suite's missing dependencies: {' '.join(wanted)} "
              f"(everything installed pinned: {f.name})")
        proc = subprocess.run([*PIP, "install", "--quiet", "-c", f.name, *wanted])
        if proc.returncode != 0:
            print("install-trn2: the missing dependencies do not install without changing what the "
                  "environment has; nothing was changed", file=sys.stderr)
            return 1
    after = installed()
    changed = [f"{p}: {before.get(p)} -> {after.get(p)}" for p in PROTECTED if before.get(p) != after.get(p)]
    if changed:
        print(f"install-trn2: a protected package changed: {'; '.join(changed)}", file=sys.stderr)
        return 1
    new_problems = pip_check() - problems_before
    if new_problems:
        print("install-trn2: pip check finds new problems:\n  " + "\n  ".join(sorted(new_problems)),
              file=sys.stderr)
        return 1
    kept = ", ".join(f"{p} {before[p]}" for p in PROTECTED if p in before)
    print(f"install-trn2: the suite is installed in {sys.prefix}; untouched: {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
