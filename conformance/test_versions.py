"""Version contracts: the installed stack is consistent, recorded, and the real thing.

Facts: CONTRACTS.md "Version pinning". The write-up says to pin versions but has no version
table; it says to install with ``--no-deps`` so pip keeps the Neuron build of torch, yet
shows ``pip install -r requirements.txt``. Neuron packages come from AWS's own index; the
same names on PyPI are placeholders whose import raises "WRONG PACKAGE" or finds no module.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures import stack
from fixtures.contract import expect, expect_equal
from reports import inventory

pytestmark = pytest.mark.versions

# What each tier's stack pins torch to when torch-neuronx does not say (cpu: pyproject).
CPU_TORCH_PIN = "2.14.1"
TIER_PACKAGES = {
    "cpu": ("torch", "torchtitan", "transformers"),
    "trn2": ("torch", "torch-neuronx", "torchtitan", "torchtitan-neuron", "transformers", "nki",
             "nkilib", "neuronx-cc"),
}


def test_pip_check_is_clean(platform):
    """``pip check``: every installed distribution's requirements are satisfied."""
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    expect_equal(proc.returncode, 0, "pip check reports no broken requirement",
                 detail=proc.stdout + proc.stderr)


def test_tier_packages_installed(platform):
    """Every package the tier's contracts depend on is installed and has an exact version."""
    found = stack.versions()
    missing = [name for name in TIER_PACKAGES[platform.name] if not found.get(name)]
    expect_equal(missing, [], f"the {platform.name} stack is complete")


def test_torch_is_the_required_build(platform):
    """The installed torch is the one the stack needs: on trn2 the version torch-neuronx
    itself requires (a PyPI torch that replaced the Neuron build is caught, with the
    ``--no-deps`` remedy); on cpu the suite's pin."""
    problem = inventory.torch_mismatch(None if platform.name == "trn2" else CPU_TORCH_PIN)
    expect(problem is None, "torch is the build the stack requires", "no mismatch", problem)
    if platform.name == "trn2":
        expect(inventory.torch_requirement_of() is not None,
               "torch-neuronx declares the torch it needs", "a torch requirement", None)


def test_no_placeholder_neuron_package(platform):
    """No Neuron distribution is a PyPI placeholder (import raises "WRONG PACKAGE" or the
    module is missing)."""
    problems = [p for dist, module in inventory.NEURON_DISTRIBUTIONS.items()
                if (p := inventory.placeholder_problem(dist, module))]
    expect_equal(problems, [], "every installed Neuron package is the real one")


def test_inventory_records_exact_versions(platform):
    """The inventory names every tracked package with its exact version (or not installed),
    Python, and torch's build; on trn2 also the Neuron runtime and driver."""
    inv = inventory.inventory()
    expect_equal(sorted(inv["packages"]), sorted(stack.TRACKED), "every tracked package is listed")
    for name in TIER_PACKAGES[platform.name]:
        expect(bool(inv["packages"][name]) and inv["packages"][name][0].isdigit(),
               f"{name} has an exact version", "a version", inv["packages"][name])
    expect(inv["torch_build"] not in ("not installed",) and not inv["torch_build"].startswith("unknown"),
           "torch's build is identified", "CPU / CUDA / Neuron", inv["torch_build"])
    if platform.name == "trn2":
        expect(inv["neuron_driver"] is not None, "the Neuron driver version is recorded", "a version", None)
        expect(inv["system_packages"]["aws-neuronx-runtime-lib"] is not None,
               "the Neuron runtime version is recorded", "a version", None)
