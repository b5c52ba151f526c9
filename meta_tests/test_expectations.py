"""The expectations plugin: listed tests become strict xfails; stale lines are warned about."""

from __future__ import annotations

import pytest

from fixtures import expectations, stack

pytestmark = pytest.mark.meta

TESTS = """
def test_known_deviation():
    assert 1 == 2, "upstream behaves differently"

def test_fixed_upstream():
    assert True

def test_unlisted():
    assert True
"""


def _write_expectations(pytester, lines):
    pytester.makeini("[pytest]\n")  # the throw-away session's own rootdir, not this repo's
    directory = pytester.mkdir("exp")
    (directory / f"{stack.stack_id('cpu')}.txt").write_text("\n".join(lines) + "\n")
    return directory


def test_listed_failure_is_xfail_and_listed_pass_fails(pytester):
    pytester.makepyfile(test_sample=TESTS)
    directory = _write_expectations(pytester, [
        "# comment",
        "test_sample.py::test_known_deviation | upstream differs | https://example.invalid/1",
        "test_sample.py::test_fixed_upstream | was broken | https://example.invalid/2",
    ])
    result = pytester.runpytest("-p", "fixtures.expectations", "--expectations-dir", str(directory), "-rxX")
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
    out = result.stdout.str()
    assert "[XPASS(strict)] known deviation" in out and "was broken" in out, out
    result.stdout.fnmatch_lines(["*XFAIL*test_known_deviation*upstream differs*"])


def test_line_naming_no_test_is_warned(pytester):
    pytester.makepyfile(test_sample=TESTS)
    directory = _write_expectations(pytester, [
        "test_sample.py::test_renamed_away | gone | https://example.invalid/3",
    ])
    result = pytester.runpytest("-p", "fixtures.expectations", "--expectations-dir", str(directory))
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*expectation*test_renamed_away*matches no collected test*"])


@pytest.mark.parametrize("line", [
    "test_x.py::test_a | no link",
    "test_x.py::test_a |  | https://example.invalid",
    "just a node id",
])
def test_malformed_line_is_rejected(tmp_path, line):
    path = tmp_path / "s.txt"
    path.write_text(line + "\n")
    with pytest.raises(expectations.ExpectationFileError, match="s.txt:1"):
        expectations.parse(path)


def test_stack_id_comes_from_installed_versions():
    found = {"torch": "2.14.1", "torchtitan": "0.3.0", "python": "3.11.7"}
    assert stack.stack_id("cpu", found) == "cpu-torch2.14-titan0.3"
    # the Neuron fork, an editable checkout reporting upstream's version
    found = {"torch": "2.14.0+neuron", "torchtitan": "0.2.2", "torchtitan_build": None, "python": "3.12.3"}
    assert stack.stack_id("trn2", found) == "trn2-torch2.14-titan0.2"
    # upstream main at the fork's vintage: from the wheelhouse (local label) or the git URL
    found = {"torch": "2.14.1", "torchtitan": "0.2.2+git5059f32", "python": "3.11.7"}
    assert stack.stack_id("cpu", found) == "cpu-torch2.14-titan0.2+git5059f32"
    found = {"torch": "2.14.1", "torchtitan": "0.2.2", "torchtitan_build": "git5059f32", "python": "3.11.7"}
    assert stack.stack_id("cpu", found) == "cpu-torch2.14-titan0.2+git5059f32"
    # The committed reference file matches this machine's installed stack.
    assert (expectations.EXPECTATIONS_DIR / f"{stack.stack_id('cpu')}.txt").exists()
