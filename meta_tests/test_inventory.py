"""Placeholder detection and the torch-build check, on stand-in distributions.

The stand-ins are throw-away packages installed into a temporary folder on sys.path: they
impersonate the *PyPI placeholders* (never the real Neuron packages), to show the detector
names them.
"""

from __future__ import annotations

import sys

import pytest

from reports import inventory

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


def test_not_installed_is_not_a_placeholder():
    assert inventory.placeholder_problem("torchtitan-neuron", "torchtitan_neuron") is None
