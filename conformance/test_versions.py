"""Version contracts: the installed stack is consistent, recorded, and the real thing.

Facts: CONTRACTS.md "Version pinning". The write-up says to pin versions but has no version
table; it says to install with ``--no-deps`` so pip keeps the Neuron build of torch, yet
shows ``pip install -r requirements.txt``. Neuron packages come from AWS's own index; the
same names on PyPI are placeholders whose import raises "WRONG PACKAGE" or finds no module.
"""

from __future__ import annotations

import sys

import pytest

from fixtures.tiers import tier_profile
from fixtures.tiers import stack
from fixtures.contract import expect, expect_equal
from reports import inventory

pytestmark = pytest.mark.versions


def test_pip_check_is_clean(tier, record_property):
    """``pip check``: every installed distribution's requirements are satisfied, except the
    ones the tier profile allows by name (cpu: nki-library's Neuron-only neuronx-cc,
    neuronx-cc-stubs and nki, which its pure-torch reference does not need) and the ones the
    environment had before the suite was installed into it (``install-trn2.sh`` records them:
    a Neuron environment may ship them, e.g. a torch-xla beside a CPU torch), which are listed,
    not judged: the contract judges what the suite or the stack under test changed. A problem
    recorded before that reads differently now (a package moved) is judged."""
    unexpected, output = inventory.pip_check_problems(sys.executable, tier.unmet_requirements_allowed)
    before = inventory.pip_check_before_install()
    if before:
        record_property("pip check: the environment's own, there before the suite's install",
                        "; ".join(sorted(before)))
    expect_equal("pip check reports no broken requirement but the allowed ones and the environment's own",
                 [], [p for p in unexpected if p not in before],
                 detail=output + (f"\nthere before the suite's install (not judged): {sorted(before)}" if before else ""))


def test_tier_packages_installed(tier):
    """Every package the tier's stack needs (the tier profile's list) is installed with an
    exact version. The Neuron fork of torchtitan is installed from its repository and
    reports itself as ``torchtitan``: no ``torchtitan-neuron`` distribution is required."""
    found = stack.versions()
    missing = [name for name in tier.packages if not found.get(name)]
    expect_equal(f"the {tier.name} stack is complete", [], missing)


def test_torch_is_the_required_build(tier, stack_pins):
    """The installed torch is the one the stack being checked needs: its pin (the tier's, or
    during an upgrade the candidate's set, ``--stack-constraints``: the pin moves with the
    candidate), or where the tier pins none (trn2) the version torch-neuronx itself requires
    (a PyPI torch that replaced the Neuron build is caught, with the ``--no-deps`` remedy). A
    torch-neuronx that declares no torch requirement fails it: then nothing says which torch
    is right."""
    problem = inventory.torch_mismatch(stack_pins.get("torch", tier.torch_pin) if tier.torch_pin else None)
    expect(problem is None, "torch is the build the stack requires", "no mismatch", problem)


def test_no_placeholder_neuron_package():
    """No Neuron distribution is a PyPI placeholder (import raises "WRONG PACKAGE" or the
    module is missing)."""
    problems = [p for dist, module in inventory.NEURON_DISTRIBUTIONS.items()
                if (p := inventory.placeholder_problem(dist, module))]
    expect_equal("every installed Neuron package is the real one", [], problems)


@pytest.mark.only_tiers("trn2", reason="nkilib ships inside neuronx-cc, which exists only on a Neuron host")
def test_active_nkilib_is_the_compilers():
    """On a Neuron host the kernels get an nkilib (bundled in neuronx-cc, or the standalone
    nki-library that replaces it on import unless ``NKILIB_FORCE_BUNDLED_LIBRARY`` is set),
    and a standalone one that is active matches the version the compiler bundles (the
    Neuron docs: the standalone package "isn't guaranteed to match your compiler version")."""
    found = inventory.nkilib_active()
    expect(not found["active"].startswith("none"), "an nkilib is importable", "bundled or standalone",
           found["active"])
    expect(found["mismatch"] is None, "the active nkilib is the compiler's", "no mismatch", found["mismatch"],
           detail=str(found))


def test_inventory_records_exact_versions(tier):
    """The inventory names every tracked package with its exact version (or not installed),
    Python, torch's build, and where torchtitan came from (a release, or a repository
    checkout such as the Neuron fork: its URL, commit and version label)."""
    inv = inventory.inventory()
    expect_equal("every tracked package is listed", sorted(stack.TRACKED), sorted(inv["packages"]))
    for name in tier.packages:
        expect(bool(inv["packages"][name]) and inv["packages"][name][0].isdigit(),
               f"{name} has an exact version", "a version", inv["packages"][name])
    expect(inv["torch_build"] not in ("not installed",) and not inv["torch_build"].startswith("unknown"),
           "torch's build is identified", "CPU / CUDA / Neuron", inv["torch_build"])
    expect(inv["torchtitan_origin"]["source"] in ("index", "repository"),
           "torchtitan's origin is identified", "index or repository", inv["torchtitan_origin"])


@pytest.mark.only_tiers("trn2", reason=tier_profile.NEURON_SYSTEM + " are recorded only on a Neuron host")
@pytest.mark.not_rehearsed("the rehearsal has no Neuron driver or runtime to record")
def test_inventory_records_the_neuron_system():
    """On a Neuron host the inventory records the Neuron driver and runtime versions."""
    inv = inventory.inventory()
    expect(inv["neuron_driver"] is not None, "the Neuron driver version is recorded", "a version", None)
    expect(inv["system_packages"]["aws-neuronx-runtime-lib"] is not None,
           "the Neuron runtime version is recorded", "a version", None)
