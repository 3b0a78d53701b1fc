"""Writes a Hugging Face `MarianMTModel` out as a Marian (OPUS-MT) release folder.

The inverse of `keras_transformer.pretrained.marian_npz`, for its tests. The
names, shapes and layouts below are spelled out from Marian's sources
(`src/models/transformer.h`, `src/layers/generic.h`, `src/common/io.cpp`),
not taken from the module under test, so that a wrong entry in the module's
table cannot cancel out in a round trip:

- every linear layer is `affine(x, W, b)` = x W + b with W stored (in, out)
  and b stored (1, out); Hugging Face's `nn.Linear` stores (out, in);
- layer norms are `{prefix}_ln_scale` / `{prefix}_ln_bias`, stored (1, d),
  with prefix `{layer}_self_Wo`, `{layer}_context_Wo` or `{layer}_ffn_ffn`;
- embeddings are `Wemb` (tied) or `encoder_Wemb` / `decoder_Wemb`, (V, d),
  with no padding row (Hugging Face appends `<pad>` as the last id);
- the output bias is `decoder_ff_logit_out_b`, (1, V);
- `special:model.yml` is the model options as YAML text, stored as an int8
  array, NUL-terminated (newer Marian pads with NULs to 256-byte blocks).

Also here: tiny SentencePiece models trained in memory, and vocabulary
files written the way Marian's YAML emitter (yaml-cpp) writes them.
"""

import functools
import io
import itertools
import json
import os
import re

import numpy as np
import sentencepiece
import yaml

MODEL_FILE = "opus.spm1k-spm1k.transformer-align.model1.npz.best-perplexity.npz"
SHARED_VOCAB = "opus.spm1k-spm1k.vocab.yml"
SOURCE_VOCAB = "opus.spm1k-spm1k.src.vocab.yml"
TARGET_VOCAB = "opus.spm1k-spm1k.trg.vocab.yml"
OLD_VERSION = "v1.11.0 f00d0621 2022-02-08 08:39:24 -0800"

# Pieces that a YAML writer must quote or that a YAML reader may reinterpret;
# OPUS-MT vocabularies hold several of them (the language tags, punctuation).
TRICKY_PIECES = (">>deu<<", ">>fra<<", "null", "yes", "true", "~", "#", "-", "?", ":", "key:",
                 "a:b", "'", '"', "\\", "<<", "&x", "*", "!", "%", "@", "`", "{", "}", "[", "]",
                 ",", "|", ">", "0", "1.5", "0x1F", "→", "ß")

_SOURCE_WORDS = (("der", "ein", "mein", "kein"), ("Hund", "Vogel", "Baum", "Fluss", "Tisch"),
                 ("läuft", "singt", "wächst", "fließt", "steht"),
                 ("schnell", "heute", "im Garten", "am Morgen", "dort"), (".", "!", "?"))
_TARGET_WORDS = (("the", "a", "my", "no"), ("dog", "bird", "tree", "river", "table"),
                 ("runs", "sings", "grows", "flows", "stands"),
                 ("fast", "today", "in the garden", "in the morning", "there"), (".", "!", "?"))


def _sentences(parts):
    return [" ".join(words[:-1]) + words[-1] for words in itertools.product(*parts)]


@functools.lru_cache(maxsize=None)
def trained_spm(side, vocab_size=80):
    """The bytes of a small unigram SentencePiece model for "source" or
    "target" (deterministic: one thread, fixed corpus; cached)."""
    corpus = _sentences(_SOURCE_WORDS if side == "source" else _TARGET_WORDS)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2,
        user_defined_symbols=list(TRICKY_PIECES), hard_vocab_limit=False)
    return model.getvalue()


def spm_pieces(model_bytes):
    """The pieces of a SentencePiece model in id order, without its own
    control and unknown symbols (Marian's vocabulary supplies `</s>` and
    `<unk>`)."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def marian_vocab(*piece_lists):
    """A Marian vocabulary: `</s>` = 0, `<unk>` = 1, then the pieces of the
    lists in order, each once (OPUS-MT's shared vocabularies join both
    sides' pieces so)."""
    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for piece in itertools.chain(*piece_lists):
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)
    return pieces


_PLAIN_SAFE = re.compile(r"[^\s\-?:,\[\]{}#&*!|>'\"%@`~\\](?:[^\s:#,\[\]{}]|:(?=\S))*(?<!:)")
_YAML_WORDS = re.compile(r"(?i)(true|false|yes|no|on|off|y|n|null|~|[-+.\d].*)")


def yaml_cpp_key(piece):
    """`piece` as yaml-cpp writes a mapping key: plain when that reads back
    unchanged, else double-quoted with backslash escapes."""
    if _PLAIN_SAFE.fullmatch(piece) and not _YAML_WORDS.fullmatch(piece) and piece != "<<":
        return piece
    return json.dumps(piece, ensure_ascii=False)  # JSON strings are YAML double-quoted scalars


