"""Placeholder detection and the torch-build check, on stand-in distributions.

The stand-ins are throw-away packages installed into a temporary folder on sys.path: they
impersonate the *PyPI placeholders* (never the real Neuron packages), to show the detector
names them.
"""

from __future__ import annotations

import sys

import pytest

from fixtures.repo import REPO_ROOT as REPO
from reports import inventory
from fixtures.rank.titan import api as override_api
from fixtures.tiers import stack

pytestmark = pytest.mark.meta


def _fake_dist(root, dist: str, version: str, module: str | None, body: str = "",
               requires: tuple[str, ...] = ()):
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    if module:
        (root / f"{module}.py").write_text(body)


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("torch_neuronx", "nki"):
        sys.modules.pop(name, None)


def test_wrong_package_placeholder_is_named(site):
    _fake_dist(site, "torch-neuronx", "0.0.1", "torch_neuronx",
               'raise ImportError("WRONG PACKAGE: install torch-neuronx from the Neuron index")')
    problem = inventory.placeholder_problem("torch-neuronx", "torch_neuronx")
    assert problem is not None and "PyPI placeholder" in problem and "Neuron package index" in problem


def test_placeholder_without_module_is_named(site):
    _fake_dist(site, "nki", "0.0.1", None)
    problem = inventory.placeholder_problem("nki", "nki")
    assert problem is not None and "module 'nki' is missing" in problem


def test_pypi_torch_replacing_neuron_build_is_caught(site):
    _fake_dist(site, "torch-neuronx", "2.14.3.0", "torch_neuronx", requires=("torch==2.14.0",))
    problem = inventory.torch_mismatch(None)
    assert problem is not None
    assert "torch-neuronx 2.14.3.0 requires torch==2.14.0" in problem
    assert "pip install --no-deps" in problem


def test_a_torch_neuronx_without_a_torch_requirement_cannot_pass_the_torch_check(site):
    """Where the tier pins no torch (trn2), torch-neuronx's own requirement is the only
    yardstick: without one, the check fails instead of passing on nothing."""
    _fake_dist(site, "torch-neuronx", "2.14.3.0", "torch_neuronx", requires=("numpy",))
    problem = inventory.torch_mismatch(None)
    assert problem is not None and "declares no unconditional torch requirement" in problem


def test_not_installed_is_not_a_placeholder():
    assert inventory.placeholder_problem("torchtitan-neuron", "torchtitan_neuron") is None


def test_nkilib_finding_names_the_active_library_and_a_mismatch():
    """Bundled active: no finding. The standalone nki-library active (it replaced the bundled
    one on import) at another version than the compiler bundles: a mismatch naming both and
    the remedy. Nothing importable: said so, with the import error."""
    bundled = {"module": "nkilib", "version": "2.33.0", "file": "/x/neuronxcc/nkilib/__init__.py"}
    standalone = {"module": "nkilib_src.nkilib", "version": "0.1.0+gd4920de", "file": "/x/nkilib_src/nkilib/__init__.py"}
    found = inventory.nkilib_finding(bundled, bundled, "0.1.0+gd4920de", "1")
    assert found["active"] == "bundled in neuronx-cc" and found["mismatch"] is None
    assert found["force_bundled"] == "1"
    found = inventory.nkilib_finding(standalone, bundled, "0.1.0+gd4920de", None)
    assert found["active"] == "standalone nki-library"
    assert "0.1.0+gd4920de" in found["mismatch"] and "2.33.0" in found["mismatch"]
    assert "NKILIB_FORCE_BUNDLED_LIBRARY=1" in found["mismatch"]
    same = {**standalone, "version": "2.33.0"}
    assert inventory.nkilib_finding(same, bundled, "2.33.0", None)["mismatch"] is None
    found = inventory.nkilib_finding({"error": "ModuleNotFoundError: No module named 'nkilib'"}, {}, None, None)
    assert found["active"].startswith("none (ModuleNotFoundError")


