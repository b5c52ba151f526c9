"""The chat (SFT) data of the masked-label contracts (``fixtures.data.chat_data``) and their
pytest-side reference (``fixtures.data.chat_reference``): every sample fills more than half a
row and at most one, the data is deterministic, the reference masks exactly the prompt, and a
run naming the data keeps it through its record."""

from __future__ import annotations

import json

import pytest

from fixtures.data import chat_data, chat_reference, packing
from fixtures.data.chat_data import ChatPairs
from fixtures.runs.spec import RunSpec

pytestmark = pytest.mark.meta


@pytest.fixture(scope="module")
def chat_checkpoint(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("chat") / "hf_tied_chat"
    chat_data.checkpoint_with_template(assets.hf_dir(True), out)
    return out


@pytest.mark.parametrize("seq_len", [64, 256])
def test_every_sample_fills_one_row_and_masks_its_prompt(assets, chat_checkpoint, tmp_path, seq_len):
    """Built twice, byte for byte the same; every sample's inputs number more than half of
    ``seq_len`` and at most ``seq_len``; the reference masks its prompt positions but the last
    and labels every later position with the next token, the last being the end of sequence."""
    texts, pairs = packing.documents(assets.dataset_dir), ChatPairs(samples=6)
    for name in ("a", "b"):
        chat_data.build(pairs, texts, chat_checkpoint, seq_len, tmp_path / name)
    assert (tmp_path / "a" / "data.json").read_bytes() == (tmp_path / "b" / "data.json").read_bytes()
    tokenizer = chat_reference.tokenizer_of(chat_checkpoint)
    samples = chat_data.read_samples(tmp_path / "a")
    assert len({json.dumps(s) for s in samples}) == len(samples) == 6
    for index, sample in enumerate(samples):
        s = chat_reference.tokenized(tokenizer, index, sample)
        assert seq_len // 2 < len(s.inputs) <= seq_len, (index, len(s.inputs))
        prompt = tokenizer.apply_chat_template(sample["messages"][:1], add_generation_prompt=True)
        prompt = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
        assert s.labels[:len(prompt) - 1] == [-100] * (len(prompt) - 1)
        assert s.labels[len(prompt) - 1:] == s.inputs[len(prompt):] + [tokenizer.eos_token_id]
        assert 0 < s.unmasked < len(s.labels)


def test_the_rows_pad_with_masked_labels_and_restart_positions():
    sample = chat_reference.Sample(index=0, inputs=[5, 6, 7], labels=[-100, 7, 9])
    rows = chat_reference.as_batch([sample], seq_len=5, eos=9)
    assert rows["inputs"].tolist() == [[5, 6, 7, 9, 9]]
    assert rows["labels"].tolist() == [[-100, 7, 9, -100, -100]]
    assert rows["positions"].tolist() == [[0, 1, 2, 0, 1]]


def test_a_folder_with_its_own_template_is_recognised(assets, chat_checkpoint, tmp_path):
    assert not chat_data.has_template(assets.hf_dir(True))
    assert chat_data.has_template(chat_checkpoint)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert chat_data.has_template(tmp_path)


def test_a_chat_run_keeps_its_data_through_its_record():
    run = RunSpec(config="dense_native_chat", steps=1, chat=ChatPairs(samples=8))
    assert RunSpec.from_json(json.loads(json.dumps(run.to_json()))) == run
    assert "dataset=chat_pairs-8" in run.describe()
    with pytest.raises(ValueError, match="not both"):
        from fixtures.data.aligned_rows import AlignedRows

        RunSpec(config="dense_native", chat=ChatPairs(samples=8), dataset=AlignedRows(2, 1, 2, 1))
