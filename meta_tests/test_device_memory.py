"""Device memory where the runtime counts it (trn2): the stand-in driver's per-core counters,
the rank probe that reads them, the figures made of them, and the upgrade verdict on them
(LARGER on the runtime's total, LEAKING on the allocated bytes' growth beyond the trusted
stack's), on synthetic launches; the stand-in release that adds scratchpad is the one change
of its release file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.oracles import performance
from fixtures.oracles.performance import PerfPolicy
from fixtures.oracles.performance_record import CompileCacheEvents, PerformanceRecord, RankRecord
from fixtures.rank.probes import device_memory
from fixtures.repo import REPO_ROOT
from fixtures.tiers import rehearsal
from meta_tests.test_rehearsal_device import _run
from upgrades import perf_compare, perf_launch, perf_page
from upgrades.perf_launch import Launch
from upgrades.verdict import Finding

pytestmark = pytest.mark.meta

KIB = 1 << 10
GIB = 1 << 30
POLICY = PerfPolicy(slower_than=0.15, larger_than=0.03, leak_mib_per_step=1.0, why="test", judged=True)


def _record(step, scratchpad=128 * KIB, tensors=900 * KIB, allocated=900 * KIB):
    counters = {"model_code": 24 * KIB, "constants": 8 * KIB, "dma_rings": 32 * KIB, "collectives": 64 * KIB,
                "model_shared_scratchpad": scratchpad, "tensors": tensors, "notifications": 0}
    return {"step": step, "allocated_bytes": allocated, "active_bytes": allocated, "reserved_bytes": allocated,
            "device_mem": {name: {"total": value, "peak": value * 3} for name, value in counters.items()}}


def test_device_figures_are_the_largest_sum_of_the_totals_and_the_allocated_slope():
    """The peak is the largest sum of the categories' ``total`` after a step (not the ``peak``
    files: since the driver loaded, another process's too), each category its largest total,
    and the growth the allocated bytes' slope over the steps after the warm-up only."""
    records = [_record(s, tensors=(900 + (200 if s == 5 else 0)) * KIB,
                       allocated=(5000 if s <= 2 else 900 + 2048 * (s - 3)) * KIB) for s in range(1, 13)]
    figures = performance.device_figures(records, warmup_steps=2)
    assert figures["device_peak_gib"] * GIB == (24 + 8 + 32 + 64 + 128 + 1100) * KIB
    assert figures["device_categories_gib"]["tensors"] * GIB == 1100 * KIB
    assert figures["device_categories_gib"]["model_shared_scratchpad"] * GIB == 128 * KIB
    assert figures["allocated_growth_mib_per_step"] == pytest.approx(2.0)  # steps 3-12, not the warm-up's 5000 KiB
    assert performance.device_figures([{"step": 1, "error": "no device_mem counters"}], 1) == {}
    times = [1.0] + [0.1] * 11
    fig = performance.rank_figures(times, [1000.0] * 12, [0.002] * 12, records)
    assert fig.device_peak_gib == figures["device_peak_gib"] and fig.to_json()["device_categories_gib"]
    assert performance.rank_figures(times, [1000.0] * 12, [0.002] * 12).device_peak_gib is None  # cpu: none


def _rank(times, device_gib, growth, scratchpad_gib, capacity=0.04) -> RankRecord:
    median = performance.statistics.median(times)
    return RankRecord(steady_times=tuple(times), step_time_s=median, tokens_per_s=512 / median, tokens_per_step=512,
                      peak_memory_gib=0.0024, memory_growth_mib_per_step=0.0, first_step_s=0.32,
                      device_peak_gib=device_gib, allocated_growth_mib_per_step=growth,
                      device_categories_gib={"tensors": 0.0009, "model_shared_scratchpad": scratchpad_gib},
                      device_headroom_gib=capacity - device_gib)


