"""Hugging Face FSMT folders (fairseq's WMT19 models, `facebook/wmt19-*`) as
our `Transformer`.

FSMT is the paper's post-norm architecture with fairseq's conventions, each
a `TransformerConfig` field here: fairseq's sinusoid table (sines first,
frequencies spread over d_model / 2 - 1 steps, positions counted from the
padding id + 1: `sinusoid="fairseq"`), embeddings scaled by sqrt(d_model),
layer-norm epsilon 1e-5, no bias on the logits, and fairseq's special ids
(start 0, padding 1, end 2, unknown 3; decoding starts from the end id).

The vocabularies are separate (one per language) unless
`tie_word_embeddings` is true, in which case Hugging Face stores only
`model.decoder.embed_tokens.weight` and all three matrices share it. The
WMT19 configs say `tie_word_embeddings: false` and store the encoder
embedding, the decoder embedding and the decoder's output projection apart,
but fairseq trained them with the decoder's input and output embeddings
shared, so the last two hold the same values. Our model always ties the
target embedding to the output projection: the import checks that they are
equal and refuses a checkpoint whose projection differs.

Files: `config.json`, `model.safetensors` (see `weights.read_checkpoint`),
`vocab-src.json`, `vocab-tgt.json`, `merges.txt`, `tokenizer_config.json`
(see `fsmt_vocabulary`). The tokenizer runs the Moses rules in Python (see
`fsmt_tokenizer.FsmtTokenizer`).
"""

import os

import numpy as np

from keras_transformer.layers import SinusoidalPositionalEncoding
from keras_transformer.models import BASE, transformer
from keras_transformer.pretrained import weights as checkpoint_weights
from keras_transformer.pretrained.fsmt_tokenizer import FsmtTokenizer
from keras_transformer.pretrained.marian import (
    activation,
    check_vocabulary_sizes,
    read_config,
    require_equal,
)

LAYER_NORM_EPSILON = 1e-5  # PyTorch's nn.LayerNorm default, which FSMT uses
FAIRSEQ_UNK_ID = 3
# fairseq's names for pre-norm layers; FSMT has only post-norm layers, so a
# config that sets one of them describes a model FSMT does not compute either.
_PRE_NORM_KEYS = ("normalize_before", "encoder_normalize_before", "decoder_normalize_before")
_OUTPUT_PROJECTION = "model.decoder.output_projection.weight"
_SOURCE_EMBEDDING = "model.encoder.embed_tokens.weight"
_TARGET_EMBEDDING = "model.decoder.embed_tokens.weight"


def transformer_config(hf_config, unk_id=FAIRSEQ_UNK_ID, path="config.json"):
    """A `TransformerConfig` equal in function to an `FSMTConfig` dict.

    Args:
        hf_config: the `config.json` contents.
        unk_id: the vocabulary's unknown id (FSMT's config does not name it;
            fairseq's is 3).
        path: names the config in errors.

    The training-recipe fields stay the paper's (`keras-transformer train
    --init-from` switches to `fine_tuning_recipe`); decoding keeps the
    paper's GNMT length penalty 0.6 (FSMT's `length_penalty` is another
    formula) and takes the beam from `num_beams` when the config names one.

    Raises:
        ValueError: a configuration this package cannot represent.
    """
    _check_architecture(hf_config, path)
    tied = bool(hf_config.get("tie_word_embeddings", False))
    # FSMTConfig's defaults where a key is missing or null; decoding starts
    # from the end id unless the config says otherwise (fairseq's rule).
    pad_id = _get(hf_config, "pad_token_id", 1)
    eos_id = _get(hf_config, "eos_token_id", 2)
    start_id = _get(hf_config, "decoder_start_token_id", eos_id)
    return BASE.replace(
        num_encoder_layers=hf_config["encoder_layers"],
        num_decoder_layers=hf_config["decoder_layers"],
        d_model=hf_config["d_model"],
        d_ff=require_equal(hf_config, path, "encoder_ffn_dim", "decoder_ffn_dim"),
        num_heads=require_equal(hf_config, path, "encoder_attention_heads",
                                "decoder_attention_heads"),
        dropout=hf_config.get("dropout", 0.1),
        attention_dropout=hf_config.get("attention_dropout", 0.0),
        ffn_dropout=hf_config.get("activation_dropout", 0.0),
        activation=activation(hf_config, path),
        shared_vocabulary=tied,
        max_length=hf_config.get("max_position_embeddings", 1024),
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        sinusoid="fairseq",
        scale_embedding=bool(hf_config.get("scale_embedding", True)),
        logits_bias=False,
        pad_id=pad_id,
        unk_id=unk_id,
        decoder_start_id=start_id,
        eos_id=eos_id,
        beam_size=int(hf_config.get("num_beams") or BASE.beam_size),
    )


def _get(hf_config, key, default):
    value = hf_config.get(key)
    return default if value is None else value


def _check_architecture(hf_config, path):
    """Refuses what FSMT's config can say that our model does not compute."""
    for key in ("encoder_layers", "decoder_layers", "d_model", "src_vocab_size",
                "tgt_vocab_size"):
        value = hf_config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{path}: {key} must be a positive integer; got {value!r}.")
    for key in _PRE_NORM_KEYS:
        if hf_config.get(key):
            raise ValueError(f"{path}: {key} is true, a pre-norm model; FSMT models (and this "
                             "import) are post-norm.")
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        value = hf_config.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{path}: {key} must be one integer id; got {value!r}.")
    if hf_config.get("tie_word_embeddings", False) and (
            hf_config["src_vocab_size"] != hf_config["tgt_vocab_size"]):
        raise ValueError(
            f"{path}: tie_word_embeddings is true but src_vocab_size "
            f"({hf_config['src_vocab_size']}) and tgt_vocab_size ({hf_config['tgt_vocab_size']}) "
            "differ; tied embeddings need one vocabulary size.")


