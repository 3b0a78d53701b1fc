"""Marian release folders (OPUS-MT's .npz, decoder.yml, vocab .yml) read into
Hugging Face's Marian layout by `keras_transformer.pretrained.marian_npz`.

A tiny random `MarianMTModel` is written out as a Marian release (the
inverse mapping lives in `helpers.marian_release`, spelled out from Marian's
sources), read back, and compared with the original: every tensor, and the
logits of a `MarianMTModel` built from the converted config and weights,
which checks the config translation as well as the names and layouts.
"""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy
import sentencepiece
import torch
import transformers
import yaml

from helpers import marian_release as release_files
from keras_transformer.pretrained import marian_npz

D_MODEL = 16


def pieces(side):
    return release_files.spm_pieces(release_files.trained_spm(side))


def hf_model(vocab_size, seed, target_vocab_size=None, **overrides):
    """A seeded random `MarianMTModel` whose every tensor is non-trivial
    (layer norms and biases too, so that swapped or misplaced arrays show),
    with `<pad>` the last id: a zero embedding row and a zero output bias."""
    settings = dict(
        vocab_size=vocab_size + 1, decoder_vocab_size=(target_vocab_size or vocab_size) + 1,
        d_model=D_MODEL, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", max_position_embeddings=64, scale_embedding=True,
        pad_token_id=vocab_size, decoder_start_token_id=vocab_size, eos_token_id=0,
        forced_eos_token_id=0, share_encoder_decoder_embeddings=True)
    settings.update(overrides)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings)).eval()
    generator = torch.Generator().manual_seed(seed)
    pad = settings["pad_token_id"]
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if "embed_positions" in name:
                continue
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.5)
        # After all: the embedding matrices are tied to each other and lm_head.
        for name, tensor in model.state_dict().items():
            if "embed_tokens" in name or name in ("model.shared.weight", "lm_head.weight"):
                tensor[pad] = 0
        model.final_logits_bias[0, pad] = 0
    return model


def saved_tensors(model, directory):
    """What `save_pretrained` writes: the names a Hugging Face folder holds."""
    model.save_pretrained(directory, safe_serialization=True)
    return safetensors_numpy.load_file(os.path.join(directory, "model.safetensors"))


def load_converted(release, directory):
    """A `MarianMTModel` from the converted config and weights, through the
    same files a Hugging Face folder holds."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as file:
        json.dump(release.config, file)
    safetensors_numpy.save_file(release.weights, os.path.join(directory, "model.safetensors"))
    return transformers.MarianMTModel.from_pretrained(directory).eval()


def logits(model, vocab_size, seed=3):
    """Logits for a padded batch of random source and target ids."""
    generator = torch.Generator().manual_seed(seed)
    pad = model.config.pad_token_id
    source = torch.randint(2, vocab_size, (3, 9), generator=generator)
    mask = torch.ones_like(source)
    source[1, 6:] = pad
    mask[1, 6:] = 0
    target = torch.randint(2, vocab_size, (3, 7), generator=generator)
    target[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        return model(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A shared-vocabulary release (OPUS-MT's usual tied-embeddings-all)."""
    root = tmp_path_factory.mktemp("shared")
    vocab = release_files.marian_vocab(pieces("source"), pieces("target"))
    model = hf_model(len(vocab), seed=1)
    release_dir = release_files.write_marian_release(model, str(root / "release"), vocab)
    return model, vocab, release_dir, root


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    """Separate vocabularies (tied-embeddings only), relu, a wider decoder
    feed-forward layer, 1 encoder and 3 decoder layers, an old-style
    `special:model.yml` (one NUL, no padding)."""
    root = tmp_path_factory.mktemp("separate")
    source = release_files.marian_vocab(pieces("source"))
    target = release_files.marian_vocab(pieces("target"))
    size = max(len(source), len(target))  # equal sizes: one pad id for both sides
    source += [f"src{i}" for i in range(size - len(source))]
    target += [f"trg{i}" for i in range(size - len(target))]
    model = hf_model(size, seed=2, share_encoder_decoder_embeddings=False,
                     activation_function="relu", encoder_layers=1, decoder_layers=3,
                     decoder_ffn_dim=48)
    release_dir = release_files.write_marian_release(
        model, str(root / "release"), source, target, pad_config_to_256=False)
    return model, (source, target), release_dir, root