def _launch(tmp_path, stack, index, *, device_gib=0.0041, growth=0.0, scratchpad_gib=0.0016, scale=1.0) -> Launch:
    times = [0.05 * scale * (1 + 0.01 * ((i * 7 + index) % 5)) for i in range(28)]
    ranks = {str(r): _rank(times, device_gib, growth, scratchpad_gib) for r in range(2)}
    return Launch(stack, tmp_path / f"{stack}-{index}", PerformanceRecord(ranks=ranks, core_capacity_gib=0.04), "passed")


def _each_rank(launch: Launch, **figures) -> Launch:
    """``launch`` with these figures changed on every rank (and the figures' other fields)."""
    ranks = {rank: replace(r, **figures) for rank, r in launch.figures.ranks.items()}
    return replace(launch, figures=replace(launch.figures, ranks=ranks))


def _series(tmp_path, **candidate):
    trusted = [_launch(tmp_path, "trusted", i) for i in range(1, 4)]
    return trusted + [_launch(tmp_path, "candidate", i, **candidate) for i in range(1, 4)]


def test_more_runtime_memory_outside_the_allocator_is_larger(tmp_path):
    """+3 GiB of scratchpad per 24 GiB core, scaled (the stand-in release 4): the allocator's
    figure is unchanged, the runtime's total is 11.5% larger: LARGER, and the page shows the
    categories and the headroom. Before: PASS (only the allocator's figure was compared)."""
    launches = _series(tmp_path, device_gib=0.0041 + 0.0016 * 3 * 0.1, scratchpad_gib=0.0016 * 4)
    verdict = perf_compare.judge(launches, POLICY)
    assert verdict.findings == (Finding.LARGER,) and not verdict.passed
    device = next(c for c in verdict.comparisons if c.figure == "device_peak_gib")
    allocator = next(c for c in verdict.comparisons if c.figure == "peak_memory_gib")
    assert device.flagged and not allocator.flagged and allocator.ratio == 1.0
    page = "\n".join(perf_page.render(verdict, POLICY, launches))
    assert "| device_peak_gib (median of 3+3 launches)" in page and "| model_shared_scratchpad | 1.638 | 6.554 |" in page
    assert "| headroom (core capacity minus total, smallest rank) |" in page
    same = _series(tmp_path)
    assert perf_compare.judge(same, POLICY).findings == (Finding.PASS,)
    figures_only = perf_compare.judge(launches, PerfPolicy(0.05, 0.03, 1.0, "not measured here", judged=False))
    assert figures_only.findings == (Finding.FIGURES_ONLY,) and any(c.figure == "device_peak_gib" for c in figures_only.comparisons)


def test_leaking_is_growth_beyond_the_trusted_stacks(tmp_path):
    """LEAKING compares the candidate's allocated growth with the trusted stack's: a growth
    both share (1.5 MiB/step each, above the bound alone) is not the candidate's leak; 1.5 MiB
    more per step than the trusted stack's is. Before: judged on the candidate alone."""
    shared = [*[_launch(tmp_path, "trusted", i, growth=1.5) for i in range(1, 4)],
              *[_launch(tmp_path, "candidate", i, growth=1.6) for i in range(1, 4)]]
    assert perf_compare.judge(shared, POLICY).findings == (Finding.PASS,)
    leak = [*[_launch(tmp_path, "trusted", i, growth=1.5) for i in range(1, 4)],
            *[_launch(tmp_path, "candidate", i, growth=3.0) for i in range(1, 4)]]
    verdict = perf_compare.judge(leak, POLICY)
    assert verdict.findings == (Finding.LEAKING,) and len(verdict.leaks) == 3
    assert "allocated device memory grows 3.000 MiB per steady step, 1.500 beyond the trusted stack's 1.500" in verdict.leaks[0]


