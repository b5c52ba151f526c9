"""The upgrade check's logic on synthetic report pairs (no installs), its candidate
environment helpers, and one real candidate built and run end to end on a cheap selection.
Reports are built with the records' constructors (``meta_tests.records``)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.session.expectations import DIFFERENTLY
from fixtures.tiers import pins, stack
from fixtures.tiers.tier_profile import cpu_profile
from meta_tests.records import session as _report
from meta_tests.records import with_contract, with_measured
from reports.run_record import LaunchRecord, RootCauseRecord, RunRecord, StepRecord
from reports.session_report import MachineRecord, PreflightFinding, SessionReport, SuiteIdentity
from upgrades import bisect_packages, candidate_env, causes, check, page, promotion, sessions
from upgrades import compare as upgrade_compare
from upgrades import matrix as upgrade_matrix
from upgrades.candidate_env import Change
from upgrades.candidates import Candidate
from upgrades.comparison import Comparison, FailureGroup, HeldDeviation, Today
from upgrades.perf_compare import Verdict
from upgrades.performance_check import rehearsal_options
from upgrades.result import BisectFindings, PerformanceCheck, UpgradeResult
from upgrades.sessions import describe_selection
from upgrades.stacks import DEFAULT_STACK, REPO, STACKS
from upgrades.verdict import ContractVerdict, Finding, Outcome, Owner

pytestmark = pytest.mark.meta

CHANGES = (Change("transformers", "5.23.0", "5.24.0", "candidate"), Change("httpx2", None, "2.16.2", "transitive"))
CPU = ("conformance", "-m", "cpu")


def _page(comparison: Comparison, **result) -> str:
    """The upgrade page of a comparison, as the check renders it."""
    return page.render(UpgradeResult(comparison, **{"selection": (), "candidates": (), "partial": False, **result}),
                       title="t")


def _categories(result: Comparison) -> dict[str, str]:
    return {c.nodeid: c.category for c in result.contracts}


def test_every_outcome_change_is_categorized():
    base = _report({"a": "passed", "b": "xfailed", "c": "passed", "d": "failed", "e": "passed", "f": "passed",
                    "h": "xfailed", "i": "xfailed"})
    cand = _report({"a": "passed", "b": "xpassed", "c": "failed", "d": "passed", "e": "skipped", "g": "passed",
                    "h": "passed", "i": "xfailed"})
    result = upgrade_compare.compare(base, cand, CHANGES)
    # h: a candidate with an expectations file of its own that no longer lists the deviation
    assert _categories(result) == {"a": "unchanged", "b": "upstream fixed", "c": "newly failing", "d": "newly passing",
                                   "e": "newly skipped", "f": "missing", "g": "new", "h": "upstream fixed",
                                   "i": "unchanged"}
    assert [c.nodeid for c in result.still_holding] == ["i"]
    by = {c.nodeid: c for c in result.contracts}
    assert by["c"].repro_bundle == "/r/c"
    assert by["b"].expectation.startswith("cpu-torch2.14-titan0.3.txt:")
    assert result.verdict.problems == ("1 newly failing", "1 missing", "1 newly skipped")
    assert result.verdict.text().startswith("FAIL: 1 newly failing, 1 missing, 1 newly skipped")
    assert not result.verdict.passed


def test_verdicts():
    base = _report({"a": "passed", "b": "xfailed"})
    kept = upgrade_compare.compare(base, _report({"a": "passed", "b": "xfailed"}), CHANGES)
    assert kept.verdict.text() == ("PASS: the candidate keeps every contract of the baseline, 1 known deviation(s) "
                                   "still holding")
    assert [c.nodeid for c in kept.still_holding] == ["b"]
    assert "### Known deviations still holding" in _page(kept)
    fixed = upgrade_compare.compare(base, _report({"a": "passed", "b": "xpassed"}), CHANGES)
    assert fixed.verdict.passed and fixed.verdict.fixed == 1
    assert fixed.verdict.text().startswith("PASS once 1 expectations line(s) are deleted")
    incomplete = upgrade_compare.compare(base, _report({"a": "passed", "b": "xfailed"}, complete=False), CHANGES)
    assert not incomplete.verdict.passed and "did not complete" in incomplete.verdict.text()
    broken = upgrade_compare.compare(base, _report({"a": "passed", "b": "xfailed"}), CHANGES, ["x 1 has requirement y"])
    assert not broken.verdict.passed and "pip check fails" in broken.verdict.text()


def _run(key: str, description: str, ok: bool = True, steps=(), root_cause=None) -> RunRecord:
    return RunRecord(key=key, description=description, ok=ok, session="s", steps=tuple(steps),
                     launch=LaunchRecord(root_cause=root_cause))


def test_figures_and_runs_are_compared():
    steps = [StepRecord(1, loss=6.25, step_time_s=9.0, memory_gib=1.0), StepRecord(2, loss=6.2, step_time_s=1.0,
                                                                                memory_gib=1.5),
             StepRecord(3, loss=6.1, step_time_s=3.0, memory_gib=1.2)]
    run = _run("k", "dense_native steps=10", steps=steps)
    base = with_contract(_report({"a": "passed"}, runs=(run,)), "a", measured={"bf16_max_abs_error": 0.01},
                         export_manifest=json.dumps([["w", [2], "float32"]]))
    later = RunRecord(key="k", description=run.description, session="s",
                      steps=(StepRecord(1, loss=6.5, step_time_s=9.0, memory_gib=1.0), *steps[1:]))
    cand = with_contract(_report({"a": "passed"}, runs=(later,)), "a", measured={"bf16_max_abs_error": 0.02},
                         export_manifest=json.dumps([["w", [2], "float16"]]))
    result = upgrade_compare.compare(base, cand, CHANGES)
    figures = {m.name: (m.before, m.after) for m in result.measured}
    assert figures == {"bf16_max_abs_error": (0.01, 0.02), "exported dtypes": (["float32"], ["float16"])}
    (r,) = result.runs
    assert r.before.step1_loss == 6.25 and r.after.step1_loss == 6.5
    assert r.before.step_time_s == 2.0  # steps after the first
    assert r.before.peak_memory_gib == 1.5
    assert (result.baseline_runs.runs, result.baseline_runs.launched) == (1, 1)
    assert (result.candidate_runs.runs, result.candidate_runs.launched) == (1, 1)
    text = _page(result, promote=("cp a b",))
    assert "| transformers | 5.23.0 | 5.24.0 | candidate |" in text
    assert "| httpx2 | not installed | 2.16.2 | transitive |" in text
    assert "6.25 -> 6.5" in text and "## Promote the candidate" in text


HARNESS_CRASH = """    def tiny_qwen3_model(...):
>       return fn(**mapped)
E       TypeError: CosSinRoPE.Config.__init__() got an unexpected keyword argument 'max_seq_len'

