"""Imported Hugging Face FSMT models (fairseq WMT19) against
`transformers.FSMTForConditionalGeneration`: conventions, logits, greedy and
beam search, and the Python-run tokenizer, on a small model trained a few
seconds and saved with `save_pretrained(safe_serialization=True)`."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import torch

from helpers.fsmt_model import write_fsmt_model
from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.pretrained import from_preset
from keras_transformer.pretrained.fsmt_tokenizer import FsmtTokenizer

SOURCES = [
    "The house is small, but the garden is very large.",
    "Machine learning is great, isn't it?",
    "The translation of long sentences is harder than the translation of short ones.",
    "The dog sleeps.",
    '"Hello," she said.',
    "My brother lives in a small city.",
]
TARGETS = [
    "Das Haus ist klein, aber der Garten ist sehr groß.",
    "Maschinelles Lernen ist großartig, nicht wahr?",
    "Die Übersetzung langer Sätze ist schwerer als die Übersetzung kurzer Sätze.",
    "Der Hund schläft.",
    '„Hallo", sagte sie.',
    "Mein Schwager",
]


@pytest.fixture(scope="module")
def imported(hf_models):
    folder, files, reference = hf_models.fsmt()
    model, tokenizer = from_preset(str(folder))
    return files, reference, model, tokenizer


def _batch(files, rows=slice(None)):
    """HF's padded source ids and mask, and the decoder inputs as FSMT builds
    them: the start id (the end id, 2), then the target ids, padded."""
    source = files.hf_tokenizer()(SOURCES[rows], padding=True, return_tensors="np")
    labels = files.hf_target_tokenizer()(TARGETS[rows], padding=True, return_tensors="np")["input_ids"]
    decoder_inputs = np.full_like(labels, files.pad_id)
    decoder_inputs[:, 0] = files.eos_id
    decoder_inputs[:, 1:] = labels[:, :-1]
    return (source["input_ids"].astype("int32"), source["attention_mask"],
            decoder_inputs.astype("int32"))


def test_config_carries_the_fsmt_conventions(imported):
    files, reference, model, tokenizer = imported
    config = model.config
    assert config.sinusoid == "fairseq" and config.scale_embedding and not config.logits_bias
    assert not config.norm_first and config.layer_norm_epsilon == 1e-5
    assert (config.pad_id, config.eos_id, config.decoder_start_id, config.unk_id) == (1, 2, 2, 3)
    assert config.activation == "relu" and not config.shared_vocabulary
    assert (config.max_length, config.beam_size) == (256, reference.config.num_beams)
    assert (config.d_model, config.d_ff, config.num_heads) == (32, 64, 4)
    assert (model.source_vocab_size, model.target_vocab_size) == (files.src_vocab_size,
                                                                  files.tgt_vocab_size)
    assert isinstance(tokenizer, FsmtTokenizer) and tokenizer.in_graph is False
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (1, 3, 2, 2)
    assert (tokenizer.vocab_size, tokenizer.target_vocab_size) == (files.src_vocab_size,
                                                                   files.tgt_vocab_size)


def test_logits_equal_the_reference_on_padded_batches(imported):
    """At every real decoder position (FSMT gives padding its own position
    and masks it as a key, so padded rows past the end are not compared)."""
    files, reference, model, _ = imported
    for rows in (slice(0, 6), slice(2, 4), slice(3, 4)):
        source, mask, target = _batch(files, rows)
        with torch.no_grad():
            expected = reference(input_ids=torch.tensor(source, dtype=torch.long),
                                 attention_mask=torch.tensor(mask),
                                 decoder_input_ids=torch.tensor(target, dtype=torch.long),
                                 use_cache=False).logits.numpy()
        ours = model({"source_ids": source, "target_ids": target}).numpy()
        real = target != files.pad_id
        assert real.sum() > real.shape[0]
        np.testing.assert_allclose(ours[real], expected[real], atol=1e-4, rtol=0)


def _reference_generate(reference, source, mask, pad_id, **options):
    with torch.no_grad():
        out = reference.generate(
            input_ids=torch.tensor(source, dtype=torch.long), attention_mask=torch.tensor(mask),
            do_sample=False, max_new_tokens=40, bad_words_ids=[[pad_id]], **options).numpy()
    return out


def _until_end(row, end):
    row = [int(t) for t in row]
    return row[:row.index(end) + 1] if end in row else row


@pytest.mark.slow
def test_greedy_search_and_detokenize_give_the_reference(imported):
    files, reference, model, tokenizer = imported
    source, mask, _ = _batch(files)
    generated = _reference_generate(reference, source, mask, files.pad_id, num_beams=1)
    assert (generated[:, 0] == files.eos_id).all()  # FSMT starts from the end id
    ours = greedy_search(model, tf.constant(source), decode_margin=60).tokens.numpy()[:, 0]
    for theirs, mine in zip(generated[:, 1:], ours):
        theirs = _until_end(theirs, files.eos_id)
        assert theirs[-1] == files.eos_id, "the reference did not finish; raise max_new_tokens"
        assert _until_end(mine, files.eos_id) == theirs
    texts = [t.decode() for t in tokenizer.detokenize(tf.constant(ours)).numpy()]
    assert texts == files.hf_tokenizer().batch_decode(generated, skip_special_tokens=True)
    assert texts[0] == TARGETS[0]


@pytest.mark.slow
def test_beam_search_gives_the_reference_tokens_with_a_shared_length_rule(imported):
    """With no length penalty (our alpha = 0, HF's length_penalty = 0) both
    rank hypotheses by their summed log-probabilities; with early_stopping
    HF, like ours, stops a sentence once it has num_beams finished ones."""
    files, reference, model, _ = imported
    source, mask, _ = _batch(files)
    expected = _reference_generate(reference, source, mask, files.pad_id, num_beams=4,
                                   length_penalty=0.0, early_stopping=True)[:, 1:]
    ours = beam_search(model, tf.constant(source), beam_size=4, alpha=0.0,
                       decode_margin=60).tokens.numpy()[:, 0]
    for theirs, mine in zip(expected, ours):
        theirs = _until_end(theirs, files.eos_id)
        assert theirs[-1] == files.eos_id
        assert _until_end(mine, files.eos_id) == theirs


def test_tokenizer_gives_the_reference_ids_eagerly_and_in_graphs(imported):
    files, _, _, tokenizer = imported
    texts = SOURCES + ["", "Zürich ☃ <unk> </s> x"]
    expected = [ids[:-1] for ids in files.hf_tokenizer()(texts)["input_ids"]]
    target_expected = [ids[:-1] for ids in files.hf_target_tokenizer()(TARGETS)["input_ids"]]

    eager = tokenizer.tokenize(tf.constant(texts))
    assert isinstance(eager, tf.RaggedTensor) and eager.dtype == tf.int32
    assert eager.to_list() == expected
    assert tokenizer.tokenize_target(tf.constant(TARGETS)).to_list() == target_expected
    assert tokenizer.tokenize(tf.constant(texts[0])).numpy().tolist() == expected[0]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def in_graph(batch):
        ids = tokenizer.tokenize(batch)
        return ids, tokenizer.detokenize(tokenizer.tokenize_target(batch))

    ids, _ = in_graph(tf.constant(texts))
    assert ids.to_list() == expected
    assert [t.decode() for t in in_graph(tf.constant(TARGETS[:2]))[1].numpy()] == TARGETS[:2]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tokenizer.tokenize)
    assert [row for batch in dataset for row in batch.to_list()] == expected

    # Decoding stops at the first end id, skips the other specials and ids
    # outside the vocabulary; ragged, int64 and one-row inputs work too.
    body = target_expected[0]
    rows = tf.ragged.constant([body + [2, 5, 6], [0, 1, 3] + body, [2] + body,
                               [files.tgt_vocab_size, -1] + body], tf.int64)
    text = TARGETS[0]
    assert [t.decode() for t in tokenizer.detokenize(rows).numpy()] == [text, text, "", text]
    assert tokenizer.detokenize(tf.constant(body)).numpy().decode() == text
    assert tokenizer.detokenize(tf.zeros([2, 0], tf.int32)).numpy().tolist() == [b"", b""]

    hf_tokenizer = files.hf_tokenizer()
    source_vocab = hf_tokenizer.get_src_vocab()
    assert tokenizer.pieces(expected[0]) == [
        piece if piece in source_vocab else "<unk>" for piece in hf_tokenizer.tokenize(texts[0])]
    assert tokenizer.target_pieces(tf.constant(body)) == hf_tokenizer.convert_ids_to_tokens(body)


def test_tokenizer_save_round_trip(imported, tmp_path):
    files, _, _, tokenizer = imported
    tokenizer.save(tmp_path)
    again = FsmtTokenizer.from_directory(tmp_path)
    assert again.tokenize(tf.constant(SOURCES)).to_list() == tokenizer.tokenize(
        tf.constant(SOURCES)).to_list()
    with pytest.raises(TypeError, match="FsmtVocabulary"):
        FsmtTokenizer("not a vocabulary")


def test_tied_embeddings_import_as_one_shared_matrix(tmp_path):
    """tie_word_embeddings: HF stores the decoder matrix only, and all three
    share it (both vocabularies then have the model's one size)."""
    from helpers.fsmt_files import write_fsmt_tokenizer_files

    sizes = write_fsmt_tokenizer_files(tmp_path / "sizes")
    size = max(sizes.src_vocab_size, sizes.tgt_vocab_size)
    files, reference = write_fsmt_model(tmp_path / "tied", train_steps=0, tie_word_embeddings=True,
                                        src_vocab_size=size, tgt_vocab_size=size)
    # One tied matrix means one vocabulary size: fill the smaller side.
    for name in ("vocab-src.json", "vocab-tgt.json"):
        vocab = json.loads((tmp_path / "tied" / name).read_text(encoding="utf-8"))
        vocab.update({f"<unused{i}>": i for i in range(len(vocab), size)})
        (tmp_path / "tied" / name).write_text(json.dumps(vocab), encoding="utf-8")
    model, _ = from_preset(str(tmp_path / "tied"))
    assert model.config.shared_vocabulary
    assert (model.source_vocab_size, model.target_vocab_size) == (size, size)
    source = np.array([[5, 6, 7, 2], [8, 2, 1, 1]], "int32")
    target = np.array([[2, 9, 10], [2, 11, 12]], "int32")
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(source, dtype=torch.long),
                             attention_mask=torch.tensor(source != 1),
                             decoder_input_ids=torch.tensor(target, dtype=torch.long),
                             use_cache=False).logits.numpy()
    np.testing.assert_allclose(model({"source_ids": source, "target_ids": target}).numpy(),
                               expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_bad_folders_get_one_line_errors(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "model"
    write_fsmt_model(folder, train_steps=0)
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

    def change_tensor(name, change):
        def apply(copy):
            tensors = load_file(copy / "model.safetensors")
            change(tensors, name)
            save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
        return apply

    def perturb(tensors, name):
        tensors[name] = tensors[name] + np.float32(1e-3)

    projection = "model.decoder.output_projection.weight"
    cases = [
        (broken("untied", change_tensor(projection, perturb)),
         "output_projection.weight differs from model.decoder.embed_tokens.weight: untied"),
        (broken("no-projection", change_tensor(projection, lambda t, n: t.pop(n))),
         "no model.decoder.output_projection.weight although tie_word_embeddings is false"),
        (broken("positions", change_tensor("model.encoder.embed_positions.weight", perturb)),
         "not fairseq's sinusoid table"),
        (broken("prenorm", write_config(normalize_before=True)), "pre-norm"),
        (broken("tied-sizes", write_config(tie_word_embeddings=True)), "differ; tied embeddings"),
        (broken("pad", write_config(pad_token_id=0)), "config.json says"),
        (broken("start", write_config(decoder_start_token_id=0)), "config.json says"),
        (broken("langs", write_config(langs=["en", "ru"])), "langs"),
        (broken("small", write_config(src_vocab_size=10)), "model's embeddings"),
        (broken("ffn", write_config(decoder_ffn_dim=128)), "differ; this package's model"),
        (broken("gelu_new", write_config(activation_function="gelu_new")), "activation_function"),
        (broken("no-vocab", lambda c: os.remove(c / "vocab-src.json")), "vocab-src.json is missing"),
        (broken("no-weights", lambda c: os.remove(c / "model.safetensors")), "No weights"),
        (broken("wide", write_config(d_model=64)), "has shape"),
    ]
    for path, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            from_preset(path)
        assert "\n" not in str(error.value), path


@pytest.mark.slow
def test_an_fsmt_run_exports_ids_savedmodel_and_onnx_that_translate_alike(imported, tmp_path):
    """Moses tokenization cannot live in a SavedModel: an FSMT run exports
    the id signatures and ONNX, whose runner tokenizes in Python."""
    import subprocess
    import sys

    from helpers import processes
    from keras_transformer.decoding import Translator
    from keras_transformer.export import export_run
    from keras_transformer.pretrained import save_run

    _, _, model, tokenizer = imported
    run = save_run(model, tokenizer, str(tmp_path / "run"))
    expected = Translator(model, tokenizer).translate(SOURCES)
    assert Translator.from_directory(run).translate(SOURCES) == expected
    report = export_run(run, str(tmp_path / "export"), formats=["saved_model", "onnx"])
    assert report["formats"]["saved_model"]["paths"] == ["saved_model_core"]
    assert not os.path.exists(tmp_path / "export" / "saved_model")
    result = subprocess.run(
        [sys.executable, "-c", processes.ONNX_ONLY_PROCESS, str(tmp_path / "export" / "onnx"),
         json.dumps(SOURCES)], capture_output=True, text=True, check=True, timeout=300)
    translated = json.loads(result.stdout.strip().splitlines()[-1])
    assert translated["loaded"] == [] and translated["translations"] == expected
