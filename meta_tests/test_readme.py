"""The README is a map that cannot drift: its generated tables are what the markers and the
expectation files say today, the two fresh-machine commands come first, and every file it
points to exists."""

from __future__ import annotations

import re

import pytest

from fixtures.rank.probes import registry
from fixtures.rank.probes.spec import specs_of
from reports import readme_tables
from reports.readme_tables import REPO

pytestmark = pytest.mark.meta

README = (REPO / "README.md").read_text()


def test_generated_tables_are_current():
    for path, generated in readme_tables.every_block().items():
        text = (REPO / path).read_text()
        assert readme_tables.rewrite(text, generated) == text, (
            f"{path}'s generated tables are stale: python -m reports.readme_tables --write")


def test_the_probe_table_lists_every_probe_module_and_file():
    """A probe module not in the registry never runs; the docs' table comes from the registry:
    every module of the package with a ``Writer`` is registered, and each of its files is a row."""
    modules = {p.stem for p in (REPO / "fixtures" / "rank" / "probes").glob("*.py")
               if "class Writer(Base)" in p.read_text()}
    assert modules == set(registry.NAMES), modules ^ set(registry.NAMES)
    rows = readme_tables.probes_table()[2:]
    assert len(rows) == sum(len(specs_of(m)) for m in registry.PROBES)
    assert any("`parallel`" in r and "`test_topology.py`" in r for r in rows)  # read-by is found


def test_the_two_commands_come_first_and_ci_runs_the_second():
    first_block = README.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines() if line.strip()
                and not line.strip().startswith("#")]
    assert commands == ["bash scripts/conformance.sh", "bash scripts/selftest.sh"]
    assert "bash scripts/selftest.sh" in (REPO / ".ci" / "run").read_text()


def test_the_readme_is_short_and_names_only_files_that_exist():
    assert len(README.splitlines()) < 250
    named = set(re.findall(r"`((?:docs|fixtures|reports|conformance|scripts|benchmarks|meta_tests)/[\w./-]+)`", README))
    missing = [p for p in sorted(named) if "<" not in p and not (REPO / p).exists()]
    assert not missing, missing


def test_every_area_marker_has_a_contract_file():
    rows = readme_tables.areas_table()
    assert {m for m in readme_tables.area_markers()} <= {r.split("`")[1] for r in rows[2:]}
