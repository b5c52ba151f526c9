"""Packed documents (issue 44): what the transformers reference does with the documents of a
row is chosen on purpose from the run's attention (``hf_reference.packed_documents_attention``)
and no longer follows ``use_cache`` in config.json; the expected document mask comes from the
EOS tokens of the data (``packing.eos_document_ids``); torchtitan's flex mask is evaluated on
CPU (``fixtures.rank.titan.flex_mask``)."""

from __future__ import annotations

import pytest
import torch

from fixtures.data import hf_reference, packing

pytestmark = pytest.mark.meta


def test_the_runs_attention_class_decides_the_references_masking():
    """SDPA (upstream's and the suite's) is causal over the row, flex and varlen causal within
    each document; a class the table lacks, layers that disagree, or none, are refused."""
    sdpa = {f"layers.{i}.attention.inner_attention": "ScaledDotProductAttention" for i in range(2)}
    assert hf_reference.packed_documents_attention(sdpa) == hf_reference.ROW_CAUSAL
    flex = {"layers.0._checkpoint_wrapped_module.attention.inner_attention": "FlexAttention",
            "layers.0._checkpoint_wrapped_module.attention.rope": "CosSinRoPE"}
    assert hf_reference.packed_documents_attention(flex) == hf_reference.DOCUMENT_CAUSAL
    for bad in ({"layers.0.attention.inner_attention": "NkiFlashAttention"}, {},
                {"a.inner_attention": "FlexAttention", "b.inner_attention": "ScaledDotProductAttention"}):
        with pytest.raises(hf_reference.UnknownAttention):
            hf_reference.packed_documents_attention(bad)


def _tiny_qwen3(use_cache: bool):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, use_cache=use_cache,
                         attn_implementation="sdpa")
    return Qwen3ForCausalLM(config).eval()


def test_the_reference_masks_documents_as_asked_whatever_use_cache_says():
    """On two packed rows (positions restarting inside them), ROW_CAUSAL gives the same logits
    under config.json's use_cache true and false (the logits of a call with no positions, causal
    over the row, as to the attention); DOCUMENT_CAUSAL gives each document's logits alone; the
    two differ after the first document."""
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]])
    with torch.no_grad():
        out = {uc: {kind: hf_reference.attended_row_logits(_tiny_qwen3(uc), ids, positions, kind)
                    for kind in (hf_reference.ROW_CAUSAL, hf_reference.DOCUMENT_CAUSAL)} for uc in (True, False)}
        model = _tiny_qwen3(True)
        alone = model(input_ids=ids[1:, 8:], position_ids=torch.arange(4)[None]).logits.float()
    for kind in (hf_reference.ROW_CAUSAL, hf_reference.DOCUMENT_CAUSAL):
        torch.testing.assert_close(out[True][kind], out[False][kind], rtol=0, atol=0)
    row, doc = out[True][hf_reference.ROW_CAUSAL], out[True][hf_reference.DOCUMENT_CAUSAL]
    torch.testing.assert_close(doc[1:, 8:], alone, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(row[:, :5], doc[:, :5], rtol=1e-6, atol=1e-6)
    assert (row[1, 8:] - doc[1, 8:]).abs().max() > 1e-3


def test_eos_documents_match_the_packed_rows_and_their_positions(assets):
    """On the suite's dataset the EOS-closed stream's inputs are ``first_rows``' inputs, and a
    document starts exactly where its position is 0 or a row starts (the packer's convention,
    derived independently here)."""
    rows = packing.first_rows(assets.dataset_dir, assets.tokenizer_dir, rank=0, world_size=1, rows=4, seq_len=256)
    eos = packing.eos_document_ids(assets.dataset_dir, assets.tokenizer_dir, rank=0, world_size=1, rows=4,
                                   seq_len=256)
    assert eos["inputs"] == rows["inputs"]
    for documents, positions in zip(eos["documents"], rows["positions"]):
        starts = [i for i in range(len(documents)) if i == 0 or documents[i] != documents[i - 1]]
        assert starts == [i for i, p in enumerate(positions) if p == 0 or i == 0]
    assert max(len(set(d)) for d in eos["documents"]) > 1
