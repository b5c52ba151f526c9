"""The expectations plugin: listed tests become strict xfails; stale lines are warned about."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fixtures.session import expectations
from fixtures.tiers import stack
from reports import write_expectations
from reports.pins import NotTrusted, trusted
from reports.session_report import ContractRecord, ExpectationSourceRecord, SessionReport

pytestmark = pytest.mark.meta

TESTS = """
def test_known_deviation():
    assert 1 == 2, "upstream behaves differently"

def test_fixed_upstream():
    assert True

def test_unlisted():
    assert True
"""


def _session(pytester, tests: str, lines: list[str]) -> tuple[str, ...]:
    """A throw-away session of the test file ``tests`` with the expectation ``lines`` for this
    stack: the arguments that run it under the expectations plugin."""
    pytester.makepyfile(test_sample=tests)
    pytester.makeini("[pytest]\n")  # the throw-away session's own rootdir, not this repo's
    directory = pytester.mkdir("exp")
    (directory / f"{stack.stack_id('cpu')}.txt").write_text("\n".join(lines) + "\n")
    return ("-p", "fixtures.session.expectations", "--expectations-dir", str(directory))


def test_listed_failure_is_xfail_and_listed_pass_fails(pytester):
    args = _session(pytester, TESTS, [
        "# comment",
        "test_sample.py::test_known_deviation | upstream differs | https://example.invalid/1 | failure: AssertionError: upstream behaves differently",
        "test_sample.py::test_fixed_upstream | was broken | https://example.invalid/2 | failure: was broken",
    ])
    result = pytester.runpytest(*args, "-rxX")
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
    out = result.stdout.str()
    assert "[XPASS(strict)] known deviation" in out and "was broken" in out, out
    result.stdout.fnmatch_lines(["*XFAIL*test_known_deviation*upstream differs*"])


DIFFERENT = """
import os

def test_known_deviation():
    if os.environ.get("BREAK_DIFFERENTLY"):
        raise RuntimeError("torchrun exited -9: rank 0 killed at start-up")
    assert 1 == 2, "upstream behaves differently"
"""


def test_a_deviation_that_fails_differently_is_a_failure_naming_both(pytester, monkeypatch):
    """A listed test that fails, but not as recorded (here: its run killed at start-up), is no
    longer the deviation holding: red, with the recorded signature and the new failure."""
    args = _session(pytester, DIFFERENT, [
        "test_sample.py::test_known_deviation | upstream differs | https://example.invalid/1 | "
        "failure: AssertionError: upstream behaves differently"])
    pytester.runpytest(*args, "-rxXf").assert_outcomes(xfailed=1)
    monkeypatch.setenv("BREAK_DIFFERENTLY", "1")
    result = pytester.runpytest(*args, "-rxXf")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "known deviation failed differently" in out and "AssertionError: upstream behaves differently" in out, out
    assert "RuntimeError: torchrun exited -9: rank 0 killed at start-up" in out, out


def test_a_deviation_not_measured_yet_holds_for_any_failure(pytester, monkeypatch):
    """Only a deviation nobody has seen fail (expected from the docs) says ``(not measured)``."""
    args = _session(pytester, DIFFERENT, [
        "test_sample.py::test_known_deviation | expected, not measured | https://example.invalid/1 | "
        "failure: (not measured)"])
    monkeypatch.setenv("BREAK_DIFFERENTLY", "1")
    pytester.runpytest(*args).assert_outcomes(xfailed=1)


def test_line_naming_no_test_is_warned(pytester):
    args = _session(pytester, TESTS, [
        "test_sample.py::test_renamed_away | gone | https://example.invalid/3 | failure: gone",
    ])
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*expectation*test_renamed_away*matches no collected test*"])


@pytest.mark.parametrize("line", [
    "test_x.py::test_a | no link",
    "test_x.py::test_a | no signature | https://example.invalid",
    "test_x.py::test_a | a signature without its prefix | https://example.invalid | AssertionError",
    "test_x.py::test_a | not a regex | https://example.invalid | failure: (unclosed",
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
    result = pytester.runpytest("-p", "fixtures.session.expectations", "--expectations-dir", str(empty))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*no expectations file for the stack {stack.stack_id('cpu')}*"
                                 f"{stack.stack_id('cpu')}.txt does not exist*"])


def test_a_stack_nobody_has_seen_runs_on_the_nearest_stacks_expectations(pytester):
    """The first session on a stack with no file of its own (a real Neuron release's labels are
    unknown until then) runs: the nearest known stack of its tier lends its deviations, each
    xfail naming the inheritance, and the header says so."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_sample=TESTS)
    directory = pytester.mkdir("exp")
    (directory / "cpu-torch0.1-titan9.9.txt").write_text(
        "test_sample.py::test_known_deviation | upstream differs | https://example.invalid/1 | failure: upstream\n")
    (directory / "trn2-torch0.1-titan9.9.txt").write_text("")
    result = pytester.runpytest("-p", "fixtures.session.expectations", "--expectations-dir", str(directory), "-rx")
    result.assert_outcomes(passed=2, xfailed=1)
    out = result.stdout.str()
    assert f"{stack.stack_id('cpu')}, inherited from cpu-torch0.1-titan9.9 (no file of its own" in out, out