fixtures/rank/titan/tiny_qwen3.py:51: TypeError"""
STACK_REGRESSION = """E       AssertionError: contract: the learning rate of each step is the configured schedule's
E         expected: [1e-4]
E         actual:   [2e-4]
E         run: /work/main/.cache/conformance/runs/0123456789abcdef0123

conformance/test_training_loop.py:48: AssertionError"""


def _crashes(n: int, regressions: int = 1):
    """A candidate whose first ``n`` contracts fail in one harness crash, and ``regressions`` more
    on a contract's own assertion."""
    cand = _report({f"t{i}": "failed" for i in range(n + regressions)})
    for i in range(n + regressions):
        cand = with_contract(cand, f"t{i}", message=HARNESS_CRASH if i < n else STACK_REGRESSION)
    return cand


def test_failures_are_grouped_by_cause_and_owner():
    """96 contracts failing in one harness crash are one group, the suite's; a contract's own
    assertion is another group, the candidate's; each group has one representative bundle and
    the verdict says whose each is."""
    base = _report({f"t{i}": "passed" for i in range(5)})
    result = upgrade_compare.compare(base, _crashes(4), CHANGES)
    groups = result.groups
    assert [len(g.contracts) for g in groups] == [4, 1]
    assert groups[0].owner == causes.SUITE_GAP and groups[0].culprit == "fixtures/rank/titan/tiny_qwen3.py"
    assert groups[0].cause.startswith("TypeError: CosSinRoPE.Config.__init__()")
    assert groups[1].owner == causes.CANDIDATE and "<run>" not in groups[1].cause
    assert groups[0].repro_bundle == "/r/t0"
    assert result.verdict.owners == (Owner(causes.CANDIDATE, 1, 1), Owner(causes.SUITE_GAP, 4, 1))
    text = result.verdict.text()
    assert "4 in 1 cause(s) the suite's own gap" in text and "1 in 1 cause(s) the candidate's" in text
    text = _page(result)
    assert text.count("**4 contract(s)**") == 1 and "### Newly failing (a regression" not in text


def test_a_figure_line_never_claims_no_change_of_nothing():
    base = with_measured(_report({"a": "passed"}), {"a": {"err": 0.5}})
    none = _page(upgrade_compare.compare(base, _report({"a": "passed"}), CHANGES))
    assert "No figure was compared" in none and "None of the" not in none
    cand = with_measured(_report({"a": "passed"}), {"a": {"err": 0.5}})
    same = _page(upgrade_compare.compare(base, cand, CHANGES))
    assert "None of the 1 figures both sessions measured changed." in same


def test_bisect_attributes_each_flip_to_one_package():
    baseline = {"a": "passed", "b": "passed", "c": "xfailed", "d": "passed"}
    candidate = {"a": "failed", "b": "failed", "c": "xpassed", "d": "failed"}
    single = {"transformers==5.24.0": {"a": "failed", "b": "passed", "c": "xpassed", "d": "passed"},
              "huggingface_hub==2.4.0": {"a": "passed", "b": "failed", "c": "xpassed", "d": "passed"}}
    attribute = bisect_packages.attribute
    assert attribute("a", baseline, candidate, single).startswith("transformers==5.24.0 (passed -> failed")
    assert attribute("b", baseline, candidate, single).startswith("huggingface_hub==2.4.0")
    assert attribute("c", baseline, candidate, single).startswith("each of transformers==5.24.0, huggingface_hub==2.4.0")
    assert "only together" in attribute("d", baseline, candidate, single)


def test_pins_must_be_exact():
    assert candidate_env.parse_pin("Transformers==5.24.0") == ("transformers", "5.24.0")
    for bad in ("transformers>=5.24", "transformers", "transformers==5.*", "not a pin!"):
        with pytest.raises(candidate_env.CandidateError):
            candidate_env.parse_pin(bad)
    assert candidate_env.candidate_id("s", ["a==1", "b==2"]) == candidate_env.candidate_id("s", ["b==2", "a==1"])


def test_a_wheel_rebuilt_at_the_same_path_is_another_candidate(tmp_path):
    """A local build keeps its version and file name; the candidate environment built for its
    old bytes must not judge the new ones (the trn2 performance rehearsal once measured a
    stale install of a stand-in release that way). The same bytes keep their id."""
    wheel = tmp_path / "neuronx_cc-2.28.7631.0+rehearsal.3-py3-none-any.whl"
    wheel.write_bytes(b"first build")
    first = candidate_env.candidate_id("s", [str(wheel)])
    assert candidate_env.candidate_id("s", [str(wheel)]) == first
    wheel.write_bytes(b"second build")
    assert candidate_env.candidate_id("s", [str(wheel)]) != first
    assert candidate_env.candidate_id("s", ["a==1"]) == candidate_env.candidate_id("s", ["a==1"])


