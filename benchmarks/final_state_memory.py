"""Benchmark: host memory a rank spends recording the run's final weights.

    .venv/bin/python benchmarks/final_state_memory.py

The final-state probe (``fixtures.rank.probes.final_state.save_local_shards``) makes each rank copy and
write only its own FSDP shard of every tensor, after the last step; the harness assembles
them (``fixtures.data.final_state``). It used to ``full_tensor()`` the whole model on every rank at
every logged step. Prints, for a real cpu-tier run (tiny model, 2 ranks): each rank's shard
bytes and peak RSS; then, by the same shard arithmetic (``torch.chunk`` over dim 0 of every
tensor, as FSDP2 shards), the bytes per rank for Qwen3-4B in float32 at 64 ranks, against a
full gather. Figures only, no assertion.
"""

from __future__ import annotations

import json
import math
import sys

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

import torch  # noqa: E402  (the repository on sys.path first, for all below)

from fixtures.data import assets as asset_builder  # noqa: E402
from fixtures.rank.model_shapes import QWEN3_4B_INSTRUCT_2507  # noqa: E402
from fixtures.rank.titan.tiny_qwen3 import qwen3_model_from_hf_config  # noqa: E402
from fixtures.runs.cache import RunCache  # noqa: E402
from fixtures.runs.catalogue import LOAD_TIED_TRAIN_EXPORT  # noqa: E402
from fixtures.runs.inputs import RunInputs  # noqa: E402
from fixtures.session.run_fixtures import hf_env  # noqa: E402
from fixtures.tiers.tier_profile import cpu_profile  # noqa: E402


def shard_bytes(shapes: dict[str, tuple], world: int, itemsize: int = 4) -> list[int]:
    """Bytes of each rank's shard when every tensor is chunked over dim 0 into ``world``."""
    per_rank = [0] * world
    for shape in shapes.values():
        rows, rest = shape[0], math.prod(shape[1:])
        chunk = math.ceil(rows / world)
        for rank in range(world):
            per_rank[rank] += max(0, min(chunk, rows - rank * chunk)) * rest * itemsize
    return per_rank


def _model_shapes(hf: dict) -> dict[str, tuple]:
    with torch.device("meta"):
        model = qwen3_model_from_hf_config(hf).build()
    return {n: tuple(t.shape) for n, t in model.state_dict().items()}


def main() -> int:
    cache = REPO / ".cache" / "conformance"
    assets = asset_builder.ensure_assets(cache)
    # the cpu session's inputs and environment, so the key is its run's: reuses that run
    runs = RunCache(cache / "runs", RunInputs(cpu_profile(), assets, cache), rank_env=hf_env(cache))
    run = runs.get(LOAD_TIED_TRAIN_EXPORT)
    if not run.ok:
        print(run.failure_text())
        return 1
    print(f"tiny model, {run.world_size} ranks, run {run.run_dir}")
    for rank in range(run.world_size):
        shard = run.probe_dir / "final_state" / f"rank{rank}.safetensors"
        metrics = [json.loads(l) for l in (run.probe_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()]
        peak = max(m.get("memory/max_reserved(GiB)", float("nan")) for m in metrics)
        print(f"  rank {rank}: shard file {shard.stat().st_size / 1e6:.3f} MB, peak RSS {peak:.3f} GiB")
    full = sum(t.numel() * t.element_size() for t in run.final_state().values())
    print(f"  a full gather would hold {full / 1e6:.3f} MB on every rank")
    shapes = _model_shapes(QWEN3_4B_INSTRUCT_2507)
    per_rank = shard_bytes(shapes, 64)
    total = sum(math.prod(s) * 4 for s in shapes.values())
    print(f"Qwen3-4B float32, 64 ranks (arithmetic): largest shard {max(per_rank) / 1e9:.3f} GB per rank; "
          f"a full gather {total / 1e9:.2f} GB per rank, {64 * total / 1e9:.0f} GB over the host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