def test_the_nearest_stack_shares_the_tier_then_torchtitan_then_torch():
    """trn2 never inherits from cpu; the same torchtitan label, then its build family (the
    Neuron fork's next release), win over the same torch."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        for name in ("cpu-torch2.14-titan0.2+neuron.1", "trn2-torch2.14-titan0.2", "trn2-torch2.9-titan0.2+neuron.1",
                     "rehearsal-trn2-torch2.14-titan0.3"):
            (Path(d) / f"{name}.txt").write_text("")
        assert expectations.nearest_stack("trn2-torch2.10-titan0.2+neuron.3", Path(d)) == \
            "trn2-torch2.9-titan0.2+neuron.1"
        assert expectations.nearest_stack("trn2-torch2.14-titan0.2+neuron.1", Path(d)) == \
            "trn2-torch2.9-titan0.2+neuron.1"
        assert expectations.nearest_stack("trn2-torch2.14-titan0.3", Path(d)) == "trn2-torch2.14-titan0.2"
        assert expectations.nearest_stack("cpu-torch2.15-titan0.3", Path(d)) == "cpu-torch2.14-titan0.2+neuron.1"
        assert expectations.nearest_stack("trn3-torch2.9-titan0.2", Path(d)) is None


def test_an_inherited_session_is_not_trusted_and_writes_its_own_file(tmp_path):
    """reports.pins refuses a session that applied another stack's expectations, and
    reports.write_expectations turns it into the stack's own file: held deviations kept,
    XPASSes left out, failures listed for review."""
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    (exp_dir / "trn2-torch2.9-titan0.2.txt").write_text(
        "conformance/test_a.py::test_held[trn2] | differs | https://example.invalid/1 | failure: differs\n"
        "conformance/test_a.py::test_fixed[trn2] | was broken | https://example.invalid/2 | failure: (not measured)\n")
    source = ExpectationSourceRecord(stack="trn2-torch2.9-titan0.2+neuron.3", how="nearest",
                                     file_stack="trn2-torch2.9-titan0.2", inherited_from="trn2-torch2.9-titan0.2")
    report = SessionReport(session="s1", complete=True, expectations={"trn2": source}, contracts=(
        ContractRecord("conformance/test_a.py::test_held[trn2]", "xfailed", tier="trn2"),
        ContractRecord("conformance/test_a.py::test_fixed[trn2]", "xpassed", tier="trn2"),
        ContractRecord("conformance/test_a.py::test_new[trn2]", "failed", tier="trn2",
                       message="E   AssertionError: contract x\nmore")))
    with pytest.raises(NotTrusted, match="another stack's expectations"):
        trusted(replace(report, contracts=report.contracts[:1]))
    run = tmp_path / "run"
    run.mkdir()
    report.write(run / "report.json")
    assert write_expectations.main([str(run), "--expectations-dir", str(exp_dir)]) == 0
    written = (exp_dir / "trn2-torch2.9-titan0.2+neuron.3.txt").read_text()
    assert "conformance/test_a.py::test_held[trn2] | differs | https://example.invalid/1 | failure: differs" in written
    assert "# no longer deviates on this stack (XPASS), left out: conformance/test_a.py::test_fixed[trn2]" in written
    assert "# FAILED on this stack, review" in written and "AssertionError: contract x" in written
    parsed = expectations.parse(exp_dir / "trn2-torch2.9-titan0.2+neuron.3.txt")  # a valid file
    assert {k: (e.reason, e.link) for k, e in parsed.items()} == {
        "conformance/test_a.py::test_held[trn2]": ("differs", "https://example.invalid/1")}
    assert write_expectations.main([str(run), "--expectations-dir", str(exp_dir)]) == 2  # never overwrites


# Added after mutation testing (benchmarks/mutation.md): each kills mutants of
# fixtures/session/expectations.py that the tests above let survive.


def test_a_signature_may_hold_the_separator_and_each_line_knows_its_place(tmp_path):
    """A line splits into its four fields at the first three " | ": a signature may hold " | "
    itself (a regex alternation). Each expectation names its file and line; a node id listed
    twice is refused, naming the second line."""
    path = tmp_path / "s.txt"
    path.write_text("# header\n\ntest_x.py::test_a | r | https://example.invalid | failure: lost peer | killed\n")
    [exp] = expectations.parse(path).values()
    assert (exp.nodeid, exp.reason, exp.link, exp.signature, exp.source) == (
        "test_x.py::test_a", "r", "https://example.invalid", "lost peer | killed", "s.txt:3")
    assert exp.measured and exp.holds_for("RuntimeError: rank 1 killed by SIGKILL")
    assert not exp.holds_for("AssertionError: something else")
    path.write_text("test_x.py::test_a | r | l | failure: a\ntest_x.py::test_a | r2 | l | failure: b\n")
    with pytest.raises(expectations.ExpectationFileError, match=r"^s\.txt:2: test_x\.py::test_a listed twice$"):
        expectations.parse(path)


SKIPS = """
import pytest

def test_skips_here():
    pytest.skip("not on this machine")

@pytest.mark.xfail(reason="its own mark")
def test_own_xfail():
    assert False
"""


def test_a_listed_test_that_skips_and_an_unlisted_xfail_are_pytests_own(pytester):
    """The plugin judges only a listed test's xfail: a listed test that skips itself is
    skipped, an unlisted test's own xfail mark is honoured; neither is the plugin's error."""
    args = _session(pytester, SKIPS, [
        "test_sample.py::test_skips_here | upstream differs | https://example.invalid/1 | failure: never seen"])
    result = pytester.runpytest(*args)
    result.assert_outcomes(skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
