"""The stack inventory: exact versions of everything a contract result depends on.

Read from package metadata and the system (``neuron-ls``, dpkg, the driver's sysfs node),
never from a user flag. Also: whether torch is the build torch-neuronx requires, and whether
a Neuron package is a PyPI placeholder (its import raises "WRONG PACKAGE" or its module is
missing), which CONTRACTS.md "Version pinning" says the public index serves under the same
names.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.version import Version

from fixtures.tiers import stack
from fixtures.tiers.stack import deb_versions, neuron_driver_version
from fixtures.rank.titan.api import installed_summary

# Distribution -> the module it must provide.
NEURON_DISTRIBUTIONS = {
    "torch-neuronx": "torch_neuronx",
    "torchtitan-neuron": "torchtitan_neuron",
    "nki": "nki",
    "nkilib": "nkilib",
    "nki-library": "nkilib_src",  # the optional standalone NKI Library (PyPI 0.0.2 is empty)
    "neuronx-cc": "neuronxcc",
}


def torch_build() -> str:
    """CPU, CUDA x.y, ROCm x.y or Neuron, from torch's own metadata (not imported)."""
    version = stack.installed_version("torch")
    if version is None:
        return "not installed"
    if stack.installed_version("torch-neuronx"):
        return "Neuron (torch-neuronx installed)"
    local = version.split("+", 1)[1] if "+" in version else ""
    if local.startswith("cpu"):
        return "CPU"
    if local.startswith("rocm"):
        return f"ROCm ({local})"
    requires = metadata.requires("torch") or []
    if local.startswith("cu") or any(r.startswith("nvidia-") for r in requires):
        return f"CUDA ({local or 'default PyPI build'})"
    return f"unknown ({version})"


def editable_commit(dist: str) -> str | None:
    """The git commit of a distribution installed from a checkout (``pip install -e``)."""
    url = stack.direct_url(dist).get("url", "")
    if not url.startswith("file://") or shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", url[len("file://"):], "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or None


# CONTRACTS.md "Version pinning": the same names on PyPI "are placeholders whose import raises
# ImportError("WRONG PACKAGE ...") or fails to find the module".
PLACEHOLDER_MARK = "WRONG PACKAGE"


def placeholder_problem(dist: str, module: str) -> str | None:
    """Why an installed Neuron distribution is not the real package, or None if it is, read
    from the files, never imported: importing torch_neuronx may start the Neuron runtime, which
    "initializes all the cores present in the system and reserves them for the current process"
    (neuron-runtime/guides/configuration-guide.rst) where no NEURON_RT_VISIBLE_CORES is set, as
    in the pytest process: a check run there, or in a child of it, would take every free core
    from the ranks, the kernel worker or a neighbour (session detection reads metadata for the
    same reason: ``neuron_host.probe_torch_neuron``). A placeholder has no module, or a module
    whose source raises the WRONG PACKAGE error."""
    if stack.installed_version(dist) is None:
        return None  # not installed is a different finding
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(module)  # finds, does not execute, a top-level module
    except (ImportError, ValueError) as exc:
        return f"{dist}: its module {module!r} cannot be located ({exc})"
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        return f"{dist} is installed but its module {module!r} is missing (no such module): a PyPI placeholder?"
    source = Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    text = source.read_text(errors="replace") if source and source.is_file() else ""
    if PLACEHOLDER_MARK in text:
        line = next(line.strip() for line in text.splitlines() if PLACEHOLDER_MARK in line)
        return (f"{dist} is the PyPI placeholder ({source} raises on import: {line:.120}); install the real "
                "package from AWS's Neuron package index")
    return None


def torch_requirement_of(dist: str = "torch-neuronx") -> Requirement | None:
    if stack.installed_version(dist) is None:
        return None
    for raw in metadata.requires(dist) or []:
        req = Requirement(raw)
        if req.name == "torch" and req.marker is None:
            return req
    return None


def torch_mismatch(pinned: str | None) -> str | None:
    """Why the installed torch is not the one the stack needs, or None.

    On a Neuron stack the requirement comes from torch-neuronx itself; on the cpu stack
    from the suite's pin (``pinned``)."""
    installed = stack.installed_version("torch")
    if installed is None:
        return "torch is not installed"
    req = torch_requirement_of()
    if req is None and pinned is None:
        neuronx = stack.installed_version("torch-neuronx")
        return (f"torch-neuronx {neuronx} declares no unconditional torch requirement, so nothing says "
                f"which torch build it needs: torch {installed} cannot be checked" if neuronx else
                "torch-neuronx is not installed, and the stack pins no torch: nothing to check torch against")
    if req is not None:
        if not req.specifier.contains(Version(installed), prereleases=True):
            return (f"torch {installed} is installed but torch-neuronx "
                    f"{stack.installed_version('torch-neuronx')} requires {req}: a PyPI torch "
                    "replaced the Neuron build; reinstall the Neuron packages with "
                    "`pip install --no-deps` so pip keeps the Neuron torch")
        return None
    if pinned and installed != pinned:
        return f"torch {installed} is installed but the stack pins torch=={pinned}"
    return None


def torchtitan_origin() -> dict:
    """Where the installed torchtitan came from, by what is installed: a package index
    release, or a repository checkout (the Neuron fork is ``git clone ... && pip install
    -e .``, so it reports itself as ``torchtitan`` with upstream's version): its URL,
    commit, version label, and whether ``torchtitan_neuron`` is importable beside it."""
    import importlib.util

    try:
        dist = metadata.distribution("torchtitan")
    except metadata.PackageNotFoundError:
        return {"source": "not installed"}
    info = stack.direct_url("torchtitan")
    version = dist.version
    return {
        "source": "repository" if info.get("vcs_info") or info.get("dir_info", {}).get("editable")
        or "+" in version else "index",
        "version": version,
        "local_label": version.split("+", 1)[1] if "+" in version else None,
        "url": info.get("url"),
        "commit": (info.get("vcs_info") or {}).get("commit_id") or editable_commit("torchtitan"),
        "torchtitan_neuron_importable": importlib.util.find_spec("torchtitan_neuron") is not None,
    }


