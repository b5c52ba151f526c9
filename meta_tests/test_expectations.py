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
    # the fork's release label (TorchTitan Neuron 0.2.2+neuron.1) names its own file
    found = {"torch": "2.14.0", "torchtitan": "0.2.2+neuron.1", "python": "3.12.3"}
    assert stack.stack_id("trn2", found) == "trn2-torch2.14-titan0.2+neuron.1"
    # The committed files match this machine's installed stack and both forms of the fork.
    for name in (stack.stack_id("cpu"), "trn2-torch2.14-titan0.2", "trn2-torch2.14-titan0.2+neuron.1"):
        expectations.load(name)


def test_a_stack_without_an_expectations_file_is_a_usage_error_naming_it(pytester):
    """A stack whose expectations nobody reviewed cannot run as if it had none: the session
    stops at collection naming the file it looked for (every tier alike)."""
    pytester.makepyfile(test_sample=TESTS)
    empty = pytester.mkdir("no-expectations")
    result = pytester.runpytest("-p", "fixtures.expectations", "--expectations-dir", str(empty))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*no expectations file for the stack {stack.stack_id('cpu')}*"
                                 f"{stack.stack_id('cpu')}.txt does not exist*"])
