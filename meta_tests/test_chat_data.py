"""The chat (SFT) data of the masked-label contracts (``fixtures.data.chat_data``) and their
pytest-side reference (``fixtures.data.chat_reference``): every sample fills more than half a
row and at most one, the data is deterministic, the reference masks exactly the prompt, and a
run naming the data keeps it through its record."""

from __future__ import annotations

import json

import pytest

from fixtures.data import chat_data, chat_reference, packing
from fixtures.data.chat_data import ChatPairs
from fixtures.rank.titan import chat_loader
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


# Qwen3-Instruct's ChatML as its tokenizer_config.json writes it (a line break after every
# turn, the last included), with Qwen3-Instruct's end of sequence, <|im_end|>: the trn2 tier's
# model renders so, and no Qwen3 checkpoint is on this machine.
QWEN_STYLE_TEMPLATE = ("{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
                       "+ '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                       "{{ '<|im_start|>assistant\\n' }}{%- endif %}")


def _qwen_style(folder, out):
    chat_data.checkpoint_with_template(folder, out)
    (out / chat_data.TEMPLATE_FILE).write_text(QWEN_STYLE_TEMPLATE)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").unlink()  # a linked file: replaced, never written through
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "<|im_end|>"}))


@pytest.mark.parametrize("template", ["suite", "qwen3_style"])
def test_the_reference_rows_are_what_torchtitans_chat_dataset_documents(assets, chat_checkpoint, tmp_path, template):
    """The reference's rows (from transformers and the data) equal the rows torchtitan's own
    ChatDataset packs from the same samples (0.3.0, the fork's vintage), with the suite's
    template and with a Qwen3-style one whose rendering ends in a line break and whose end of
    sequence is the template's own <|im_end|> (no duplicate, no trained line break). A check of
    the suite's reference on the trn2 tier's kind of template, which no run here exercises."""
    from datasets import load_dataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import ChatDataset

    folder = chat_checkpoint
    if template == "qwen3_style":
        folder = tmp_path / "qwen3_style"
        _qwen_style(chat_checkpoint, folder)
    seq_len, data = 64, tmp_path / "data"
    chat_data.build(ChatPairs(samples=4), packing.documents(assets.dataset_dir), folder, seq_len, data)
    titan = ChatDataset(load_dataset(str(data), split="train"), HuggingFaceTokenizer(tokenizer_path=str(folder)),
                        chat_loader.messages, seq_len=seq_len)
    rows = []
    for (inputs, labels), _ in zip(titan, range(2)):
        rows.append((inputs["input"].tolist(), labels.tolist(), inputs["positions"].tolist()))
    (expected,) = chat_reference.first_rows(data, folder, ranks=1, rows=2, seq_len=seq_len)
    eos = chat_reference.tokenizer_of(folder).eos_token_id
    batch = chat_reference.as_batch(expected, seq_len, eos)
    assert [r[0] for r in rows] == batch["inputs"].tolist()
    assert [r[1] for r in rows] == batch["labels"].tolist()
    assert [r[2] for r in rows] == batch["positions"].tolist()


def test_each_epoch_reshuffles_every_ranks_own_block(assets, tmp_path):
    """The reference order of later epochs (``chat_reference.rank_order``): epoch 1 is the
    seed-42 split; epoch 2 and 3 hold the same samples per rank (each rank's own block), in the
    orders ``Dataset.shuffle`` gives that block with seeds 43 and 44, which differ from epoch 1's
    on this data; epochs count from 1."""
    from datasets import Dataset

    samples = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
               for i in range(16)]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "data.json").write_text("".join(json.dumps(s) + "\n" for s in samples))
    orders = {e: chat_reference.rank_order(folder, 2, e) for e in (1, 2, 3)}
    for rank in range(2):
        block = orders[1][rank]
        for epoch in (2, 3):
            assert sorted(orders[epoch][rank]) == sorted(block)
            shuffled = Dataset.from_dict({"i": block}).shuffle(seed=41 + epoch)["i"]
            assert orders[epoch][rank] == list(shuffled)
    assert not set(orders[2][0]) & set(orders[2][1])
    assert orders[2] != orders[1] and orders[3] != orders[2]
    with pytest.raises(ValueError, match="count from 1"):
        chat_reference.rank_order(folder, 2, 0)
