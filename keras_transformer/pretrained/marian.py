"""Hugging Face Marian folders (the OPUS-MT models) as our `Transformer`.

A Marian model is the paper's architecture with other conventions, each a
`TransformerConfig` field here: sines before cosines in the positional table
(`sinusoid="marian"`), usually swish in the feed-forward layers, a trained
bias on the output logits (`logits_bias`), layer-norm epsilon 1e-5, and its
own special ids (end 0, unknown 1, padding the last id, decoding starting
from the padding id), which the model and tokenizer carry as data, so the
checkpoint's rows stay where they are and its logits can be compared with
the reference one for one.

Files: `config.json`, `model.safetensors` (see `weights.read_checkpoint`),
`source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json` when the
vocabularies are separate).
"""

import json
import os

from keras_transformer.models import BASE, transformer
from keras_transformer.pretrained import weights as checkpoint_weights
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer

# Hugging Face's activation names -> Keras'. Both "swish" and "silu" are
# x * sigmoid(x); HF's "gelu" is the exact (erf) form, as is Keras' default.
ACTIVATIONS = {"relu": "relu", "swish": "silu", "silu": "silu", "gelu": "gelu"}
LAYER_NORM_EPSILON = 1e-5  # PyTorch's nn.LayerNorm default, which the HF port uses
REQUIRED_KEYS = ("encoder_layers", "decoder_layers", "d_model", "encoder_ffn_dim",
                 "decoder_ffn_dim", "encoder_attention_heads", "decoder_attention_heads",
                 "vocab_size", "pad_token_id", "eos_token_id")