def test_device_memory_counted_on_one_side_only_is_not_measured(tmp_path):
    """A candidate whose ranks read no counters (a runtime without them, a folder moved) is not
    compared with a trusted stack that had them: NOT MEASURED, naming the launches."""
    launches = _series(tmp_path)
    launches[-1] = _each_rank(launches[-1], device_peak_gib=None)
    verdict = perf_compare.judge(launches, POLICY)
    assert verdict.findings == (Finding.NOT_MEASURED,)
    assert any("counted in some launches, not in others" in p and "candidate candidate-3" in p for p in verdict.problems)


def test_the_standin_driver_writes_the_documented_counters_and_the_probe_reads_them(tmp_path):
    """The stand-in runtime writes its core's ``device_mem/<category>/{total,present,peak}``
    at a synchronize (the sysfs user guide's layout, under ``$NEURON_REHEARSAL_SYSFS``), with
    tensors the allocator's bytes and the runtime categories the release's share of the cap;
    the rank probe finds the core's folder from ``NEURON_RT_VISIBLE_CORES`` and reads them; as
    the process exits every total goes to 0 (no later reader takes them for its own)."""
    sysfs, held = tmp_path / "sysfs", tmp_path / "while-held"
    code = f"""
    import shutil, torch
    x = torch.ones(1 << 16, device="neuron")
    torch.neuron.synchronize()
    shutil.copytree({str(sysfs)!r}, {str(held)!r})  # the counters while the process holds the core
    """
    proc = _run(code, tmp_path, NEURON_REHEARSAL_SYSFS=str(sysfs), NEURON_RT_VISIBLE_CORES="5",
                NEURON_REHEARSAL_NUM_CORES="8", NEURON_REHEARSAL_CORES_PER_DEVICE="4",
                NEURON_REHEARSAL_CORE_MEMORY_BYTES=str(24 << 20))
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder, _ = device_memory.core_folder(str(held), "5")
    assert folder == str(held / "neuron1" / "neuron_core1" / "stats" / "memory_usage" / "device_mem")
    counters = device_memory.read_counters(folder)
    assert set(counters) == {"collectives", "constants", "dma_rings", "driver_memory", "model_code",
                             "model_shared_scratchpad", "nonshared_scratchpad", "notifications",
                             "runtime_memory", "tensors", "uncategorized"}
    assert counters["tensors"]["total"] == 4 << 16
    assert counters["model_code"]["total"] == 192 * KIB  # 2 x 96 MB of a 24 GiB core, at 24 MiB: 1/1024
    assert counters["model_shared_scratchpad"]["total"] == 1024 * KIB
    assert (Path(folder) / "tensors" / "present").read_text().strip() == str(4 << 16)
    assert device_memory.core_folder(str(held), "6")[0] is None  # no counters written for core 6
    after = device_memory.read_counters(device_memory.core_folder(str(sysfs), "5")[0])
    assert {c["total"] for c in after.values()} == {0}  # the process ended: the runtime freed its memory


