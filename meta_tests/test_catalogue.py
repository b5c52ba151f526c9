"""The run catalogue: a run that is not in it cannot be launched, and its entries are sound."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.runs.cache import NotInCatalogue, RunCache
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import DENSE_NATIVE, Catalogue, Entry
from fixtures.tiers.tier_profile import cpu_profile
from reports.plugin import areas

pytestmark = pytest.mark.meta


def test_a_run_not_in_the_catalogue_is_refused_before_any_launch(tmp_path):
    cache = RunCache(tmp_path / "runs", RunInputs(cpu_profile(), Assets(tmp_path), tmp_path))
    stray = dataclasses.replace(DENSE_NATIVE, steps=DENSE_NATIVE.steps + 1)
    with pytest.raises(NotInCatalogue, match="is not a run of the catalogue"):
        cache.get(stray)
    assert not cache.run_dir(stray).exists()
    assert cache.catalogue.entry_of(DENSE_NATIVE, cpu_profile()).name == "dense_native"


def test_entries_are_unique_and_say_why_they_need_not_train():
    with pytest.raises(ValueError, match="already has a run named"):
        Catalogue([Entry("a", lambda t: DENSE_NATIVE), Entry("a", lambda t: DENSE_NATIVE)])
    with pytest.raises(ValueError, match="says why"):
        Catalogue([Entry("b", lambda t: DENSE_NATIVE, trains=False)])



def test_every_contract_file_names_one_area_the_report_knows(request):
    """The report's areas are the markers pyproject.toml registers as areas (``<area>:
    contracts on ...``), so a new area cannot be missing from the report (a hand-kept list
    once lacked data, runs and training_loop: 29 contracts were "other")."""
    import ast
    from pathlib import Path


    known = set(areas(request.config))
    assert {"data", "runs", "training_loop", "rope", "topology"} <= known, known
    for path in sorted((Path(__file__).resolve().parent.parent / "conformance").glob("test_*.py")):
        marks = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                marks = {a.attr for a in ast.walk(node.value) if isinstance(a, ast.Attribute) and a.attr != "mark"}
        assert len(marks & known) == 1, f"{path.name}: area markers {sorted(marks & known)} of {sorted(marks)}"


def test_each_tier_has_one_performance_run_and_it_is_a_catalogue_entry(tmp_path):
    """The performance contracts read the one entry per tier marked ``measures_performance``
    (cpu: the pretraining run; trn2: the kernel run), not a name kept in the profile; a tier
    with none or two is refused with the entries named."""
    from fixtures.runs.catalogue import CATALOGUE, PRETRAIN, performance_run
    from meta_tests import qwen3_4b

    trn2 = qwen3_4b.trn2_tier(tmp_path)
    assert CATALOGUE.performance_run(cpu_profile()) == PRETRAIN
    assert CATALOGUE.performance_run(trn2) == performance_run(trn2)
    two = Catalogue([Entry("a", lambda t: DENSE_NATIVE, measures_performance=True),
                     Entry("b", lambda t: PRETRAIN, measures_performance=True)])
    with pytest.raises(ValueError, match=r"the cpu tier has 2 performance runs in the catalogue \(a, b\)"):
        two.performance_run(cpu_profile())
    with pytest.raises(ValueError, match=r"has 0 performance runs in the catalogue \(none\)"):
        Catalogue([Entry("a", lambda t: DENSE_NATIVE)]).performance_run(cpu_profile())