def read_config(directory, expected_type):
    """The `config.json` of a Hugging Face folder, checked to be `expected_type`."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"No config.json in {directory}: not a Hugging Face model folder.")
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path}: {error}.") from None
    if not isinstance(config, dict) or config.get("model_type") != expected_type:
        found = config.get("model_type") if isinstance(config, dict) else None
        raise ValueError(f"{path} describes a {found!r} model, not {expected_type!r}.")
    return config


def require_equal(config, path, *keys):
    """The value the keys share (encoder and decoder settings we keep as one)."""
    values = {key: config.get(key) for key in keys}
    if len(set(values.values())) != 1:
        raise ValueError(f"{path}: {values} differ; this package's model uses one value for both.")
    return values[keys[0]]


def activation(config, path):
    name = config.get("activation_function", "relu")
    if name not in ACTIVATIONS:
        raise ValueError(f"{path}: activation_function {name!r} is not supported "
                         f"(supported: {sorted(ACTIVATIONS)}).")
    return ACTIVATIONS[name]


def transformer_config(hf_config, unk_id, path="config.json", **conventions):
    """A `TransformerConfig` equal in function to a `MarianConfig` dict.

    The training-recipe fields stay the paper's (`keras-transformer train
    --init-from` switches to `fine_tuning_recipe`); decoding keeps the
    paper's beam 4 and GNMT length penalty 0.6 unless the checkpoint names
    a beam. `conventions` override the Hugging Face port's `sinusoid` and
    `layer_norm_epsilon` (Marian's own releases use other ones).
    """
    missing = [key for key in REQUIRED_KEYS if key not in hf_config]
    if missing:
        raise ValueError(f"{path} lacks {missing}; it is not a complete Marian config.")
    if not hf_config.get("tie_word_embeddings", True):
        raise ValueError(f"{path}: tie_word_embeddings is false; untied output projections "
                         "are not supported.")
    shared = hf_config.get("share_encoder_decoder_embeddings", True)
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
        shared_vocabulary=shared,
        max_length=hf_config.get("max_position_embeddings", 512),
        scale_embedding=bool(hf_config.get("scale_embedding", False)),
        logits_bias=True,
        pad_id=hf_config["pad_token_id"],
        unk_id=unk_id,
        decoder_start_id=hf_config.get("decoder_start_token_id", hf_config["pad_token_id"]),
        eos_id=hf_config["eos_token_id"],
        beam_size=int(hf_config.get("num_beams") or BASE.beam_size),
        **({"sinusoid": "marian", "layer_norm_epsilon": LAYER_NORM_EPSILON} | conventions),
    )


def load(directory, allow_pytorch_pickle=False):
    """Imports a Hugging Face Marian folder: `(Transformer, MarianTokenizer)`.

    Raises:
        ValueError: not a Marian folder, a configuration this package cannot
            represent, missing or corrupt files, tensors of the wrong shape.
    """
    hf_config = read_config(directory, "marian")
    tokenizer = MarianTokenizer.from_directory(directory)
    checkpoint = checkpoint_weights.read_checkpoint(directory, allow_pytorch_pickle)
    return build(hf_config, checkpoint, tokenizer, os.path.join(directory, "config.json")), tokenizer


def build(hf_config, checkpoint, tokenizer, where, **conventions):
    """The `Transformer` of a Marian config dict and its tensors (Hugging
    Face names), checked against the tokenizer; `where` names the source in
    errors; `conventions` as in `transformer_config`."""
    config = transformer_config(hf_config, tokenizer.unk_id, where, **conventions)
    source_vocab = hf_config["vocab_size"]
    target_vocab = (source_vocab if config.shared_vocabulary
                    else hf_config.get("decoder_vocab_size", source_vocab))
    _check_tokenizer(tokenizer, config, source_vocab, target_vocab, where)
    model = transformer(config, source_vocab, target_vocab)
    checkpoint_weights.assign(model, _model_weights(checkpoint, config))
    return model


def _model_weights(checkpoint, config):
    weights, used = checkpoint_weights.layer_weights(
        checkpoint, config.num_encoder_layers, config.num_decoder_layers)

    def take(name):
        return checkpoint_weights.take(checkpoint, name, used)

    if config.shared_vocabulary:
        weights["shared_embedding/embeddings"] = take("model.shared.weight")
        output = "shared_embedding"
    else:
        weights["source_embedding/embeddings"] = take("model.encoder.embed_tokens.weight")
        weights["target_embedding/embeddings"] = take("model.decoder.embed_tokens.weight")
        output = "target_embedding"
    weights[f"{output}/logits_bias"] = take("final_logits_bias").reshape(-1)
    # Tied copies of the shared matrix that some files store as well, and
    # the positional tables (computed, not trained) that older files hold.
    for name in ("lm_head.weight", "model.encoder.embed_tokens.weight",
                 "model.decoder.embed_tokens.weight"):
        if name in checkpoint and name not in used:
            if checkpoint[name].shape != weights[f"{output}/embeddings"].shape or (
                    name == "lm_head.weight"
                    and abs(checkpoint[name] - weights[f"{output}/embeddings"]).max() > 0):
                raise ValueError(f"The checkpoint's {name} is not the tied embedding matrix; "
                                 "untied output projections are not supported.")
            used.add(name)
    checkpoint_weights.check_all_used(checkpoint, used, ignorable=("embed_positions",))
    return weights


def _check_tokenizer(tokenizer, config, source_vocab, target_vocab, directory):
    """The tokenizer's special ids and sizes must be the model's."""
    if (tokenizer.pad_id, tokenizer.eos_id) != (config.pad_id, config.eos_id):
        raise ValueError(
            f"{directory}: the vocabulary's <pad> and </s> are ids {tokenizer.pad_id} and "
            f"{tokenizer.eos_id}, but config.json says {config.pad_id} and {config.eos_id}.")
    check_vocabulary_sizes(tokenizer, source_vocab, target_vocab, directory)


def check_vocabulary_sizes(tokenizer, source_vocab, target_vocab, where):
    """The tokenizer's vocabularies must be the model's embeddings, row for
    row (run folders rebuild the model from the tokenizer's sizes)."""
    if (tokenizer.vocab_size, tokenizer.target_vocab_size) != (source_vocab, target_vocab):
        raise ValueError(
            f"{where}: the vocabularies have {tokenizer.vocab_size} and "
            f"{tokenizer.target_vocab_size} ids but the model's embeddings "
            f"{source_vocab} and {target_vocab} rows.")