def test_constraints_of_a_candidate(tmp_path):
    trusted = tmp_path / "c.txt"
    trusted.write_text("huggingface_hub==1.33.0\ntorch==2.14.1\ntransformers==5.23.0\n")
    changes = [candidate_env.Change("transformers", "5.23.0", "5.24.0", "candidate"),
               candidate_env.Change("huggingface-hub", "1.33.0", "2.4.0", "candidate"),
               candidate_env.Change("httpx2", None, "2.16.2", "transitive")]
    out = tmp_path / "new.txt"
    candidate_env.write_constraints(trusted, changes, out)
    assert out.read_text().splitlines() == ["huggingface_hub==2.4.0", "torch==2.14.1", "transformers==5.24.0",
                                            "httpx2==2.16.2"]


def test_clone_shares_files_and_rewrites_scripts(tmp_path):
    src = tmp_path / "trusted"
    (src / "bin").mkdir(parents=True)
    (src / "lib").mkdir()
    (src / "lib" / "big.bin").write_bytes(b"x" * 1000)
    (src / "bin" / "tool").write_text(f"#!{src}/bin/python\nprint(1)\n")
    (src / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = python -m venv {src}\n")
    dst = tmp_path / "candidate"
    candidate_env.clone_venv(src, dst)
    assert (dst / "lib" / "big.bin").stat().st_ino == (src / "lib" / "big.bin").stat().st_ino
    assert (dst / "bin" / "tool").read_text().startswith(f"#!{dst}/bin/python")
    assert (src / "bin" / "tool").read_text().startswith(f"#!{src}/bin/python")  # trusted untouched


def test_stacks_table_is_the_setup_scripts():
    """The upgrade tool's stacks are setup-venv.sh's table: the three torchtitan stacks, and the
    reference stack built on CPython 3.12 (its own venv, the reference stack's pins)."""
    assert set(STACKS) == {"titan-0.3.0", "titan-5059f32", "titan-b5bcd76", "titan-0.3.0-py312"}
    assert STACKS["titan-0.3.0"].venv == REPO / ".venv"
    assert STACKS["titan-0.3.0-py312"].venv == REPO / ".venv-py312"
    assert STACKS["titan-0.3.0-py312"].constraints == STACKS["titan-0.3.0"].constraints
    assert all(s.constraints.exists() for s in STACKS.values())


@pytest.mark.slow
def test_real_candidate_end_to_end(tmp_path):
    """A real candidate (transformers 5.24.0 over the trusted stack, from the package index)
    built, its versions contracts run (no launch), compared with the committed baseline."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "upgrades", "--candidate", "transformers==5.24.0",
                           "--out", str(out), "--performance-launches", "0", "--", "conformance/test_versions.py", "-m", "cpu", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    # 1 is a FAIL verdict, never a crash (an uncaught exception exits 1 too)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = UpgradeResult.read(out / "upgrade.json").comparison
    assert Change("transformers", "5.23.0", "5.24.0", "candidate", source="index") in result.versions
    assert result.contracts and all(c.nodeid.startswith("conformance/test_versions.py") for c in result.contracts)
    text = (out / "upgrade.md").read_text()
    assert "**Verdict: " in text and "| transformers | 5.23.0 | 5.24.0 | candidate | index |" in text
    assert str(REPO) not in text and str(tmp_path) not in text  # no machine path on the page


def test_the_console_counts_contracts_not_arguments():
    """A full-tier selection is its options, not '<7 contracts whose outcome changed>'; a list
    of node ids is counted as contracts."""

    full = ["conformance", "-m", "cpu", "--inherit-expectations", "cpu-torch2.14-titan0.3", "-p", "no:x"]
    assert describe_selection(full) == "conformance -m cpu --inherit-expectations cpu-torch2.14-titan0.3 -p no:x"
    picked = [f"conformance/test_a.py::test_{i}[cpu]" for i in range(9)] + ["-m", "cpu"]
    assert describe_selection(picked) == "<9 contracts> -m cpu"


# What require_trained says when the run a contract reads died (fixtures.contract), with the
# rank's exception as torch 2.13 raised it in every training run at FSDP set-up.
RUN_DIED = ("AssertionError: contract: the run dense_native trains every step on every rank\n"
            "  rank 0: exited 1\n"
            "ValueError: When dp_mesh_dims is provided, all parameters must be DTensors on the full SPMD mesh\n")


def test_a_deviation_whose_run_died_is_not_called_still_holding():
    """A known deviation (xfail) on both sides is "still holding" only when the candidate
    measured it again; an xfail that came from a run that never trained is "not re-measured",
    with the run's failure."""
    base = _report({"a": "xfailed", "b": "xfailed"})
    cand = with_contract(_report({"a": "xfailed", "b": "xfailed"}), "a", failure=RUN_DIED)
    cand = with_contract(cand, "b", failure="AssertionError: contract: grad_clip is compiled\n  expected: True\n")
    result = upgrade_compare.compare(base, cand, CHANGES)
    assert [c.nodeid for c in result.still_holding] == ["b"]
    assert result.not_remeasured == (HeldDeviation("a", why="not re-measured: its run died of ValueError: When "
                                                   "dp_mesh_dims is provided, all parameters must be DTensors on the "
                                                   "full SPMD mesh"),)
    text = _page(result)
    assert "### Known deviations not re-measured" in text and "its run died of ValueError" in text


def test_contracts_whose_run_died_form_one_cause_however_they_quote_it():
    """Two contracts that read one dead run are one cause, the run's first failure, though one
    quotes the exception inside its assertion and the other names only the run."""
    base = _report({"a": "passed", "b": "passed", "c": "passed", "d": "passed"})
    died = ("ValueError: When dp_mesh_dims is provided, all parameters must be DTensors on the full SPMD mesh")
    runs = (_run("k1", "hf_tied", ok=False, root_cause=RootCauseRecord(message=died, traceback="", rest={"rank": 0})),
            _run("k2", "dense_native"))
    cand = _report({"a": "failed", "b": "failed", "c": "failed", "d": "failed"}, runs=runs)
    cand = with_contract(cand, "a", runs=("k1",), message=f"AssertionError: contract: export\n  actual: {died}")
    cand = with_contract(cand, "b", runs=("k1",), message="AssertionError: contract: the run hf_tied trains every step")
    cand = with_contract(cand, "c", runs=("k2",), message="AssertionError: contract: the loss falls\n  actual: 6.1")
    cand = with_contract(cand, "d", message=f"not run: {died} (a fact of this stack on the native path: ...)")
    groups = upgrade_compare.compare(base, cand, CHANGES).groups
    assert [sorted(g.contracts) for g in groups] == [["a", "b", "d"], ["c"]], groups
    assert groups[0].cause.startswith("a run died: ValueError: When dp_mesh_dims is provided")


def test_a_torch_upgrade_moves_the_one_place_the_suite_pins_it():
    """Promoting a torch release is one command over the cpu extra (``fixtures.tiers.pins``), which
    the venv script and the tier profile read; a package the extra does not pin, or pins at
    another version than the change's old one, is not moved."""
    pinned = {"torch": "2.14.1", "triton": "3.8.0", "transformers": "5.23.0"}
    moves = promotion.pin_moves([candidate_env.Change("torch", "2.14.1", "2.15.0", "candidate"),
                               candidate_env.Change("triton", "3.8.0", "3.9.0", "transitive"),
                               candidate_env.Change("transformers", "5.22.0", "5.24.0", "candidate"),
                               candidate_env.Change("httpx2", None, "2.16.2", "transitive")], pinned)
    assert moves == ["python -m fixtures.tiers.pins torch==2.15.0 triton==3.9.0"]
    assert promotion.pin_moves([candidate_env.Change("httpx2", "2.1", "2.16.2", "transitive")], pinned) == []


def test_the_pins_are_written_once_and_moved_in_place(tmp_path):
    """The cpu extra is the one place the stack's exact pins are written: the venv script
    spells no version of its own, the tier profile's torch pin is the extra's, and a move
    rewrites only the moved requirement (the rest of pyproject.toml byte for byte) and
    refuses a package the extra does not pin."""
    found = pins.cpu_pins()
    assert cpu_profile().torch_pin == found["torch"]
    script = (REPO / "scripts" / "setup-venv.sh").read_text()
    assert not [n for n, v in found.items() if f"{n}=={v}" in script], "setup-venv.sh spells a pin of its own"
    copy = tmp_path / "pyproject.toml"
    original = (REPO / "pyproject.toml").read_text()
    copy.write_text(original)
    assert pins.move({"torch": "2.15.0"}, copy) == [f"torch=={found['torch']} -> torch==2.15.0"]
    assert pins.cpu_pins(copy) == {**found, "torch": "2.15.0"}
    assert copy.read_text() == original.replace(f'"torch=={found["torch"]}"', '"torch==2.15.0"')
    with pytest.raises(pins.PinError, match="httpx2 is not pinned by the cpu extra"):
        pins.move({"httpx2": "2.16.2"}, copy)
    copy.write_text(original.replace(f'"torch=={found["torch"]}"', '"torch>=2.14"'))
    with pytest.raises(pins.PinError, match="pins exactly"):
        pins.cpu_pins(copy)


@pytest.mark.parametrize(("pinned", "passes"), [("installed", True), ("9.9.9", False)])
def test_the_torch_pin_is_the_checked_stacks(tmp_path, pinned, passes):
    """test_torch_is_the_required_build holds torch to the pins of the stack being checked:
    with --stack-constraints (the candidate's set during an upgrade) those, not the suite's."""

    version = stack.installed_version("torch") if pinned == "installed" else pinned
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"# a candidate's set\ntorch=={version}\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_versions.py", "-m", "cpu", "-q",
                           "-k", "torch_is_the_required_build", "--stack-constraints", str(constraints),
                           "--report-dir", str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    if passes:
        assert proc.returncode == 0 and "1 passed" in out, out
    else:
        assert proc.returncode == 1 and "the stack pins torch==9.9.9" in out, out


def test_a_build_no_index_serves_is_promoted_as_a_new_stack(tmp_path):
    """A wheel, git or checkout candidate that passes is not pinned into the trusted stack's
    constraints (pip could not fetch that version, and the stack's extra requires its own
    torchtitan): the page gives the steps of a new stack built from a wheelhouse."""
    wheel = Candidate(text="/w/torchtitan-0.2.2+gitabc1234-py3-none-any.whl", kind="wheel", name="torchtitan",
                      install=("/w/torchtitan-0.2.2+gitabc1234-py3-none-any.whl",), version="0.2.2+gitabc1234")
    git = Candidate(text="torchtitan @ git+https://github.com/pytorch/torchtitan@abc1234", kind="direct",
                    name="torchtitan", install=("torchtitan @ git+https://github.com/pytorch/torchtitan@abc1234",),
                    commit="abc1234def")
    constraints = REPO / ".cache" / "upgrade" / "x" / "constraints.txt"
    for cand in (wheel, git):
        steps = promotion.new_stack_steps([cand], constraints, STACKS["titan-0.3.0"])
        text = "\n".join(steps)
        assert "requirements/cpu-constraints.txt" not in text and "setup-venv.sh titan-0.3.0\n" not in text, text
        assert "WHEELHOUSE" in text and "SHA256SUMS" in text and "new stack (titan-abc1234)" in text
        assert "cp .cache/upgrade/x/constraints.txt requirements/cpu-titan-abc1234-constraints.txt" in text
    assert "pip wheel --no-deps -w WHEELHOUSE torchtitan @ git+" in "\n".join(
        promotion.new_stack_steps([git], constraints, STACKS["titan-0.3.0"]))


def test_a_candidate_matrix_checks_each_set_once_and_writes_one_page(tmp_path, monkeypatch):
    """--candidate-matrix FILE: each line is one candidate set, checked by the single upgrade
    check with its own folder and the same options and selection; one page has a row per set
    (verdict, causes, wall time), a NOT BUILT row with pip's reason; trn2's trusted session is
    run once and handed to the later rows."""
    matrix = tmp_path / "m.txt"
    matrix.write_text("# the last torch releases\ntorch==2.15.0\ntorch==2.13.0  # older\n\ntorch==9.9 transformers==1\n")
    calls = []
    kept = UpgradeResult(upgrade_compare.compare(_report({"a": "passed"}), _report({"a": "passed"})), selection=CPU,
                         candidates=(), partial=False)

    def check_row(argv):
        calls.append(argv)
        folder = Path(argv[argv.index("--out") + 1])
        folder.mkdir(parents=True)
        if "torch==9.9" in argv:
            (folder / "upgrade.md").write_text("# t\n\n**Verdict: NOT BUILT**\n\n```\nThe user requested (constraint) "
                                               "torch<=2.14.1\n```\n")
            return 2
        (folder / "trusted-suite").mkdir()
        (folder / "upgrade.json").write_text(json.dumps(kept.to_json()))
        return 0

    out = tmp_path / "out"
    rc = upgrade_matrix.check_rows(matrix, ["--tier", "trn2", "--", "conformance", "-m", "trn2"], out, check_row)
    assert rc == 1  # one row did not build
    assert [c[c.index("--candidate") + 1] for c in calls] == ["torch==2.15.0", "torch==2.13.0", "torch==9.9"]
    assert all(c[-3:] == ["conformance", "-m", "trn2"] for c in calls)
    assert "--baseline-report" not in calls[0] and "--baseline-report" in calls[1]
    text = (out / "matrix.md").read_text()
    assert "| `torch==2.15.0` | PASS: the candidate keeps every contract of the baseline |" in text
    assert "| `torch==9.9 transformers==1` | NOT BUILT |" in text and "(constraint) torch<=2.14.1" in text
    captured = {}
    monkeypatch.setattr(upgrade_matrix, "check_rows", lambda m, argv, o, c: captured.update(argv=argv, out=o) or 0)
    assert check.main(["--candidate-matrix", str(matrix), "--out", str(out), "--stack", "titan-0.3.0"]) == 0
    assert captured["argv"] == ["--stack", "titan-0.3.0"] and captured["out"] == out.resolve()


def test_a_figure_the_trusted_stack_moves_today_is_not_blamed_on_the_candidate():
    """Two candidates' pages listed the same 16 moved figures; 14 were what the trusted stack
    measures today on the same checkout. A figure re-measured today is the checkout's move where
    the candidate equals today's value, the candidate's where it does not; one not re-measured
    says so."""
    base = with_measured(_report({"a": "passed", "b": "passed", "c": "passed"}),
                         {"a": {"err": 1.0}, "b": {"err": 1.0}, "c": {"err": 1.0}})
    cand = with_measured(_report({"a": "passed", "b": "passed", "c": "passed"}),
                         {"a": {"err": 2.0}, "b": {"err": 3.0}, "c": {"err": 4.0}})
    today = with_measured(_report({"a": "passed", "b": "passed"}, session="today"), {"a": {"err": 2.0}, "b": {"err": 1.0}})
    result = upgrade_compare.compare(base, cand, CHANGES, today=today)
    by = {m.nodeid: m for m in result.measured}
    assert by["a"].today == Today(2.0, stale_baseline=True, candidates_move=False)
    assert by["b"].today == Today(1.0, stale_baseline=False, candidates_move=True)
    assert by["c"].today is None and result.figures_remeasured_today == 2
    text = _page(result)
    assert "this machine's or the checkout's (the trusted stack measures the same here today): not the candidate's" in text
    assert "| `c` | err | 1 | - | 4 | not re-measured today |" in text, text


def test_an_attempt_under_other_pip_constraints_has_its_own_id(monkeypatch):
    """A NOT BUILT attempt under pip's configured cap and a later build with the cap lifted
    (PIP_CONSTRAINT=/dev/null) are two attempts: two ids, two folders."""
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    capped = candidate_env.candidate_id("titan-0.3.0", ["torch==2.15.0"])
    monkeypatch.setenv("PIP_CONSTRAINT", "/dev/null")
    assert candidate_env.candidate_id("titan-0.3.0", ["torch==2.15.0"]) != capped


def test_a_new_contract_failing_in_the_candidate_fails_the_upgrade():
    """A contract the committed baseline does not have (added since) that fails in the
    candidate is a failure, as the gate says; one that passes is listed as new."""
    base = _report({"a": "passed"})
    failing = upgrade_compare.compare(base, _report({"a": "passed", "new_leak": "failed"}))
    assert failing.verdict.problems == ("1 new contract(s) failing (not in the baseline)",)
    passing = upgrade_compare.compare(base, _report({"a": "passed", "new_leak": "passed"}))
    assert passing.verdict.passed


def test_a_deviation_failing_differently_is_red_on_the_page_with_both_reasons():
    """A known deviation whose contract now fails otherwise than recorded (the expectations
    plugin made it a failure) is newly failing, grouped under the line that names both the
    recorded signature and the new failure; before, any failure read as "still holding"."""
    base = _report({"a": "passed", "lm_head": "xfailed"})
    cand = with_contract(_report({"a": "passed", "lm_head": "failed"}), "lm_head", message=(
        f"{RUN_DIED}\n\n{DIFFERENTLY} (cpu-torch2.14-titan0.3.txt:10): recorded: failure matching "
        "\"contract: the run reports that the checkpoint's lm_head\\.weight was dropped\"; now: "
        "AssertionError: contract: the run dense_native trains every step on every rank"))
    result = upgrade_compare.compare(base, cand, CHANGES)
    assert not result.verdict.passed and result.counts["newly failing"] == 1
    [group] = result.groups
    assert group.cause.startswith(DIFFERENTLY) and "recorded: failure matching" in group.cause
    text = _page(result)
    assert "lm_head\\.weight was dropped" in text and "now: AssertionError: contract: the run dense_native" in text


def test_a_failure_the_trusted_stack_shares_here_is_this_machines():
    """Where a trusted session on this machine fails the same contract, the failure is this
    machine's (its kernel paths, the checkout), not the candidate's: listed, not blocking."""
    base = _report({"a": "passed", "tp": "passed"})
    cand = _report({"a": "passed", "tp": "failed"})
    today = _report({"tp": "failed"})
    blamed = upgrade_compare.compare(base, cand, CHANGES)
    assert not blamed.verdict.passed and blamed.suspects() == ["tp"]
    result = upgrade_compare.compare(base, cand, CHANGES, today=today)
    assert result.verdict.passed and result.counts["fails with the trusted stack here"] == 1
    assert "this machine's, not the candidate's" in result.verdict.text()
    assert "Failing on this machine with the trusted stack too" in _page(result)


def test_no_figure_is_compared_with_a_baseline_of_another_suite():
    """A baseline recorded with other checkpoints measured other things: its step-1 losses
    against this suite's are no 'figures that moved' (the committed baseline of an earlier round
    once showed 6.250949 -> 6.262897 so)."""
    base = with_measured(_report({"a": "passed"}), {"a": {"step1_loss": 6.250949}})
    cand = with_measured(_report({"a": "passed"}), {"a": {"step1_loss": 6.262897}})
    assert upgrade_compare.compare(base, cand, CHANGES).measured
    other = with_measured(_report({"a": "passed"}, suite=SuiteIdentity("an earlier round's", "x")),
                          {"a": {"step1_loss": 6.250949}})
    result = upgrade_compare.compare(other, cand, CHANGES)
    assert result.measured == () and "recorded by another suite" in result.other_suite
    text = _page(result)
    assert "Not compared: the baseline was recorded by another suite" in text and "6.262897" not in text


def test_the_trusted_stack_is_asked_here_only_where_the_baseline_took_other_kernel_paths(monkeypatch, tmp_path):
    """The upgrade check reruns, on the trusted stack here, only the contracts that newly fail
    or whose figures moved and that today's trusted session did not run, and only when the
    baseline's machine (its kernel paths) is not this one; a failure that session shares is
    then this machine's."""
    asked = []

    def fake_run_suite(env, report_dir, selection):
        asked.append(selection)
        return _report({"tp": "failed"}, session="here")

    monkeypatch.setattr(sessions, "run_suite", fake_run_suite)
    args = argparse.Namespace(tier="cpu")
    base = _report({"a": "passed", "tp": "passed", "x": "passed"}, machine=MachineRecord(numerics_key="epyc"))
    cand = _report({"a": "passed", "tp": "failed", "x": "passed"}, machine=MachineRecord(numerics_key="xeon"))
    today = _report({"x": "passed"}, session="cross-version")
    result = upgrade_compare.compare(base, cand, CHANGES, today=today)
    here = sessions.trusted_here(args, STACKS[DEFAULT_STACK], base, cand, result.suspects(), tmp_path, today)
    assert asked == [["tp", "-m", "cpu"]] and {c.nodeid for c in here.contracts} == {"x", "tp"}
    again = upgrade_compare.compare(base, cand, CHANGES, today=here)
    assert again.verdict.passed and again.counts["fails with the trusted stack here"] == 1
    same = _report({"a": "passed", "tp": "passed", "x": "passed"}, machine=MachineRecord(numerics_key="xeon"))
    assert sessions.trusted_here(args, STACKS[DEFAULT_STACK], same, cand, result.suspects(), tmp_path, today) is None
    assert len(asked) == 1  # the same machine: nothing rerun, the candidate is judged as is


# Added after mutation testing (benchmarks/mutation.md): each kills mutants the tests above let survive.


def test_categorize_reads_the_outcome_and_a_strict_xpass_message():
    """A known deviation that passes is fixed upstream, whether pytest reports it xpassed or
    failed with its XPASS(strict) message; failing otherwise it is newly failing; skipped on
    both sides is no change."""
    assert upgrade_compare.categorize("xfailed", "xpassed") == "upstream fixed"
    assert upgrade_compare.categorize("xfailed", "failed", "[XPASS(strict)] known deviation") == "upstream fixed"
    assert upgrade_compare.categorize("xfailed", "failed", "AssertionError: other") == "newly failing"
    assert upgrade_compare.categorize("skipped", "skipped") == "unchanged"
    assert upgrade_compare.categorize("passed", "skipped") == "newly skipped"


def test_reports_without_contracts_or_runs_compare_as_empty():
    """A report that records no contracts or no runs (an early crash, an old schema) is read
    as empty, not a crash."""
    empty = SessionReport.from_json({"complete": True})
    result = upgrade_compare.compare(empty, empty)
    assert result.verdict.passed and result.contracts == () and result.groups == () and result.runs == ()
    assert result.verdict.text() == "PASS: the candidate keeps every contract of the baseline"


def test_the_upgrade_result_carries_every_field_the_page_and_json_read():
    """compare's result, field by field: both sessions and stacks, pip check's lines, the stack
    preflight, the figures that did not move, each deviation still holding with its expectation;
    a deviation listed only in the candidate (passing or absent before) is not still holding."""
    preflight = PreflightFinding("cpu", True, "torch 2.15.0: ok")
    base = with_measured(_report({"a": "passed", "b": "xfailed", "p": "passed"}, session="base-s"), {"a": {"err": 0.5}})
    cand = with_measured(_report({"a": "passed", "b": "xfailed", "p": "xfailed", "n": "xfailed"}, session="cand-s",
                                 stack_id={"cpu": "cpu-torch2.15-titan0.3"}, stack_preflight=(preflight,)),
                         {"a": {"err": 0.5}})
    today = _report({"a": "passed"}, session="today-s")
    result = upgrade_compare.compare(base, cand, CHANGES, ["x 1 has requirement y"], today=today)
    assert result.baseline_session == "base-s" and result.today_session == "today-s"
    assert result.baseline_stack == {"cpu": "cpu-torch2.14-titan0.3"}
    assert result.candidate_stack == {"cpu": "cpu-torch2.15-titan0.3"}
    assert result.pip_check == ("x 1 has requirement y",) and result.stack_preflight == (preflight,)
    assert result.unchanged_figures == (f"a: err = {upgrade_compare.fmt(0.5)}",)
    assert result.still_holding == (HeldDeviation("b", cand.contract("b").expectation),)
    assert result.verdict.text() == "FAIL: pip check fails" and not result.verdict.passed
    plain = upgrade_compare.compare(base, cand, CHANGES)
    assert plain.today_session is None and plain.pip_check == () and plain.verdict.passed
    assert plain.verdict.text() == ("PASS: the candidate keeps every contract of the baseline, 1 known deviation(s) "
                                    "still holding")


def test_each_verdict_sentence_word_for_word():
    """The verdict line as the page prints it: fixed deviations, an unfinished session (no
    "complete" key is not complete), causes per owner in one parenthesis, and failures the
    trusted stack shares on this machine."""
    base = _report({"a": "passed", "b": "xfailed"})
    assert upgrade_compare.compare(base, _report({"a": "passed", "b": "xpassed"}), CHANGES).verdict.text() == (
        "PASS once 1 expectations line(s) are deleted: the candidate keeps every contract and fixes known deviations")
    unfinished = SessionReport.from_json({k: v for k, v in _report({"a": "passed", "b": "xfailed"}).to_json().items()
                                          if k != "complete"})
    result = upgrade_compare.compare(base, unfinished, CHANGES)
    assert not result.verdict.passed and result.verdict.text() == "FAIL: the candidate's session did not complete"
    assert upgrade_compare.compare(_report({f"t{i}": "passed" for i in range(5)}), _crashes(4), CHANGES).verdict.text() == (
        "FAIL: 5 newly failing (1 in 1 cause(s) the candidate's behaviour; 4 in 1 cause(s) the suite's own gap "
        "(fix the suite))")
    shared = upgrade_compare.compare(_report({"a": "passed", "tp": "passed"}), _report({"a": "passed", "tp": "failed"}),
                                     CHANGES, today=_report({"tp": "failed"}))
    assert shared.verdict.text() == ("PASS: the candidate keeps every contract of the baseline; 1 contract(s) fail on "
                                     "this machine with the trusted stack too (this machine's, not the candidate's)")


def _performance(*findings: Finding, accepted: bool = False) -> PerformanceCheck:
    return PerformanceCheck(Verdict(tuple(findings), accepted=accepted))


def test_the_check_composes_its_verdict_from_the_contracts_performance_and_selection():
    """The upgrade result derives its verdict from its parts whenever asked (never by editing
    text): contracts passing with performance failing reads "FAIL (performance X): <the
    contracts' words>", both failing appends "; performance X", a partial selection is named
    and never promoted, and a performance verdict changes the outcome and the words of
    upgrade.json together."""
    base = _report({"a": "passed", "b": "xfailed"})
    keeps = upgrade_compare.compare(base, _report({"a": "passed", "b": "xfailed"}), CHANGES)
    breaks = upgrade_compare.compare(base, _report({"a": "failed", "b": "xfailed"}), CHANGES)
    result = UpgradeResult(keeps, selection=CPU, candidates=(), partial=False)
    assert result.passed and result.verdict.text() == keeps.verdict.text()
    assert result.verdict.outcome is Outcome.PASS
    slower = UpgradeResult(keeps, CPU, (), False, performance=_performance(Finding.SLOWER))
    assert slower.verdict.text() == ("FAIL (performance SLOWER): the candidate keeps every contract of the baseline, "
                                     "1 known deviation(s) still holding")
    assert not slower.passed and slower.verdict.outcome is Outcome.FAIL and slower.promote is None
    assert UpgradeResult(keeps, CPU, (), False, performance=_performance(Finding.SLOWER, accepted=True)).passed
    both = UpgradeResult(breaks, selection=("conformance/test_x.py", "-m", "cpu"), candidates=(), partial=True,
                         performance=_performance(Finding.LARGER, Finding.INCONCLUSIVE))
    assert both.verdict.performance == (Finding.LARGER, Finding.INCONCLUSIVE)
    assert both.verdict.text() == (breaks.verdict.text() + "; performance LARGER+INCONCLUSIVE (on the selection "
                                   "`pytest conformance/test_x.py -m cpu`; not a promotion)")
    figures = UpgradeResult(keeps, CPU, (), False, performance=_performance(Finding.FIGURES_ONLY))
    assert figures.passed and figures.verdict.text() == (
        keeps.verdict.text() + "; performance not judged (figures only: no A/A series of this host type)")
    assert breaks.verdict.text().startswith("FAIL: 1 newly failing") and not both.passed


def test_upgrade_json_holds_each_part_the_check_found_and_reads_back():
    """``UpgradeResult.to_json`` is upgrade.json: the comparison's fields, the derived verdict,
    the selection and candidates, and each optional part only where the check produced it (a
    bisection asked for with nothing to bisect is written as null; a promotion with its
    constraints file); ``from_json`` reads every part back."""
    comparison = upgrade_compare.compare(_report({"a": "passed"}), _report({"a": "passed"}), CHANGES)
    cand = Candidate(text="x==1", kind="index", name="x", install=("x==1",), version="1")
    bare = UpgradeResult(comparison, selection=CPU, candidates=(cand,), partial=False)
    written = json.loads(json.dumps(bare.to_json()))
    # the format a script reads: the derived verdict's words and outcome beside the parts
    assert {k: written[k] for k in ("verdict", "outcome", "passed", "selection")} == {
        "verdict": comparison.verdict.text(), "outcome": "PASS", "passed": True, "selection": list(CPU)}
    assert not {"performance", "bisect", "promote", "constraints"} & set(written)
    assert UpgradeResult.from_json(written) == bare
    full = UpgradeResult(comparison, CPU, (), False, performance=_performance(Finding.PASS), bisected=True,
                         promote=("cp a b",), constraints="c.txt")
    full_json = json.loads(json.dumps(full.to_json()))
    assert full_json["bisect"] is None and full_json["promote"] == ["cp a b"] and full_json["constraints"] == "c.txt"
    assert UpgradeResult.from_json(full_json) == full
    found = BisectFindings(environments_built=2, attribution={"a": "x==1"})
    bisected = UpgradeResult(comparison, (), (), True, bisect=found, bisected=True)
    assert UpgradeResult.from_json(json.loads(json.dumps(bisected.to_json()))).bisect == found


def test_the_contracts_verdict_keeps_every_count_and_says_the_ones_that_decide():
    """The contracts' verdict records the deviations fixed and still holding and the failures'
    owners whatever else happened; its words say problems first, else the fixes, else the
    deviations still holding."""
    failing = upgrade_compare.contract_verdict(["1 newly failing"], [FailureGroup("c", None, "o", ("a",))], 2,
                                               [HeldDeviation("b")], 0)
    assert (failing.fixed, failing.still_holding, failing.owners) == (2, 1, (Owner("o", 1, 1),))
    assert failing.text() == "FAIL: 1 newly failing (1 in 1 cause(s) o)"
    assert ContractVerdict(fixed=2, still_holding=1).text() == (
        "PASS once 2 expectations line(s) are deleted: the candidate keeps every contract and fixes known deviations")
    assert ContractVerdict.from_json(failing.to_json()) == failing


def test_the_performance_sessions_rehearse_on_the_selections_host():
    """The trn2 upgrade rehearsal's performance sessions take the selection's rehearsal and its
    host: without the host they ran on the default host, another machine than the sessions the
    history's A/A series holds (found by the performance rehearsal: its A/A check stayed
    FIGURES ONLY with a series stored for the pod host)."""
    assert rehearsal_options(["conformance/test_performance.py", "-m", "trn2", "--neuron-dress-rehearsal",
                                      "--rehearsal-host", "eks-pod-two-cores"]) == [
        "--neuron-dress-rehearsal", "--rehearsal-host", "eks-pod-two-cores"]
    assert rehearsal_options(["--rehearsal-host=pod-with-neighbour", "--neuron-dress-rehearsal", "-q"]) == [
        "--rehearsal-host=pod-with-neighbour", "--neuron-dress-rehearsal"]
    assert rehearsal_options(["conformance", "-m", "cpu"]) == []


# Added after mutation testing (round 2, benchmarks/mutation.md): each kills mutants the tests above let survive.


def test_the_upgrade_record_counts_no_figure_compared_across_suites():
    """upgrade.json (what a script or a later page reads) says how many figures were compared:
    one where both suites measured it, none, and no figure listed unchanged, across suites."""
    cand = with_measured(_report({"a": "passed"}), {"a": {"step1_loss": 6.262897}})
    same = upgrade_compare.compare(cand, cand, CHANGES)
    assert same.figures_compared == 1 and same.measured == ()
    other = with_measured(_report({"a": "passed"}, suite=SuiteIdentity("an earlier round's", "x")),
                          {"a": {"step1_loss": 6.262897}})
    different = upgrade_compare.compare(other, cand, CHANGES)
    assert different.other_suite and different.figures_compared == 0 and different.unchanged_figures == ()