@pytest.mark.parametrize("case", ["shared", "separate"])
def test_weights_are_the_hugging_face_tensors(case, request):
    model, _, release_dir, root = request.getfixturevalue(case)
    release = marian_npz.read_marian_release(release_dir)
    expected = saved_tensors(model, str(root / f"saved_{case}"))
    assert sorted(release.weights) == sorted(expected)
    for name, array in expected.items():
        assert release.weights[name].dtype == np.float32, name
        np.testing.assert_array_equal(release.weights[name], array, err_msg=name)
    # The model's other state-dict entries: tied copies, and the positional
    # tables, which Marian computes and HF recomputes (neither stores them).
    state = model.state_dict()
    for name in set(state) - set(expected):
        if "embed_positions" in name:
            continue
        source = ("model.shared.weight" if case == "shared"
                  else "model.decoder.embed_tokens.weight")
        assert name in ("lm_head.weight", "model.encoder.embed_tokens.weight",
                        "model.decoder.embed_tokens.weight"), name
        np.testing.assert_array_equal(state[name].numpy(), release.weights[source], err_msg=name)


@pytest.mark.parametrize("case", ["shared", "separate"])
def test_converted_config_gives_the_same_logits(case, request, tmp_path):
    model, _, release_dir, _ = request.getfixturevalue(case)
    release = marian_npz.read_marian_release(release_dir)
    converted = load_converted(release, str(tmp_path / "hf"))
    vocab_size = model.config.pad_token_id
    difference = (logits(converted, vocab_size) - logits(model, vocab_size)).abs().max()
    assert difference <= 1e-5


def test_config_translation(shared, separate):
    release = marian_npz.read_marian_release(shared[2])
    size = len(shared[1])
    assert release.config == {
        "model_type": "marian", "architectures": ["MarianMTModel"], "d_model": D_MODEL,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
        "activation_function": "swish", "vocab_size": size + 1, "decoder_vocab_size": size + 1,
        "pad_token_id": size, "eos_token_id": 0, "forced_eos_token_id": 0,
        "decoder_start_token_id": size, "scale_embedding": True,
        "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
        "max_position_embeddings": 512}
    assert not release.separate_vocabs
    assert release.marian_config["transformer-postprocess"] == "dan"
    assert release.decoder_options["beam-size"] == 4

    other = marian_npz.read_marian_release(separate[2], max_position_embeddings=128)
    assert (other.config["encoder_layers"], other.config["decoder_layers"]) == (1, 3)
    assert (other.config["encoder_ffn_dim"], other.config["decoder_ffn_dim"]) == (32, 48)
    assert other.config["activation_function"] == "relu"
    assert other.config["share_encoder_decoder_embeddings"] is False
    assert other.config["max_position_embeddings"] == 128
    assert other.separate_vocabs


def test_vocabulary_gets_pad_appended_and_matches_yaml(shared):
    _, vocab, release_dir, _ = shared
    release = marian_npz.read_marian_release(release_dir)
    assert release.source_vocab == {**{piece: i for i, piece in enumerate(vocab)},
                                    "<pad>": len(vocab)}
    assert list(release.source_vocab.values()) == list(range(len(vocab) + 1))
    assert release.target_vocab == release.source_vocab
    # Our line parser agrees with a YAML parser on the emitter's quoting.
    path = os.path.join(release_dir, release_files.SHARED_VOCAB)
    with open(path, encoding="utf-8") as file:
        parsed = yaml.load(file, Loader=yaml.BaseLoader)
    assert {piece: int(i) for piece, i in parsed.items()} == marian_npz.read_marian_vocab(path)
    for piece in release_files.TRICKY_PIECES:
        assert piece in release.source_vocab, piece