def test_a_driver_numbering_physical_cores_is_refused_not_misread(tmp_path):
    """The sysfs guide does not say whether ``neuron_core<C>`` counts logical or physical cores
    at LNC=2; the host matrix's tools-2.22 host numbers them physically (8 a device, the
    logical core's counters under its first physical core). There the probe reads nothing and
    says why: taking 8 for the logical count put logical core 5 at ``neuron0/neuron_core5``,
    which is logical core 2's second physical core."""
    sysfs, held = tmp_path / "sysfs", tmp_path / "while-held"
    code = f"""
    import shutil, torch
    x = torch.ones(1 << 16, device="neuron")
    torch.neuron.synchronize()
    shutil.copytree({str(sysfs)!r}, {str(held)!r})
    """
    proc = _run(code, tmp_path, NEURON_REHEARSAL_SYSFS=str(sysfs), NEURON_RT_VISIBLE_CORES="5",
                NEURON_REHEARSAL_NUM_CORES="8", NEURON_REHEARSAL_CORES_PER_DEVICE="4",
                NEURON_REHEARSAL_CORE_MEMORY_BYTES=str(24 << 20),
                NEURON_REHEARSAL_HOST=str(rehearsal.HOSTS_DIR / "tools-2.22.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (held / "neuron1" / "core_count").read_text().strip() == "8"
    assert device_memory.read_counters(str(held / "neuron1" / "neuron_core2" / "stats" / "memory_usage" /
                                           "device_mem"))["tensors"]["total"] == 4 << 16
    # another process's counters on device 0 (logical core 2: physical cores 4 and 5)
    (held / "neuron0" / "neuron_core5" / "stats" / "memory_usage" / "device_mem" / "tensors").mkdir(parents=True)
    (held / "neuron0" / "core_count").write_text("8\n")
    folder, why = device_memory.core_folder(str(held), "5", lnc=2)
    assert folder is None and "lists 8 cores a device" in why and "not documented" in why, why


def _one_change(release_file: str, label: str) -> dict:
    """A stand-in release's one change, its old text once in the stand-in's source, and its
    version carrying ``label``."""
    release = json.loads((REPO_ROOT / "neuron_standins/releases" / release_file).read_text())
    (change,) = release["changes"]
    source = (REPO_ROOT / "neuron_standins/neuronx-cc" / change["file"]).read_text()
    assert source.count(change["old"]) == 1 and release["version"].endswith(label)
    return change


def test_the_more_scratchpad_release_changes_one_number():
    """Release 4 changes the stand-in compiler's scratchpad per core only: 1 -> 4 GiB of a
    24 GiB core (3 GiB more), nothing else."""
    change = _one_change("rehearsal.4-more-scratchpad.json", "+rehearsal.4")
    before, after = (int(text.split(":")[1].split("*")[0]) for text in (change["old"], change["new"]))
    assert change["old"].split(":")[0] == change["new"].split(":")[0] == '    "model_shared_scratchpad"'
    assert (before, after - before) == (1024, 3 * 1024)  # MiB: 3 GiB more


def _compiled(tmp_path, stack, index, first_step_s, state="cold") -> Launch:
    launch = _each_rank(_launch(tmp_path, stack, index), first_step_s=first_step_s * (1 + 0.02 * index))
    events = {"cold": CompileCacheEvents(compiled=2, cached=2),  # 2 ranks
              "mixed": CompileCacheEvents(compiled=1, cached=3), "warm": CompileCacheEvents(compiled=0, cached=4)}[state]
    return replace(launch, figures=replace(launch.figures, compile_cache=events))


def test_a_slower_compile_on_a_cold_cache_is_flagged(tmp_path):
    """The first step on a cold compile cache (the compile) compared over launches with the
    loose ``compile_slower_than``: a compiler four times slower per graph is SLOWER COMPILE; an
    A/A and 20% more (within the 50%) are PASS; the page lists each session's cache state."""
    trusted = [_compiled(tmp_path, "trusted", i, 1.3) for i in range(1, 4)]
    slow = [_compiled(tmp_path, "candidate", i, 4.3) for i in range(1, 4)]
    verdict = perf_compare.judge(trusted + slow, POLICY)
    assert verdict.findings == (Finding.SLOWER_COMPILE,) and not verdict.passed
    first = next(c for c in verdict.comparisons if c.figure == "first_step_s")
    assert first.flagged and first.threshold == POLICY.compile_slower_than and "slower by" in first.change()
    warm = [_compiled(tmp_path, "trusted", 9, 0.33, state="warm")]
    page = "\n".join(perf_page.render(verdict, POLICY, trusted + slow, warm))
    assert "## Performance: SLOWER COMPILE" in page and "| `perf/trusted-9` | trusted | warm | 0.389 | 0 | 4 |" in page
    assert "| `perf/candidate-1` | candidate | cold | 4.386 | 2 | 2 |" in page
    same = [_compiled(tmp_path, "candidate", i, 1.3) for i in range(1, 4)]
    assert perf_compare.judge(trusted + same, POLICY).findings == (Finding.PASS,)
    within = [_compiled(tmp_path, "candidate", i, 1.3 * 1.2) for i in range(1, 4)]
    assert perf_compare.judge(trusted + within, POLICY).findings == (Finding.PASS,)


def test_a_first_step_that_did_not_compile_cold_is_not_judged(tmp_path):
    """A launch whose log shows only cache hits did not compile, one with more hits than its
    other ranks explain found programs cached before: its first step is not a cold compile,
    so the first step is not compared (the page says which session and what its log showed);
    launches that compile nothing (cpu) have no first-step comparison at all."""
    trusted = [_compiled(tmp_path, "trusted", i, 1.3) for i in range(1, 4)]
    mixed = [_compiled(tmp_path, "candidate", 1, 0.8, state="mixed"),
             *[_compiled(tmp_path, "candidate", i, 1.3) for i in range(2, 4)]]
    assert "compile cache was mixed" in perf_compare.judge(trusted + mixed, POLICY).compile_notes[0]
    hit = [_compiled(tmp_path, "candidate", 1, 0.33, state="warm"),
           *[_compiled(tmp_path, "candidate", i, 1.3) for i in range(2, 4)]]
    verdict = perf_compare.judge(trusted + hit, POLICY)
    assert verdict.findings == (Finding.PASS,) and not any(c.figure == "first_step_s" for c in verdict.comparisons)
    assert verdict.compile_notes == ("first step not judged: candidate session candidate-1: its compile cache was "
                                     "warm ({'compiled': 0, 'cached': 4, 'cached_failure': 0})",)
    assert "- first step not judged: candidate session candidate-1" in "\n".join(
        perf_page.render(verdict, POLICY, trusted + hit))
    plain = perf_compare.judge(_series(tmp_path), POLICY)
    assert not plain.compile_notes and not any(c.figure == "first_step_s" for c in plain.comparisons)


def test_trn2_sessions_compile_into_a_cache_of_their_own(tmp_path):
    """A trn2 performance session gets a new compile cache in its report folder (its first step
    compiles cold, whatever another session compiled); a warm session names an earlier one's;
    cpu sessions are as before."""
    cold = perf_launch.session_command(Path("python"), "trn2", tmp_path / "trusted-1", ["--neuron-dress-rehearsal"])
    assert cold[cold.index("--neuron-compile-cache") + 1] == str(tmp_path / "trusted-1" / "neuron-compile-cache")
    warm = perf_launch.session_command(Path("python"), "trn2", tmp_path / "trusted-1-warm", [],
                                        compile_cache=tmp_path / "trusted-1" / "neuron-compile-cache")
    assert warm[warm.index("--neuron-compile-cache") + 1] == str(tmp_path / "trusted-1" / "neuron-compile-cache")
    assert "--neuron-compile-cache" not in perf_launch.session_command(Path("python"), "cpu", tmp_path / "t", [])


def test_an_eager_kernel_launch_on_the_device_compiles_once_then_hits_the_cache(tmp_path):
    """The stand-in's eager NKI launch on ``neuron`` tensors goes through the compile cache once
    per process and specialization: a new cache logs one compile (``Compiler status PASS``), a
    second process on the same cache one hit, a new shape another compile; CPU tensors none."""
    code = """
    import torch, torch_neuronx
    from nkilib.core.embeddings.rope_hf import rope_hf
    def launch(seq, device):
        q = torch.randn(1, 2, seq, 16, device=device); k = torch.randn(1, 1, seq, 16, device=device)
        torch_neuronx.wrap_nki(rope_hf)[2](q, k, torch.empty_like(q), torch.empty_like(k),
                                          rope_cache=torch.randn(seq, 32, device=device))
    for _ in range(3):
        launch(256, "neuron")
    launch(256, "cpu")
    import sys
    if len(sys.argv) > 1:
        launch(512, "neuron")
    """
    cache = str(tmp_path / "neff-cache")
    env = dict(NEURON_COMPILE_CACHE_URL=cache, NEURON_RT_VISIBLE_CORES="1", NEURON_LOGICAL_NC_CONFIG="2")
    first = _run(code, tmp_path, **env)
    second = _run(code, tmp_path, **env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert first.stderr.count("Compiler status PASS") == 1 and "Using a cached neff" not in first.stderr
    assert second.stderr.count("Using a cached neff") == 1 and "Compiler status PASS" not in second.stderr
    assert len(list(Path(cache).glob("neuronxcc-*/MODULE_*/model.neff"))) == 1


def test_the_slower_compiler_release_changes_one_number():
    """Release 5 changes the stand-in compiler's modelled compile time per graph only: 0.5 s to
    2.0 s on a cache miss (four times), nothing else."""
    change = _one_change("rehearsal.5-slow-compiler.json", "+rehearsal.5")
    before, after = (float(text.split("=")[1].split("#")[0]) for text in (change["old"], change["new"]))
    assert (before, after) == (0.5, 2.0)


def test_the_relabelled_release_changes_nothing():
    """The A/A release of the performance rehearsal is the installed stand-in compiler under
    another version label: no change, so any verdict but PASS with thresholds from an A/A
    series is a false alarm."""
    release = json.loads((REPO_ROOT / "neuron_standins/releases/rehearsal.aa-relabelled.json").read_text())
    assert release["changes"] == [] and release["version"].endswith("+rehearsal.aa")
    assert release["source"] == "neuron_standins/neuronx-cc" and release["distribution"] == "neuronx-cc"


# ----------------------------------------------------------------------------- added after mutation testing (round 3)


def test_the_launches_without_device_counters_are_named_exactly(tmp_path):
    """The NOT MEASURED line names every launch that lacks the runtime's counters, and only those
    (not a launch that has them, nor one that measured nothing at all)."""
    launches = _series(tmp_path)
    launches[-2:] = [_each_rank(launch, device_peak_gib=None) for launch in launches[-2:]]
    problems = perf_compare.measurement_problems(launches + [Launch("candidate", tmp_path / "died", None, "failed")])
    assert ("the runtime's device memory was counted in some launches, not in others: "
            "candidate candidate-2, candidate candidate-3 lack it") in problems, problems


def test_figures_only_keeps_the_leaks_and_the_compile_notes_and_judges_no_step(tmp_path):
    """Without measured thresholds the verdict is FIGURES ONLY, but its page still lists what
    the figures show: each candidate launch's growth beyond the trusted stack's, why the first
    step was not compared, and the step time as not judged (also in upgrade.json)."""
    trusted = [_compiled(tmp_path, "trusted", i, 1.3) for i in range(1, 4)]
    candidate = [_compiled(tmp_path, "candidate", 1, 0.33, state="warm"),
                 *[_compiled(tmp_path, "candidate", i, 1.3) for i in range(2, 4)]]
    candidate = [_each_rank(launch, allocated_growth_mib_per_step=3.0) for launch in candidate]
    policy = PerfPolicy(0.05, 0.03, 1.0, "not measured here", judged=False)
    verdict = perf_compare.judge(trusted + candidate, policy)
    assert verdict.findings == (Finding.FIGURES_ONLY,) and verdict.passed and len(verdict.leaks) == 3
    assert verdict.step_judged is False and verdict.problems == ()
    assert perf_compare.Verdict.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict  # upgrade.json
    assert verdict.compile_notes and "compile cache was warm" in verdict.compile_notes[0]
    page = "\n".join(perf_page.render(verdict, policy, trusted + candidate))
    assert "- first step not judged: candidate session candidate-1" in page
    assert "- leak: candidate-1: allocated device memory grows 3.000 MiB per steady step" in page
