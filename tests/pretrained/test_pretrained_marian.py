"""Imported Hugging Face Marian models against `transformers.MarianMTModel`:
logits, greedy and beam search, on small random models saved with
`save_pretrained(safe_serialization=True)` beside locally trained tokenizers."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import torch

from helpers.marian_model import write_marian_model
from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.pretrained import from_preset

SENTENCES = [
    "Der Hund sieht einen roten Apfel.",
    "Die Katze mag das Buch!",
    "Ein alter Mann öffnet die Tür im Garten, oder nicht?",
    "Mein Bruder braucht 3 Flaschen Wasser.",
    "Das kleine Kind zeichnet die Blumen um 7 Uhr.",
    "Der König",
]
TARGETS = ["The dog sees a red apple.", "The cat likes the book!", "An old man",
           "My brother needs 3 bottles of water.", "The little child draws the flowers.", "The"]


@pytest.fixture(scope="module", params=[(False, "swish"), (True, "relu")],
                ids=["shared-swish", "separate-relu"])
def imported(request, hf_models):
    separate, activation = request.param
    folder, files, reference = hf_models.marian(separate_vocabs=separate, activation=activation)
    model, tokenizer = from_preset(str(folder))
    return files, reference, model, tokenizer


def _batch(files, sources=SENTENCES, targets=TARGETS):
    """HF's padded source ids and attention mask, and decoder inputs: the
    start (pad) id, then the target ids, padded."""
    hf_tokenizer = files.hf_tokenizer()
    batch = hf_tokenizer(sources, text_target=targets, padding=True, return_tensors="np")
    labels = batch["labels"]
    decoder_inputs = np.full_like(labels, files.pad_id)
    decoder_inputs[:, 1:] = labels[:, :-1]
    return batch["input_ids"].astype("int32"), batch["attention_mask"], decoder_inputs.astype("int32")


@pytest.mark.slow
def test_config_carries_the_marian_conventions(imported):
    files, reference, model, _ = imported
    config = model.config
    assert config.sinusoid == "marian" and config.logits_bias and config.scale_embedding
    assert (config.pad_id, config.eos_id, config.decoder_start_id, config.unk_id) == (
        files.pad_id, 0, files.pad_id, 1)
    assert config.activation == ("silu" if reference.config.activation_function == "swish" else "relu")
    assert config.shared_vocabulary == (not files.separate_vocabs)
    assert (model.source_vocab_size, model.target_vocab_size) == (files.vocab_size,
                                                                  files.target_vocab_size)


def test_logits_equal_the_reference_on_padded_batches(imported):
    files, reference, model, _ = imported
    for rows in (slice(0, 6), slice(0, 2), slice(5, 6)):
        source, mask, target = (a[rows] for a in _batch(files))
        with torch.no_grad():
            expected = reference(input_ids=torch.tensor(source, dtype=torch.long),
                                 attention_mask=torch.tensor(mask),
                                 decoder_input_ids=torch.tensor(target, dtype=torch.long)).logits
        ours = model({"source_ids": source, "target_ids": target}).numpy()
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=0)


def _reference_generate(reference, source, mask, pad_id, **options):
    with torch.no_grad():
        out = reference.generate(
            input_ids=torch.tensor(source, dtype=torch.long), attention_mask=torch.tensor(mask),
            do_sample=False, max_new_tokens=40, bad_words_ids=[[pad_id]], **options).numpy()
    return out[:, 1:]  # without the start token


def _until_end(row, end):
    row = [int(t) for t in row]
    return row[:row.index(end) + 1] if end in row else row


@pytest.mark.slow
def test_greedy_search_gives_the_reference_tokens(imported):
    files, reference, model, _ = imported
    source, mask, _ = _batch(files)
    expected = _reference_generate(reference, source, mask, files.pad_id, num_beams=1)
    ours = greedy_search(model, tf.constant(source), decode_margin=60).tokens.numpy()[:, 0]
    for theirs, mine in zip(expected, ours):
        theirs = _until_end(theirs, files.eos_id)
        assert theirs[-1] == files.eos_id, "the reference did not finish; raise max_new_tokens"
        assert _until_end(mine, files.eos_id) == theirs


@pytest.mark.slow
def test_beam_search_gives_the_reference_tokens_with_a_shared_length_rule(imported):
    """With no length penalty (our alpha = 0, HF's length_penalty = 0) both
    rank hypotheses by their summed log-probabilities; with early_stopping
    HF, like ours, stops a sentence once it has num_beams finished ones."""
    files, reference, model, _ = imported
    source, mask, _ = _batch(files)
    expected = _reference_generate(reference, source, mask, files.pad_id, num_beams=4,
                                   length_penalty=0.0, early_stopping=True)
    ours = beam_search(model, tf.constant(source), beam_size=4, alpha=0.0,
                       decode_margin=60).tokens.numpy()[:, 0]
    for theirs, mine in zip(expected, ours):
        theirs = _until_end(theirs, files.eos_id)
        assert theirs[-1] == files.eos_id
        assert _until_end(mine, files.eos_id) == theirs


def test_bad_folders_get_one_line_errors(tmp_path):
    folder = tmp_path / "model"
    write_marian_model(folder, train_steps=0)
    config = json.loads((folder / "config.json").read_text())

    def broken(name, change):
        copy = tmp_path / name
        os.makedirs(copy)
        for item in os.listdir(folder):
            (copy / item).write_bytes((folder / item).read_bytes())
        change(copy)
        return str(copy)

    def write_config(**changes):
        return lambda copy: (copy / "config.json").write_text(json.dumps(config | changes))

    cases = [
        (broken("bart", write_config(model_type="bart")), "model_type 'bart' is not supported"),
        (broken("prenorm", write_config(activation_function="tanh")), "activation_function 'tanh'"),
        (broken("no-weights", lambda c: os.remove(c / "model.safetensors")), "No weights"),
        (broken("pickle", lambda c: os.replace(c / "model.safetensors", c / "pytorch_model.bin")),
         "is a pickle"),
        (broken("corrupt", lambda c: (c / "model.safetensors").write_bytes(b"\0" * 64)),
         "Cannot read"),
        (broken("wide", write_config(d_model=64)), "has shape"),
        (broken("no-vocab", lambda c: os.remove(c / "vocab.json")), "vocab.json"),
        (str(tmp_path / "nowhere"), "is not a folder"),
    ]
    for path, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            from_preset(path)
        assert "\n" not in str(error.value)


def test_pytorch_pickle_loads_only_when_allowed(tmp_path):
    folder = tmp_path / "model"
    _, reference = write_marian_model(folder, train_steps=0)
    os.remove(folder / "model.safetensors")
    torch.save(reference.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="allow-pytorch-pickle"):
        from_preset(str(folder))
    model, _ = from_preset(str(folder), allow_pytorch_pickle=True)
    source = np.array([[5, 6, 7, 0]], "int32")
    target = np.array([[model.config.decoder_start_id, 9, 10]], "int32")
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(source, dtype=torch.long),
                             decoder_input_ids=torch.tensor(target, dtype=torch.long)).logits
    np.testing.assert_allclose(model({"source_ids": source, "target_ids": target}).numpy(),
                               expected.numpy(), atol=1e-4, rtol=0)


def _marian_own_maths(reference):
    """The Hugging Face model computing what Marian itself computes: its
    sinusoids (frequencies over d/2 - 1 steps) and layer-norm epsilon 1e-6."""
    import copy

    marian = copy.deepcopy(reference)
    for positions in (marian.model.encoder.embed_positions, marian.model.decoder.embed_positions):
        rows, dim = positions.weight.shape
        half = dim // 2
        angles = np.arange(rows)[:, None] * 10000.0 ** (-np.arange(half) / (half - 1))[None]
        with torch.no_grad():
            positions.weight.copy_(torch.tensor(np.concatenate([np.sin(angles), np.cos(angles)], 1)))
    for module in marian.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 1e-6
    return marian


def test_a_marian_release_imports_as_marian_computes(hf_models, tmp_path):
    from helpers.marian_release import write_marian_release

    folder, files, reference = hf_models.marian()
    pieces = [piece for piece, _ in sorted(files.vocab.items(), key=lambda item: item[1])
              if piece != "<pad>"]
    # Marian has no padding row; HF's conversion appends a zero one (also
    # Marian's zero start vector) with a zero output bias.
    with torch.no_grad():
        reference.model.shared.weight[files.pad_id] = 0.0
        reference.final_logits_bias[0, files.pad_id] = 0.0
    release = tmp_path / "release"
    write_marian_release(reference, release, pieces)
    for name in ("source.spm", "target.spm"):
        (release / name).write_bytes((folder / name).read_bytes())
    model, tokenizer = from_preset(str(release))
    assert model.config.sinusoid == "tensor2tensor" and model.config.layer_norm_epsilon == 1e-6
    source, mask, target = _batch(files)
    with torch.no_grad():
        expected = _marian_own_maths(reference)(
            input_ids=torch.tensor(source, dtype=torch.long), attention_mask=torch.tensor(mask),
            decoder_input_ids=torch.tensor(target, dtype=torch.long)).logits
    np.testing.assert_allclose(model({"source_ids": source, "target_ids": target}).numpy(),
                               expected.numpy(), atol=1e-4, rtol=0)
    hf_ids = files.hf_tokenizer()(SENTENCES)["input_ids"]
    assert [list(row) for row in tokenizer.tokenize(tf.constant(SENTENCES)).numpy()] == [
        ids[:-1] for ids in hf_ids]


def test_hub_ids_download_with_huggingface_hub_and_never_a_pickle_unless_allowed(
        tmp_path, monkeypatch):
    """`hf://` ids go to `huggingface_hub.snapshot_download` (stood in for
    here: no network), asking for safetensors, configs and vocabularies."""
    import huggingface_hub

    from keras_transformer.pretrained import presets

    write_marian_model(tmp_path / "snapshot", train_steps=0)
    calls = []

    def snapshot_download(repo_id, allow_patterns):
        calls.append((repo_id, allow_patterns))
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model, _ = from_preset("hf://Helsinki-NLP/opus-mt-de-en")
    assert model.config.sinusoid == "marian"
    presets.resolve("hf://facebook/wmt19-de-en", allow_pytorch_pickle=True)
    (first, patterns), (_, allowed) = calls
    assert first == "Helsinki-NLP/opus-mt-de-en"
    assert "*.safetensors" in patterns and "pytorch_model.bin" not in patterns
    assert "pytorch_model.bin" in allowed


@pytest.mark.slow
def test_the_lone_search_on_onnxruntime_gives_the_references_tokens(imported):
    """The graphs written from the weights (`onnx_step`: Marian's positions,
    swish, logits bias, separate vocabularies) search each sentence alone
    as the reference does (greedy, and beam search without a length
    penalty), and the batch as one."""
    from keras_transformer import onnx_step
    from keras_transformer.decoding.alignment import alignment_layer

    files, reference, model, _ = imported
    source, mask, _ = _batch(files)
    # The reference first: its generate imports Triton, which crashed in a
    # process where onnxruntime had made a session.
    expected = {beams: _reference_generate(reference, source, mask, files.pad_id,
                                           num_beams=beams, length_penalty=0.0,
                                           early_stopping=True) for beams in (1, 4)}
    search = onnx_step.StepSearch(onnx_step.StepGraphs(model, alignment_layer(model)),
                                  model.config, threads=1)
    for beams in (1, 4):
        for row, theirs in zip(source, expected[beams]):
            tokens = search.search([int(i) for i in row if i != files.pad_id], beams, 0.0, 60)[0]
            assert tokens == _until_end(theirs, files.eos_id)
        # And the batch as one, padded with Marian's padding id.
        tokens, _ = search.search_batch(np.asarray(source), beams, 0.0, 60)
        assert [_until_end(list(row[0]), files.eos_id) for row in tokens] == \
            [_until_end(theirs, files.eos_id) for theirs in expected[beams]]