def test_vocabulary_in_pyyaml_quoting(tmp_path):
    """Single-quoted keys and escapes, as other YAML emitters write them."""
    vocab = ["</s>", "<unk>", "it's", '"', "\\", "tab\there", "é", "<<", "null", "a: b"]
    path = tmp_path / "pyyaml.vocab.yml"
    path.write_text(yaml.safe_dump({piece: i for i, piece in enumerate(vocab)},
                                   sort_keys=False, allow_unicode=True, width=1000),
                    encoding="utf-8")
    assert marian_npz.read_marian_vocab(path) == {piece: i for i, piece in enumerate(vocab)}


@pytest.mark.parametrize("case", ["shared", "separate"])
def test_tokenizer_files_load_in_hugging_face(case, request, tmp_path):
    _, vocab, release_dir, _ = request.getfixturevalue(case)
    release = marian_npz.read_marian_release(release_dir)
    written = marian_npz.write_hf_tokenizer_files(release, tmp_path)
    names = {"source.spm", "target.spm", "vocab.json"}
    if case == "separate":
        names |= {"target_vocab.json", "tokenizer_config.json"}
    assert {os.path.basename(path) for path in written} == names
    tokenizer = transformers.MarianTokenizer.from_pretrained(
        str(tmp_path), separate_vocabs=release.separate_vocabs)
    assert tokenizer.pad_token_id == release.config["pad_token_id"]
    assert tokenizer.eos_token_id == release.config["eos_token_id"]

    source_vocab = vocab[0] if case == "separate" else vocab
    text = "der Hund läuft null # 1.5 {ß}"
    processor = sentencepiece.SentencePieceProcessor(model_file=release.source_spm)
    expected = [source_vocab.index(piece) for piece in processor.encode(text, out_type=str)]
    assert tokenizer(text).input_ids == expected + [0]
    assert tokenizer.convert_tokens_to_ids(">>deu<<") == source_vocab.index(">>deu<<")
    if case == "separate":
        target_vocab = vocab[1]
        target = tokenizer(text_target="the dog runs").input_ids
        processor = sentencepiece.SentencePieceProcessor(model_file=release.target_spm)
        pieces_ = processor.encode("the dog runs", out_type=str)
        assert target == [target_vocab.index(piece) for piece in pieces_] + [0]


def test_tied_decoder_layers_are_copied(tmp_path):
    vocab = release_files.marian_vocab(pieces("source"))
    model = hf_model(len(vocab), seed=4, decoder_layers=3)
    with torch.no_grad():  # Marian layer 1 serves decoder layers 1 and 3
        third = model.model.decoder.layers[2]
        third.load_state_dict(model.model.decoder.layers[0].state_dict())
    release_dir = release_files.write_marian_release(model, str(tmp_path / "release"), vocab,
                                                     tied_decoder_layers=[1, 2, 1])
    with np.load(os.path.join(release_dir, release_files.MODEL_FILE)) as npz:
        assert not any(name.startswith("decoder_l3_") for name in npz.files)
    release = marian_npz.read_marian_release(release_dir)
    expected = saved_tensors(model, str(tmp_path / "saved"))
    assert sorted(release.weights) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(release.weights[name], array, err_msg=name)


def test_gelu_depends_on_the_marian_version(tmp_path):
    vocab = release_files.marian_vocab(pieces("source"))
    for activation in ("gelu", "quick_gelu"):
        model = hf_model(len(vocab), seed=5, activation_function=activation)
        directory = release_files.write_marian_release(model, str(tmp_path / activation), vocab)
        release = marian_npz.read_marian_release(directory)
        assert release.config["activation_function"] == activation
        converted = load_converted(release, str(tmp_path / f"{activation}_hf"))
        assert (logits(converted, len(vocab)) - logits(model, len(vocab))).abs().max() <= 1e-5