def write_vocab_yml(path, pieces):
    """Writes `piece: id` lines, ids in list order."""
    with open(path, "w", encoding="utf-8") as file:
        for index, piece in enumerate(pieces):
            file.write(f"{yaml_cpp_key(piece)}: {index}\n")


def _marian_activation(name):
    """(Marian's transformer-ffn-activation, a Marian version that means it)."""
    if name == "quick_gelu":
        return "gelu", OLD_VERSION
    if name == "gelu":
        return "gelu", "v1.12.6 c9f287db 2025-06-23 19:47:45 +0000"
    return name, OLD_VERSION


def model_options(config, tied_decoder_layers=None):
    """`special:model.yml` for a `MarianConfig`: the options Marian saves
    with a transformer (its "model features"), at their usual values."""
    activation, version = _marian_activation(config.activation_function)
    shared = config.share_encoder_decoder_embeddings
    dim_vocabs = [config.vocab_size - 1, config.decoder_vocab_size - 1]
    return {
        "bert-train-type-embeddings": True, "bert-type-vocab-size": 2,
        "dec-cell": "gru", "dec-cell-base-depth": 2, "dec-cell-high-depth": 1,
        "dec-depth": config.decoder_layers, "dim-emb": config.d_model, "dim-rnn": 1024,
        "dim-vocabs": dim_vocabs, "enc-cell": "gru", "enc-cell-depth": 1,
        "enc-depth": config.encoder_layers, "enc-type": "bidirectional",
        "factors-combine": "sum", "factors-dim-emb": 0, "input-types": [],
        "layer-normalization": False, "lemma-dependency": "", "lemma-dim-emb": 0,
        "output-omit-bias": False, "right-left": False, "separator-symbol": "[eos]",
        "skip": False, "special-vocab": [],
        "tied-embeddings": True, "tied-embeddings-all": shared, "tied-embeddings-src": shared,
        "transformer-aan-activation": "swish", "transformer-aan-depth": 2,
        "transformer-aan-nogate": False, "transformer-alibi-shift": False,
        "transformer-alibi-trainable": False, "transformer-attention-mask": "default",
        "transformer-decoder-autoreg": "self-attention",
        "transformer-decoder-dim-ffn": (0 if config.decoder_ffn_dim == config.encoder_ffn_dim
                                        else config.decoder_ffn_dim),
        "transformer-decoder-ffn-depth": 0, "transformer-dim-aan": 2048,
        "transformer-dim-ffn": config.encoder_ffn_dim,
        "transformer-disable-position-embeddings": False,
        "transformer-ffn-activation": activation, "transformer-ffn-depth": 2,
        "transformer-guided-alignment-layer": "last",
        "transformer-heads": config.encoder_attention_heads,
        "transformer-no-affine": False, "transformer-no-bias": False,
        "transformer-no-projection": False, "transformer-pool": False,
        "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
        "transformer-postprocess-top": "", "transformer-preprocess": "",
        "transformer-rnn-projection": False,
        "transformer-tied-layers": list(tied_decoder_layers or []),
        "transformer-train-position-embeddings": False,
        "type": "transformer", "ulr": False, "ulr-dim-emb": 0,
        "ulr-trainable-transformation": False, "version": version,
    }


def config_bytes(options, pad_to_256=True):
    """`special:model.yml` as Marian stores it: YAML, a NUL, then (newer
    Marian) NULs up to a multiple of 256 bytes, as an int8 array."""
    text = yaml.safe_dump(options, sort_keys=True, default_flow_style=False).encode("utf-8")
    size = len(text) + 1
    if pad_to_256:
        size = (size + 255) // 256 * 256
    return np.frombuffer(text + b"\0" * (size - len(text)), dtype=np.int8)