_NKILIB_PROBE = (
    "import json\n"
    "out = {}\n"
    "try:\n"
    "    import nkilib\n"
    "    out['module'] = nkilib.__name__\n"
    "    out['file'] = getattr(nkilib, '__file__', None)\n"
    "    try:\n"
    "        from nkilib.version import __version__ as version\n"
    "    except Exception:\n"
    "        version = None\n"
    "    out['version'] = version\n"
    "except Exception as exc:\n"
    "    out['error'] = f'{type(exc).__name__}: {exc}'\n"
    "print(json.dumps(out))\n"
)
FORCE_BUNDLED_ENV = "NKILIB_FORCE_BUNDLED_LIBRARY"


def _probe_nkilib(force_bundled: bool) -> dict:
    """What ``import nkilib`` gives, in a subprocess (as the ranks would import it)."""
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if force_bundled:
        env[FORCE_BUNDLED_ENV] = "1"
    proc = subprocess.run([sys.executable, "-c", _NKILIB_PROBE], capture_output=True, text=True,
                          timeout=300, env=env)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"the probe exited {proc.returncode}: {proc.stderr[-300:]}"}


def nkilib_finding(active: dict, bundled: dict, standalone_version: str | None,
                   force_bundled: str | None) -> dict:
    """Which nkilib the kernels get and whether it is the compiler's. neuronx-cc bundles
    ``nkilib``; an installed standalone ``nki-library`` (module ``nkilib_src.nkilib``)
    replaces it on import unless ``NKILIB_FORCE_BUNDLED_LIBRARY`` is truthy, and the Neuron
    docs warn it "isn't guaranteed to match your compiler version" (CONTRACTS.md)."""
    module = active.get("module")
    which = ("standalone nki-library" if module == "nkilib_src.nkilib" else
             "bundled in neuronx-cc" if module == "nkilib" else f"none ({active.get('error', 'not importable')})")
    problem = None
    if module == "nkilib_src.nkilib" and bundled.get("module") == "nkilib" \
            and bundled.get("version") != active.get("version"):
        problem = (f"the standalone nki-library {active.get('version')} is active but the compiler "
                   f"bundles nkilib {bundled.get('version')}: it isn't guaranteed to match the "
                   f"compiler; uninstall nki-library or set {FORCE_BUNDLED_ENV}=1")
    return {"active": which, "active_version": active.get("version"), "active_file": active.get("file"),
            "bundled_version": bundled.get("version") if bundled.get("module") == "nkilib" else None,
            "standalone_nki_library": standalone_version, "force_bundled": force_bundled,
            "mismatch": problem}


def nkilib_active() -> dict:
    """Probed at each call, never cached: the answer depends on the path the call sees (the
    dress rehearsal puts its stand-in nkilib on it after the session's first report write)."""
    import os

    active = _probe_nkilib(force_bundled=False)
    bundled = _probe_nkilib(force_bundled=True) if active.get("module") == "nkilib_src.nkilib" else active
    return nkilib_finding(active, bundled, stack.installed_version("nki-library"),
                          os.environ.get(FORCE_BUNDLED_ENV))


def pip_check_problems(python: str, allowed: tuple[tuple[str, str], ...] = ()) -> tuple[list[str], str]:
    """``pip check`` of the environment of ``python``: its complaints less the unmet
    requirements ``allowed`` names as (distribution, requirement), and its whole output."""
    import re

    proc = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    line = re.compile(r"^(\S+) \S+ requires (\S+), which is not installed\.$")
    problems = []
    for raw in text.splitlines():
        raw = raw.strip()
        if not raw or raw == "No broken requirements found.":
            continue
        m = line.match(raw)
        if m and (m.group(1).lower(), m.group(2).lower()) in allowed:
            continue
        problems.append(raw)
    return problems, text


# What ``scripts/install-trn2.sh`` found ``pip check`` report before it installed the suite, one
# problem a line, kept inside the environment (a copy of the venv, e.g. an upgrade's candidate,
# carries it): ``<prefix>/share/qwen3-trn-conformance/``.
SUITE_DISTRIBUTION = "qwen3-trn-conformance"


def pip_check_before_install(prefix: str | None = None) -> set[str]:
    """The problems the environment had before the suite was installed into it (empty where
    nothing was recorded: a venv the suite's own scripts built)."""
    from pathlib import Path

    path = Path(prefix or sys.prefix) / "share" / SUITE_DISTRIBUTION / "pip-check-before-install.txt"
    text = path.read_text() if path.is_file() else ""
    return {line.strip() for line in text.splitlines() if line.strip()}


def titan_api() -> dict:
    """The torchtitan API vintage detected by what the installed package offers (its version
    string does not say: upstream main was ``0.2.2`` for six months)."""

    return installed_summary()


def inventory() -> dict:
    found = stack.versions()
    return {
        "python": found["python"],
        "python_executable": sys.executable,
        "packages": {k: v for k, v in found.items() if k not in ("python", "torchtitan_build")},
        "torchtitan_build": found.get("torchtitan_build"),
        "torch_build": torch_build(),
        "torchtitan_neuron_commit": editable_commit("torchtitan-neuron"),
        "torchtitan_origin": torchtitan_origin(),
        "torchtitan_api": titan_api(),
        "nkilib": nkilib_active(),
        "system_packages": deb_versions(),
        "neuron_driver": neuron_driver_version(),
    }