def test_omitted_output_bias_reads_as_zeros(tmp_path):
    vocab = release_files.marian_vocab(pieces("source"))
    model = hf_model(len(vocab), seed=6)
    with torch.no_grad():
        model.final_logits_bias.zero_()
    directory = str(tmp_path / "release")
    release_files.write_marian_release(model, directory, vocab,
                                       options={"output-omit-bias": True})
    path = os.path.join(directory, release_files.MODEL_FILE)
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files if name != "decoder_ff_logit_out_b"}
    np.savez(path, **arrays)
    release = marian_npz.read_marian_release(directory)
    np.testing.assert_array_equal(release.weights["final_logits_bias"],
                                  np.zeros((1, len(vocab) + 1), np.float32))


# --- errors -----------------------------------------------------------------

@pytest.fixture
def release_dir(shared, tmp_path):
    """A fresh copy of the shared release, for a test to break."""
    model, vocab, _, _ = shared
    return release_files.write_marian_release(model, str(tmp_path / "release"), vocab)


def edit_npz(directory, change):
    """Rewrites the release's model file with `change(arrays)` applied."""
    path = os.path.join(directory, release_files.MODEL_FILE)
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    change(arrays)
    np.savez(path, **arrays)
    return path


def set_options(directory, **options):
    def change(arrays):
        text = arrays["special:model.yml"].tobytes().split(b"\0")[0]
        config = {**yaml.safe_load(text), **options}
        arrays["special:model.yml"] = release_files.config_bytes(config)
    return edit_npz(directory, change)


def test_missing_decoder_yml(tmp_path):
    with pytest.raises(ValueError, match="no decoder.yml"):
        marian_npz.read_marian_release(tmp_path)


def test_missing_model_file(release_dir):
    os.remove(os.path.join(release_dir, release_files.MODEL_FILE))
    with pytest.raises(ValueError, match=r"decoder.yml: the model file .*\.npz' is not in"):
        marian_npz.read_marian_release(release_dir)


def test_ensembles_are_refused(release_dir):
    path = os.path.join(release_dir, "decoder.yml")
    with open(path) as file:
        options = yaml.safe_load(file)
    options["models"] = options["models"] * 2
    with open(path, "w") as file:
        yaml.safe_dump(options, file)
    with pytest.raises(ValueError, match="lists 2 models"):
        marian_npz.read_marian_release(release_dir)


@pytest.mark.parametrize("options, message", [
    ({"transformer-preprocess": "n", "transformer-postprocess": "da",
      "transformer-postprocess-top": "n"}, "transformer-preprocess: 'n'.*pre-norm"),
    ({"transformer-postprocess-emb": "dn"}, "transformer-postprocess-emb"),
    ({"transformer-decoder-autoreg": "average-attention"}, "transformer-decoder-autoreg"),
    ({"transformer-decoder-autoreg": "rnn"}, "transformer-decoder-autoreg"),
    ({"tied-embeddings-all": False, "tied-embeddings-src": True, "tied-embeddings": False},
     "tied-embeddings.*untied"),
    ({"transformer-train-position-embeddings": True}, "transformer-train-position-embeddings"),
    ({"right-left": True}, "right-left"),
    ({"type": "s2s"}, "type: 's2s'"),
    ({"transformer-ffn-activation": "tanh"}, "transformer-ffn-activation: 'tanh'"),
    ({"transformer-ffn-activation": "gelu", "version": "unknown"}, "gelu.*version"),
    ({"transformer-ffn-depth": 3}, "transformer-ffn-depth"),
    ({"lemma-dim-emb": 8}, "lemma-dim-emb"),
])
def test_unsupported_options_are_named(release_dir, options, message):
    path = set_options(release_dir, **options)
    with pytest.raises(ValueError, match=message) as error:
        marian_npz.read_marian_release(release_dir)
    assert str(error.value).startswith(path) and "\n" not in str(error.value)


def test_missing_array(release_dir):
    path = edit_npz(release_dir, lambda arrays: arrays.pop("decoder_l2_context_Wk"))
    with pytest.raises(ValueError, match="missing array 'decoder_l2_context_Wk'") as error:
        marian_npz.read_marian_release(release_dir)
    assert str(error.value).startswith(path)


