"""Benchmark: every exactness figure of the cpu tier per CPU kernel path.

    .venv/bin/python benchmarks/exactness_by_capability.py --run            # one session per path
    .venv/bin/python benchmarks/exactness_by_capability.py native=DIR avx2=DIR default=DIR   # read sessions

torch chooses each CPU kernel by the CPU's instruction set, and ``ATEN_CPU_CAPABILITY``
makes one machine take another's paths (``fixtures.tiers.machine``). ``--run`` runs the
contracts whose tolerance is an exactness figure (``EXACTNESS``) once under the machine's own
kernels and once under each of ``avx2`` and ``default``, each session with its own runs (the
kernel path keys every run), and prints, per contract and figure, the measured value on each
path beside the tolerance and its kind (``fixtures.oracles.numerics.Exactness``). Figures only,
no assertion: the contracts assert; this shows how far each figure is from its bound on each path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

from fixtures.oracles.numerics import CPU_NUMERICS  # noqa: E402  (the repository on sys.path first)
from fixtures.tiers import machine  # noqa: E402
from reports.session_report import SessionReport  # noqa: E402

# contract -> the tier profile's tolerance it is held to
EXACTNESS = {
    "conformance/test_rope.py::test_float32_parity_between_providers": "provider_atol",
    "conformance/test_rope.py::test_kernel_matches_the_model_module": "provider_atol",
    "conformance/test_rope.py::test_override_run_losses_match": "same_math_rtol",
    "conformance/test_parallel.py::test_rope_kernel_wrapper_under_tp_is_right_or_refuses": "same_math_rtol",
    "conformance/test_topology.py::test_two_nodes_match_one_node": "same_math_rtol",
    "conformance/test_resume.py::test_resume_restores": "resume_rtol",
    "conformance/test_training_loop.py::test_adamw_steps_are_torchs_adamw": "optimizer_ulps",
    "conformance/test_training_loop.py::test_accumulation_trains_like_one_microbatch": "accumulation_rtol",
    "conformance/test_training_loop.py::test_tensor_parallel_trains_like_no_tensor_parallel": "tp_rtol",
    "conformance/test_training_loop.py::test_all_ranks_train_like_fewer_ranks": "rank_scaling_rtol",
    "conformance/test_compile.py::test_compiled_losses_match_eager": "compile_rtol",
    "conformance/test_loss.py::test_first_step_loss_of_rank_0_equals_transformers": "first_loss_rtol",
}
PATHS = ("native", "avx2", "default")


def run_sessions(out: Path) -> dict[str, Path]:
    """One cpu-tier session of the exactness contracts per kernel path."""
    found = {}
    for path in PATHS:
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if path != "native":
            env["ATEN_CPU_CAPABILITY"] = path
        folder = out / f"exactness-{path}"
        print(f"exactness: {path} kernels -> {folder}", flush=True)
        subprocess.run([sys.executable, "-m", "pytest", *EXACTNESS, "-m", "cpu", "-q", "--report-dir", str(folder)],
                       cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        found[path] = folder
    return found


def figures(report_dir: Path) -> tuple[str, dict[tuple[str, str], object]]:
    """(the session's kernel paths, {(contract, figure): value}), outcomes as figure 'outcome'."""
    report = SessionReport.load(report_dir)
    label = (report.machine.numerics_label if report.machine else None) or "kernel paths not recorded"
    out: dict[tuple[str, str], object] = {}
    for c in report.contracts:
        base = c.nodeid.split("[", 1)[0]
        if base not in EXACTNESS:
            continue
        name = c.nodeid.split("::", 1)[1]
        out[(name, "outcome")] = c.outcome
        for figure, value in c.measured.items():
            if isinstance(value, (int, float)) and ("error" in figure or "ulps" in figure):
                out[(name, figure)] = value
    return label, out


def main(argv: list[str]) -> None:
    if argv[:1] == ["--run"]:
        sessions = run_sessions(REPO / "reports" / "out")
    else:
        sessions = {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in argv}
    read = {path: figures(folder) for path, folder in sessions.items() if (folder / "report.json").is_file()}
    print(f"this machine: {machine.label()}")
    for path, (label, _) in read.items():
        print(f"  {path}: {label}")
    tolerances = CPU_NUMERICS.tolerances()
    rows = sorted({key for _, found in read.values() for key in found})
    print(f"\n{'contract / figure':<100} {'tolerance (kind)':<44} " + " ".join(f"{p:>12}" for p in read))
    for contract, figure in rows:
        field = EXACTNESS[next(k for k in EXACTNESS if k.endswith("::" + contract.split("[", 1)[0]))]
        value, kind = tolerances[field]
        cells = []
        for _, found in read.values():
            v = found.get((contract, figure), "-")
            cells.append(f"{v:>12.3g}" if isinstance(v, float) else f"{str(v):>12}")
        print(f"{(contract + ' / ' + figure)[:100]:<100} {f'{field}={value} ({kind.name})':<44} " + " ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
