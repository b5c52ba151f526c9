"""The one-row-per-document datasets of the N-ranks contract hand both runs the same global
batch: checked with the suite's own packer (``fixtures.data.packing``, written from torchtitan's
documented sharding and packing), on the tiers' layouts."""

from __future__ import annotations

import json

import pytest

from fixtures.data import aligned_rows, packing
from fixtures.data.aligned_rows import AlignedRows
from fixtures.runs.spec import RunSpec

pytestmark = pytest.mark.meta

# (ranks, rows per rank and step, steps, reader ranks): cpu, the rehearsal, trn2.48xlarge at
# LNC=2, and a layout with two rows per rank.
LAYOUTS = [(2, 1, 7, 1), (4, 1, 7, 2), (64, 1, 7, 32), (4, 2, 3, 1), (4, 1, 7, 4)]


@pytest.mark.parametrize(("ranks", "rows", "batches", "readers"), LAYOUTS)
def test_each_reader_block_holds_its_ranks_rows_step_by_step(ranks, rows, batches, readers):
    """Read as torchtitan shards (contiguous blocks, ``packing.shard_bounds``), reader q's
    rows of step s are, in order, the rows ranks q*g..q*g+g-1 read at step s."""
    spec = AlignedRows(ranks, rows, batches, readers)
    order = spec.order()
    assert sorted(order) == list(range(spec.count))
    for step in range(batches):
        wide = [spec.document(r, step, j) for r in range(ranks) for j in range(rows)]
        narrow = []
        for q in range(readers):
            start, end = packing.shard_bounds(len(order), readers, q)
            narrow += order[start:end][step * spec.reader_rows:(step + 1) * spec.reader_rows]
        assert narrow == wide, f"step {step}"
    run = RunSpec(config="dense_native", dataset=spec)  # a run's input, kept through its record
    assert RunSpec.from_json(json.loads(json.dumps(run.to_json()))) == run
    assert f"dataset={spec.name}" in run.describe()


def test_bad_layouts_are_refused():
    with pytest.raises(aligned_rows.AlignedRowsError, match="must divide"):
        AlignedRows(ranks=4, rows=1, batches=2, reader_ranks=3)


def test_two_layouts_pack_into_the_same_global_batches(assets, tmp_path):
    """Built with the cpu tier's tokenizer: every document is one row (seq_len + 1 tokens
    with EOS), and the suite's packer gives the 1-rank reader, at each step, the rows the
    2 ranks read together."""
    seq_len, steps = 64, 3
    texts = packing.documents(assets.dataset_dir)
    folders = {}
    for readers in (2, 1):
        spec = AlignedRows(ranks=2, rows=1, batches=steps, reader_ranks=readers)
        folders[readers] = tmp_path / spec.name
        aligned_rows.build(spec, texts, assets.tokenizer_dir, seq_len, folders[readers])
    wide = [packing.first_rows(folders[2], assets.tokenizer_dir, rank=r, world_size=2, rows=steps,
                               seq_len=seq_len) for r in range(2)]
    narrow = packing.first_rows(folders[1], assets.tokenizer_dir, rank=0, world_size=1, rows=2 * steps,
                                seq_len=seq_len)
    assert all(p == list(range(seq_len)) for p in narrow["positions"]), "one document per row"
    for step in range(steps):
        assert narrow["inputs"][2 * step:2 * step + 2] == [wide[0]["inputs"][step], wide[1]["inputs"][step]]
    assert len({tuple(r) for r in narrow["inputs"]}) == 2 * steps, "every row differs"
