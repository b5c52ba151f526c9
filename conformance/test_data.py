"""Data contracts: which samples each data-parallel rank reads, and how they are packed.

The expected batch of every rank comes from the corpus files and the tokenizer's own files
(``fixtures.data.packing``), never from the run; the run's first batch is recorded inside it, as
the model saw it (``fixtures.rank.probes.batch``). The labels of the same batch are held by
``conformance/test_loss.py::test_labels_are_the_inputs_shifted_by_one``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.rank import probes
from fixtures.data import packing
from fixtures.contract import expect, fail, require_trained
from fixtures.rank.titan import training_batch
from fixtures.runs.catalogue import DENSE_NATIVE

pytestmark = [pytest.mark.data, pytest.mark.slow]


def test_each_rank_reads_its_shard_packed_in_order(titan_runs):
    """With dp > 1, rank r's first batch is the first ``local_batch_size`` rows of
    ``seq_len`` tokens of its contiguous block of the dataset (``Dataset.shard(dp, r)``),
    every document tokenized with the configured tokenizer, BOS (if the tokenizer has one)
    first and EOS last, in file order; positions restart at 0 at every document and at a row
    that starts inside one. So the ranks
    read different samples, none twice, and a packer that drops, reorders, duplicates or
    mis-cuts tokens, or a sampler that gives two ranks the same block, fails. In the
    token-folded layout (pytorch/torchtitan#4121) the batch is one stream of the same tokens
    with no rows, and positions restart at every document and every ``seq_len`` tokens into
    one (the packer's chunks of a long document)."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    config = run.resolved_config()
    dp = run.probe(probes.parallel, 0)["parallel_dims"]["dp_shard"]
    expect(dp > 1, "the run shards data over more than one rank", "> 1", dp, run)
    rows, seq_len = training_batch.resolved_batch(config)
    dataset, tokenizer = Path(config["dataloader"]["dataset_path"]), Path(config["hf_assets_path"])
    blocks = []
    for rank in range(dp):
        batch = run.probe(probes.batch, rank)
        expect("positions" in batch, f"rank {rank}'s batch carries per-document positions",
               "positions", sorted(batch), run)
        if batch["inputs"].dim() == 1:
            # The token-folded layout (pytorch/torchtitan#4121, the packer of #4088): a
            # microbatch is one stream of rows x seq_len tokens with no rows in it, and a
            # document longer than seq_len (max_context_length) is cut into chunks of that
            # many tokens, each restarting its positions (components/data/packing.py,
            # ConcatThenSplitPackingConfig: "chunks long documents").
            expected = packing.first_rows(dataset, tokenizer, rank=rank, world_size=dp, rows=1,
                                          seq_len=rows * seq_len)
            expected["positions"] = [[p % seq_len for p in row] for row in expected["positions"]]
            batch = {k: v.reshape(1, -1) for k, v in batch.items()}
            rows_seen, row_len = 1, rows * seq_len
        else:
            expected = packing.first_rows(dataset, tokenizer, rank=rank, world_size=dp, rows=rows, seq_len=seq_len)
            rows_seen, row_len = rows, seq_len
        actual = batch["inputs"].tolist()
        if actual != expected["inputs"]:
            row, col = _first_difference(actual, expected["inputs"])
            fail(f"rank {rank} reads documents {expected['documents']} of its block, packed in order",
                 _around(expected["inputs"][row], col), _around(actual[row], col), run,
                 detail=f"first difference at row {row}, column {col} (of {rows_seen} x {row_len}); "
                        f"dataset {dataset}, tokenizer {tokenizer}")
        if batch["positions"].tolist() != expected["positions"]:
            got = batch["positions"].tolist()
            row, col = _first_difference(got, expected["positions"])
            fail(f"rank {rank}: positions restart at 0 at every document and row",
                 _around(expected["positions"][row], col), _around(got[row], col), run,
                 detail=f"first difference at row {row}, column {col}")
        blocks.append(set(expected["documents"]))
    overlap = [(a, b) for a in range(dp) for b in range(a + 1, dp) if blocks[a] & blocks[b]]
    expect(not overlap, "no two ranks read the same document", "disjoint blocks", overlap, run)


def _first_difference(actual: list[list[int]], expected: list[list[int]]) -> tuple[int, int]:
    """(row, column) of the first value where two grids differ."""
    row = next(i for i, (a, e) in enumerate(zip(actual, expected)) if a != e)
    col = next(j for j, (a, e) in enumerate(zip(actual[row], expected[row])) if a != e)
    return row, col


def _around(row: list[int], col: int) -> list[int]:
    """The values of ``row`` around column ``col``, for a failure message."""
    return row[max(0, col - 3):col + 5]


PACKED_ROWS = 4  # rows of the grid: a batch > 1, so the mask's per-row indexing is exercised


def test_flex_document_mask_is_causal_within_the_documents_the_eos_tokens_close(tier, assets):
    """Packed documents (issue 44): torchtitan's flex attention (its default backend; the cpu
    tier's layers run SDPA, causal over the row, and the reference of ``test_loss.py`` does the
    same on purpose: ``hf_reference.ATTENTION_ON_PACKED_DOCUMENTS``) attends through the mask
    ``Decoder.get_attention_masks`` builds from the positions. Evaluated on every (row, query,
    key) of ``PACKED_ROWS`` real rows of the suite's dataset (``seq_len`` of the cpu tier's
    configs, tokenized and packed from the data with their positions: ``packing.first_rows``),
    on CPU with no launch (``fixtures.rank.titan.flex_mask``), it must equal the mask computed
    from the end-of-sequence tokens alone (``packing.eos_document_ids``): a query attends a key
    exactly when the key is not after it and no EOS closes a document between them. The rows
    must hold more than one document (else causal over the row would pass too)."""
    from fixtures.rank.model_shapes import CPU_SEQ_LEN
    from fixtures.rank.titan import flex_mask
    import torch

    dataset, tokenizer = assets.dataset_dir, assets.tokenizer_dir
    rows = packing.first_rows(dataset, tokenizer, rank=0, world_size=1, rows=PACKED_ROWS, seq_len=CPU_SEQ_LEN)
    by_eos = packing.eos_document_ids(dataset, tokenizer, rank=0, world_size=1, rows=PACKED_ROWS,
                                      seq_len=CPU_SEQ_LEN)
    expect(rows["inputs"] == by_eos["inputs"], "the rows packed from the data and the EOS-closed stream hold the "
           "same tokens", "equal", "different", detail=f"dataset {dataset}, tokenizer {tokenizer}")
    documents = torch.tensor(by_eos["documents"])
    positions = torch.tensor(rows["positions"])
    actual = flex_mask.document_mask(positions)
    if actual.shape[0] == 1 and PACKED_ROWS > 1:  # token-folded layout: the rows are one stream, each row its
        # own document from its start (its positions restart there: packing._from_row_start)
        documents = (documents + 100_000 * torch.arange(PACKED_ROWS)[:, None]).reshape(1, -1)
    length = documents.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    expected = (documents[:, :, None] == documents[:, None, :]) & causal
    per_row = [len(set(r)) for r in by_eos["documents"]]
    expect(sum(n > 1 for n in per_row) > 1, "more than one row packs more than one document",
           "> 1 rows", f"documents per row {per_row}")
    expect(not bool((expected == causal).all()), "the documents' mask differs from causal over the row",
           "some pair masked", "none")
    expect_shape = tuple(expected.shape)
    expect(tuple(actual.shape) == expect_shape, "torchtitan's mask covers every (row, query, key)", expect_shape,
           tuple(actual.shape))
    wrong = (actual != expected).nonzero().tolist()
    first = [f"row {b} query {q} key {k}: torchtitan {bool(actual[b, q, k])}, documents {documents[b, q].item()} "
             f"and {documents[b, k].item()}" for b, q, k in wrong[:3]]
    expect(not wrong, "torchtitan's flex mask attends within each EOS-closed document, causally",
           "0 (row, query, key) differ", f"{len(wrong)} of {expected.numel()} differ",
           detail=f"documents per row {per_row}; first: {first}")