def marian_arrays(hf_model, tied_decoder_layers=None):
    """Marian's arrays for a `MarianMTModel` (see the module docstring).

    With `tied_decoder_layers` (Marian's 1-based `transformer-tied-layers`)
    only the named decoder layers are written; the model's tied layers must
    hold equal weights.
    """
    config = hf_model.config
    state = {name: tensor.detach().cpu().numpy().astype(np.float32)
             for name, tensor in hf_model.state_dict().items()}
    arrays = {}

    def linear(marian_prefix, hf_prefix, suffix, hf_name):
        arrays[f"{marian_prefix}_W{suffix}"] = state[f"{hf_prefix}{hf_name}.weight"].T.copy()
        arrays[f"{marian_prefix}_b{suffix}"] = state[f"{hf_prefix}{hf_name}.bias"][None, :]

    def norm(marian_prefix, hf_name):
        arrays[f"{marian_prefix}_ln_scale"] = state[f"{hf_name}.weight"][None, :]
        arrays[f"{marian_prefix}_ln_bias"] = state[f"{hf_name}.bias"][None, :]

    def attention(marian_prefix, hf_prefix, hf_block):
        for suffix, projection in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"),
                                   ("o", "out_proj")):
            linear(marian_prefix, f"{hf_prefix}{hf_block}.", suffix, projection)
        norm(f"{marian_prefix}_Wo", f"{hf_prefix}{hf_block}_layer_norm")

    def ffn(marian_prefix, hf_prefix):
        linear(f"{marian_prefix}_ffn", hf_prefix, "1", "fc1")
        linear(f"{marian_prefix}_ffn", hf_prefix, "2", "fc2")
        norm(f"{marian_prefix}_ffn_ffn", f"{hf_prefix}final_layer_norm")

    for i in range(config.encoder_layers):
        attention(f"encoder_l{i + 1}_self", f"model.encoder.layers.{i}.", "self_attn")
        ffn(f"encoder_l{i + 1}", f"model.encoder.layers.{i}.")
    sources = list(tied_decoder_layers or range(1, config.decoder_layers + 1))
    for i, layer in enumerate(sources):
        prefix = f"model.decoder.layers.{i}."
        if f"decoder_l{layer}_self_Wq" in arrays:  # a tied layer: already written
            assert np.array_equal(arrays[f"decoder_l{layer}_self_Wq"],
                                  state[prefix + "self_attn.q_proj.weight"].T)
            continue
        attention(f"decoder_l{layer}_self", prefix, "self_attn")
        attention(f"decoder_l{layer}_context", prefix, "encoder_attn")
        ffn(f"decoder_l{layer}", prefix)

    pad = config.pad_token_id

    def without_pad(table):
        assert pad == table.shape[0] - 1 and not table[pad].any(), "<pad> must be a zero last row"
        return table[:pad]

    if config.share_encoder_decoder_embeddings:
        arrays["Wemb"] = without_pad(state["model.shared.weight"])
    else:
        arrays["encoder_Wemb"] = without_pad(state["model.encoder.embed_tokens.weight"])
        arrays["decoder_Wemb"] = without_pad(state["model.decoder.embed_tokens.weight"])
    bias = state["final_logits_bias"]
    assert bias[0, pad] == 0, "<pad> must have a zero output bias"
    arrays["decoder_ff_logit_out_b"] = bias[:, :pad]
    return arrays


def write_marian_release(hf_model, directory, source_pieces, target_pieces=None,
                         options=None, tied_decoder_layers=None, pad_config_to_256=True,
                         model_file=MODEL_FILE):
    """Writes `hf_model` as an OPUS-MT release folder and returns its path.

    Args:
        hf_model: a `MarianMTModel` whose `<pad>` is its last id, with a
            zero embedding row and a zero output bias there.
        directory: created if missing.
        source_pieces, target_pieces: Marian vocabularies (`</s>`, `<unk>`,
            pieces), one piece per id below the pad id; `target_pieces`
            None means one shared vocabulary file.
        options: overrides of the `special:model.yml` options.
        tied_decoder_layers: Marian's `transformer-tied-layers`.
        pad_config_to_256: pad `special:model.yml` as newer Marian does
            (else a single NUL, as older Marian did).
        model_file: the `.npz` name.
    """
    os.makedirs(directory, exist_ok=True)
    arrays = marian_arrays(hf_model, tied_decoder_layers)
    marian_options = {**model_options(hf_model.config, tied_decoder_layers), **(options or {})}
    arrays["special:model.yml"] = config_bytes(marian_options, pad_config_to_256)
    np.savez(os.path.join(directory, model_file), **arrays)

    if target_pieces is None:
        vocab_files = [SHARED_VOCAB, SHARED_VOCAB]
        write_vocab_yml(os.path.join(directory, SHARED_VOCAB), source_pieces)
    else:
        vocab_files = [SOURCE_VOCAB, TARGET_VOCAB]
        write_vocab_yml(os.path.join(directory, SOURCE_VOCAB), source_pieces)
        write_vocab_yml(os.path.join(directory, TARGET_VOCAB), target_pieces)
    decoder = {"models": [model_file], "vocabs": vocab_files, "beam-size": 4, "normalize": 1,
               "word-penalty": 0, "mini-batch": 16, "maxi-batch": 100,
               "maxi-batch-sort": "src", "relative-paths": True}
    with open(os.path.join(directory, "decoder.yml"), "w", encoding="utf-8") as file:
        yaml.safe_dump(decoder, file, sort_keys=False, default_flow_style=False)
    for name, side in (("source.spm", "source"), ("target.spm", "target")):
        with open(os.path.join(directory, name), "wb") as file:
            file.write(trained_spm(side))
    return directory