def load(directory, allow_pytorch_pickle=False):
    """Imports a Hugging Face FSMT folder: `(Transformer, FsmtTokenizer)`.

    Raises:
        ValueError: not an FSMT folder, a configuration this package cannot
            represent, missing or corrupt files, tensors of the wrong shape,
            an output projection that is not the decoder embedding.
        ImportError: `sacremoses` (the Moses tokenizer) is not installed.
    """
    where = os.path.join(directory, "config.json")
    hf_config = read_config(directory, "fsmt")
    _check_architecture(hf_config, where)  # before reading the tokenizer: the clearer error first
    tokenizer = FsmtTokenizer.from_directory(directory)
    checkpoint = checkpoint_weights.read_checkpoint(directory, allow_pytorch_pickle)
    return build(hf_config, checkpoint, tokenizer, where), tokenizer


def build(hf_config, checkpoint, tokenizer, where):
    """The `Transformer` of an FSMT config dict and its tensors (Hugging Face
    names), checked against the tokenizer; `where` names the source in
    errors."""
    config = transformer_config(hf_config, tokenizer.unk_id, where)
    source_vocab, target_vocab = hf_config["src_vocab_size"], hf_config["tgt_vocab_size"]
    _check_tokenizer(hf_config, tokenizer, config, source_vocab, target_vocab, where)
    model = transformer(config, source_vocab, target_vocab)
    checkpoint_weights.assign(model, _model_weights(checkpoint, config))
    return model


def _model_weights(checkpoint, config):
    weights, used = checkpoint_weights.layer_weights(
        checkpoint, config.num_encoder_layers, config.num_decoder_layers)

    def take(name):
        return checkpoint_weights.take(checkpoint, name, used)

    def require_copy(name, matrix, reason):
        """A tensor that, where stored, must equal `matrix` (the decoder embedding)."""
        if name not in checkpoint:
            return
        if checkpoint[name].shape != matrix.shape or not np.array_equal(checkpoint[name], matrix):
            raise ValueError(f"The checkpoint's {name} differs from {_TARGET_EMBEDDING}: {reason}.")
        used.add(name)

    target = take(_TARGET_EMBEDDING)
    if config.shared_vocabulary:
        # tie_word_embeddings: Hugging Face stores the decoder matrix only;
        # other copies, where a file holds them, must be equal.
        weights["shared_embedding/embeddings"] = target
        require_copy(_SOURCE_EMBEDDING, target, "tie_word_embeddings is true but the source "
                     "embedding is another matrix")
    else:
        weights["source_embedding/embeddings"] = take(_SOURCE_EMBEDDING)
        weights["target_embedding/embeddings"] = target
        if _OUTPUT_PROJECTION not in checkpoint:
            raise ValueError(f"The checkpoint has no {_OUTPUT_PROJECTION} although "
                             "tie_word_embeddings is false.")
    require_copy(_OUTPUT_PROJECTION, target, "untied output projections are not supported "
                 "(this package's model ties the target embedding to the output projection)")
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name in checkpoint:
            _check_positions(checkpoint[name], config, name)
            used.add(name)
    checkpoint_weights.check_all_used(checkpoint, used)
    return weights


def _check_positions(table, config, name):
    """A stored positional table must be the sinusoids our model computes
    (they are not trained; FSMT stores them anyway): row `pad_id` zero,
    the rows after it positions `pad_id + 1, ...`."""
    from keras import ops
    pad = config.pad_id
    if table.ndim != 2 or table.shape[1] != config.d_model or table.shape[0] <= pad + 1:
        raise ValueError(f"The checkpoint's {name} has shape {table.shape}; expected "
                         f"(positions, {config.d_model}).")
    layer = SinusoidalPositionalEncoding(style="fairseq", first_position=pad + 1)
    ours = ops.convert_to_numpy(layer.encoding(table.shape[0] - pad - 1, config.d_model))
    # float32 angles of positions up to a thousand or so round at about 1e-4.
    if np.abs(table[pad]).max() > 0 or np.abs(table[pad + 1:] - ours).max() > 1e-3:
        raise ValueError(f"The checkpoint's {name} is not fairseq's sinusoid table (positions "
                         f"from {pad + 1}), which this import computes.")


def _check_tokenizer(hf_config, tokenizer, config, source_vocab, target_vocab, where):
    """The tokenizer's special ids, languages and sizes must be the model's."""
    vocabulary = tokenizer.vocabulary
    ours = (vocabulary.pad_id, vocabulary.eos_id, vocabulary.decoder_start_id)
    theirs = (config.pad_id, config.eos_id, config.decoder_start_id)
    if ours != theirs:
        raise ValueError(
            f"{where}: the vocabulary's padding, end and decoder start ids are {ours}, but "
            f"config.json says {theirs} (pad_token_id, eos_token_id, decoder_start_token_id).")
    langs = hf_config.get("langs")
    vocabulary_langs = [vocabulary.source_language, vocabulary.target_language]
    if langs is not None and list(langs) != vocabulary_langs:
        raise ValueError(f"{where}: langs {list(langs)} differ from the tokenizer's "
                         f"{vocabulary_langs} (tokenizer_config.json).")
    check_vocabulary_sizes(tokenizer, source_vocab, target_vocab, where)