def test_override_api_is_detected_by_its_signature_and_parser(monkeypatch):
    """The override API vintage comes from what torchtitan's override module offers: a
    positional ``name`` (the fork's vintage) and the ``module.function`` entry parser (0.3.0)."""
    import importlib
    import types


    def named(name, *, target, fqns=None, description="", exact=False): ...

    def unnamed(*, target, fqns=None, description="", exact=False): ...

    for fn, parser, expected in ((named, None, "override API: named, module imports"),
                                 (unnamed, lambda tokens: tokens,
                                  "override API: named by module.function, module.function imports with keyword arguments")):
        fake = types.SimpleNamespace(override=fn, **({"parse_cli_imports": parser} if parser else {}))
        monkeypatch.setattr(importlib, "import_module", lambda name, fake=fake: fake)
        try:  # the detection itself; detect() keeps its answer on disk (test_tier_modules.py)
            assert override_api._detect_by_import().describe().startswith(expected)
        finally:
            monkeypatch.undo()
    api = override_api.OverrideAPI(named=True, function_imports=False)
    assert api.entry("my_neuron_kernels", "nki_rope") == "my_neuron_kernels"
    assert api.logged_name("my_neuron_kernels", "nki_rope", "nki_rope") == "nki_rope"
    with pytest.raises(override_api.KwargsNotSupported):
        api.entry("m", "f", {"tag": "x"})
    api = override_api.OverrideAPI(named=False, function_imports=True)
    assert api.entry("m", "f", {"tag": "x"}) == 'm.f={"tag": "x"}'
    assert api.logged_name("my_neuron_kernels", "nki_rope", "nki_rope") == "my_neuron_kernels.nki_rope"


def test_nkilib_probe_sees_the_path_of_each_call(tmp_path, monkeypatch):
    """The active nkilib is probed with the path of each call, never a cached answer: the
    dress rehearsal puts its stand-in nkilib on the path after the session's first report."""
    assert inventory.nkilib_active()["active"].startswith("none")  # the cpu venv has no nkilib
    (tmp_path / "nkilib").mkdir()
    (tmp_path / "nkilib" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert inventory.nkilib_active()["active"] == "bundled in neuronx-cc"


def test_the_placeholder_check_never_imports_a_neuron_package(tmp_path, monkeypatch):
    """The check reads the package's files: importing torch_neuronx may start the Neuron
    runtime, which with no NEURON_RT_VISIBLE_CORES (the pytest process's case) reserves every
    core of the host (configuration-guide.rst), taking them from the ranks, the kernel worker
    or a neighbour. (It used to import the module in a subprocess with no core pinned.) A real
    package whose import would fail on busy cores is still not a placeholder."""
    marker = tmp_path / "imported"
    (tmp_path / "fake_neuron_mod.py").write_text(
        f"open({str(marker)!r}, 'w').write('the runtime started here')\n"
        "raise RuntimeError('NRT:nrt_allocate_neuron_cores Logical Neuron Core(s) not available')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(inventory.stack, "installed_version", lambda dist: "1.0")
    assert inventory.placeholder_problem("fake-neuron", "fake_neuron_mod") is None
    assert not marker.exists(), "the check imported the package"


def _fork_under_another_name(site) -> None:
    """A distribution named torchtitan-neuron whose files are the ``torchtitan`` package (the Neuron
    fork installed from its repository under a name of its own)."""
    info = site / "torchtitan_neuron-0.2.2+neuron.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchtitan-neuron\nVersion: 0.2.2+neuron.1\n")
    (site / "torchtitan").mkdir()
    (site / "torchtitan" / "__init__.py").write_text("")
    (info / "RECORD").write_text("torchtitan/__init__.py,,\ntorchtitan_neuron-0.2.2+neuron.1.dist-info/METADATA,,\n")


def test_a_fork_installed_under_another_name_is_found_by_what_it_provides(site, monkeypatch):
    """Packages are found by the module they provide: a fork named torchtitan-neuron that
    provides ``torchtitan`` is the stack's torchtitan, in the versions and stack id, and the trn2
    install does not refuse the environment as lacking torchtitan (it did)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("install_trn2", REPO / "scripts" / "install_trn2.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    _fork_under_another_name(site)
    monkeypatch.setattr(sys, "path", [str(site)])  # this environment's own torchtitan out of sight
    assert stack.provider("torchtitan") == "torchtitan-neuron"
    assert stack.versions(("torchtitan",))["torchtitan"] == "0.2.2+neuron.1"
    have = {"torch": "2.14.0", "torch-neuronx": "2.14.3.0", "transformers": "5.23.0",
            "torchtitan-neuron": "0.2.2+neuron.1"}
    assert install.missing_from(have) == []
    # torchtitan is the fork's: only what nothing provides is missing
    assert install.missing_from({"torch": "2.14.0"}) == ["torch-neuronx", "transformers"]