def test_shape_mismatch(release_dir):
    def change(arrays):
        arrays["encoder_l1_ffn_W1"] = arrays["encoder_l1_ffn_W1"].T.copy()
    edit_npz(release_dir, change)
    with pytest.raises(ValueError, match=r"'encoder_l1_ffn_W1' has shape \(32, 16\), "
                                         r"expected \(16, 32\)"):
        marian_npz.read_marian_release(release_dir)


def test_unexpected_arrays(release_dir):
    def change(arrays):
        arrays["encoder_emb_ln_scale_pre"] = np.ones((1, D_MODEL), np.float32)
        arrays["decoder_ff_logit_out_Wt"] = arrays["Wemb"]
    edit_npz(release_dir, change)
    with pytest.raises(ValueError, match="no place for: decoder_ff_logit_out_Wt, "
                                         "encoder_emb_ln_scale_pre"):
        marian_npz.read_marian_release(release_dir)


def test_pickled_arrays_are_refused(release_dir):
    def change(arrays):
        arrays["encoder_l1_self_Wq"] = np.array([{"not": "numbers"}], dtype=object)
    edit_npz(release_dir, change)
    with pytest.raises(ValueError, match="unpickling"):
        marian_npz.read_marian_release(release_dir)


def test_not_an_npz(release_dir):
    with open(os.path.join(release_dir, release_files.MODEL_FILE), "wb") as file:
        file.write(b"not a zip")
    with pytest.raises(ValueError, match=r"\.npz: not an \.npz"):
        marian_npz.read_marian_release(release_dir)


def test_vocabulary_size_must_match(release_dir):
    path = os.path.join(release_dir, release_files.SHARED_VOCAB)
    with open(path, encoding="utf-8") as file:
        lines = file.readlines()
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(lines[:-1])
    with pytest.raises(ValueError, match=r"vocab.yml: \d+ pieces, but the model's source"):
        marian_npz.read_marian_release(release_dir)


def test_malformed_vocabulary_line(tmp_path):
    path = tmp_path / "bad.vocab.yml"
    path.write_text("</s>: 0\n<unk>: 1\nfoo bar\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.vocab.yml, line 3"):
        marian_npz.read_marian_vocab(path)
    path.write_text("</s>: 0\n<unk>: 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not 0 ... 1"):
        marian_npz.read_marian_vocab(path)


def test_tokenizer_files_need_the_spm_models(release_dir, tmp_path):
    os.remove(os.path.join(release_dir, "target.spm"))
    release = marian_npz.read_marian_release(release_dir)
    with pytest.raises(ValueError, match="no target.spm"):
        marian_npz.write_hf_tokenizer_files(release, tmp_path / "out")


def test_a_release_folder_imports_with_its_weights_and_marian_s_conventions(shared):
    """`from_preset` on a release folder (`pretrained.marian_release`): the
    embedding holds the release's table, with Marian's own sinusoid and
    layer-norm epsilon, and the tokenizer is the release's SentencePiece
    and vocabulary. (That its logits are what Marian computes is checked
    against a reference in tests/pretrained/test_pretrained_marian.py.)"""
    from keras_transformer.pretrained import from_preset

    _, vocab, release_dir, _ = shared
    model, tokenizer = from_preset(release_dir)
    release = marian_npz.read_marian_release(release_dir)
    assert model.config.sinusoid == "tensor2tensor"
    assert model.config.layer_norm_epsilon == marian_npz.MARIAN_LAYER_NORM_EPSILON
    assert tokenizer.vocab_size == model.source_vocab_size == len(vocab) + 1  # + <pad>
    embedding = next(w for w in model.weights if "embeddings" in w.path).numpy()
    np.testing.assert_array_equal(embedding[:len(vocab)],
                                  release.weights["model.shared.weight"][:len(vocab)])
    processor = sentencepiece.SentencePieceProcessor(model_file=release.source_spm)
    text = "a test"
    pieces_ = processor.encode(text, out_type=str)
    assert tokenizer.pieces(tokenizer.tokenize([text]).to_list()[0]) == pieces_
