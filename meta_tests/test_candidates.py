"""Every candidate form the upgrade check takes, and the one-line usage error for the rest."""

from __future__ import annotations

import json
import subprocess

import pytest

from upgrades import candidates
from upgrades.candidates import CandidateUsageError, parse
from upgrades.stacks import REPO
from upgrades import check as upgrade
from upgrades import candidate_env

pytestmark = pytest.mark.meta

WHEELS = REPO.parent / "shared" / "wheels"


def test_an_index_release():
    c = parse("Transformers==5.24.0")
    assert (c.kind, c.name, c.version, c.install) == ("index", "transformers", "5.24.0", ("Transformers==5.24.0",))


@pytest.mark.skipif(not WHEELS.is_dir(), reason="needs ../shared/wheels (CI and the dev machines have it)")
def test_a_wheel_file_names_its_commit():
    wheel = next(WHEELS.glob("torchtitan-0.2.2+gitb5bcd76-*.whl"))
    c = parse(str(wheel))
    assert (c.kind, c.name, c.version, c.commit) == ("wheel", "torchtitan", "0.2.2+gitb5bcd76", "b5bcd76")
    assert c.install == (str(wheel.resolve()),)


def test_a_git_reference_must_name_a_commit():
    c = parse("torchtitan @ git+https://github.com/pytorch/torchtitan@b5bcd76c6")
    assert (c.kind, c.name, c.commit) == ("direct", "torchtitan", "b5bcd76c6")
    with pytest.raises(CandidateUsageError, match="must name a commit"):
        parse("torchtitan @ git+https://github.com/pytorch/torchtitan@main")


def test_a_checkout_is_installed_editable_with_its_commit_and_date(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "TorchTitan"\nversion = "0.2.2"\n')
    git = ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x", "--date", "2026-08-21T12:00:00+00:00"], check=True,
                   env={"GIT_COMMITTER_DATE": "2026-08-21T12:00:00+00:00", "PATH": "/usr/bin:/bin"})
    c = parse(str(tmp_path))
    assert (c.kind, c.name, c.install) == ("checkout", "torchtitan", ("-e", str(tmp_path.resolve())))
    assert len(c.commit) == 40 and c.date.startswith("2026-08-21")
    assert "local checkout, editable" in c.describe()


@pytest.mark.parametrize("text, says", [
    ("torchtitan>=0.3", "a range is not a stack"),
    ("torchtitan", "a range is not a stack"),
    ("missing-0.1-py3-none-any.whl", "no such wheel file"),
    ("not a requirement !!", "is not a requirement"),
])
def test_anything_else_is_one_usage_line(text, says):
    with pytest.raises(CandidateUsageError, match=says) as err:
        parse(text)
    assert "\n" not in str(err.value)


def test_a_neuron_release_set_file():
    found = candidates.from_set_file(REPO / "reports" / "baselines" / "trn2-neuron-2.33.0.pins.json")
    pins = json.loads((REPO / "reports" / "baselines" / "trn2-neuron-2.33.0.pins.json").read_text())["packages"]
    assert {(c.name, c.version) for c in found} == {(n, v) for n, v in pins.items()}
    assert all(c.kind == "index" for c in found)


def test_the_upgrade_command_exits_2_with_one_line_on_bad_input(capsys):
    assert upgrade.main(["--candidate", "torchtitan>=0.3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a range is not a stack" in err[0] and "Traceback" not in err[0]


# pip 25's output of `pip install torch==2.15.0` under a configured constraint torch<=2.14.1,
# as printed on this machine (stderr's ERROR lines; the resolver's block is on stdout).
PIP_CONFLICT_STDOUT = """Looking in indexes: https://pypi.org/simple

The conflict is caused by:
    The user requested torch==2.15.0
    The user requested (constraint) torch<=2.14.1

To fix this you could try to:
1. loosen the range of package versions you've specified
"""
PIP_CONFLICT_STDERR = """ERROR: Cannot install torch==2.15.0 because these package versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def test_a_not_built_candidate_keeps_pips_reason_and_names_the_configured_constraint(monkeypatch, tmp_path):
    """The NOT BUILT page's message carries pip's "The conflict is caused by" block (stdout)
    and, when a constraint blocks, the constraint files pip's own configuration applies."""

    monkeypatch.setattr(candidate_env, "pip_constraints", lambda python: ["/etc/corp/pip-constraints.txt"])
    text = candidate_env.pip_failure(PIP_CONFLICT_STDOUT, PIP_CONFLICT_STDERR, tmp_path / "python")
    assert "The user requested (constraint) torch<=2.14.1" in text
    assert "Cannot install torch==2.15.0" in text
    assert "from its configuration: /etc/corp/pip-constraints.txt" in text and "PIP_CONSTRAINT=/dev/null" in text
    assert "To fix this" not in text
