"""Text in, text out: tokenise, search, detokenise.

`translate_text` is one TensorFlow graph from a batch of strings to their
translations; the `Translator` batches Python lists through it, and the
exported SavedModel serves the same function, so both give the same output.

Defined behaviour for awkward input (the same in both, and in the ONNX
runner):
- bytes that are not valid UTF-8 (and, in Python strings, lone surrogates)
  become U+FFFD, which the tokenizers drop; NUL becomes a space
  (`data.clean_texts` in the graph, `textfiles.clean_text` in Python);
- an empty or blank sentence translates to "" with score 0 (in a batch its
  row, just the end token, is searched with the others and then replaced);
- a sentence longer than the model's `max_length - 1` tokens (one place is
  kept for the end token) is cut to that length, and the `Translator` warns
  with a `TruncationWarning` naming it; `Translator(..., overlong="error")`
  raises a ValueError naming it instead.
"""

import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import clean_texts, load_tokenizer
from keras_transformer.decoding.search import beam_search
from keras_transformer.models import Transformer, in_precision
from keras_transformer.textfiles import clean_text, truncation_warning

OVERLONG = ("truncate", "error")


def max_source_tokens(model):
    """The longest source, in subword tokens, before the end token."""
    return model.config.max_length - 1


def encode_sources(tokenizer, texts, max_tokens):
    """Strings -> padded source ids ending in the end token, cut to
    `max_tokens`; and a mask of the blank ones."""
    ids = tokenizer.tokenize(clean_texts(texts))[:, :max_tokens]
    blank = ids.row_lengths() == 0
    with_end = tf.concat([ids, tf.fill([ids.nrows(), 1], tokenizer.eos_id)], axis=1)
    return with_end.to_tensor(default_value=tokenizer.pad_id), blank


def translate_text(model, tokenizer, texts, beam_size, alpha, decode_margin, use_cache=True):
    """Translates a batch of strings in one graph.

    Args:
        texts: string `(batch,)`.
        beam_size: hypotheses kept per sentence; a scalar (tensors allowed).
        alpha: the length penalty; a scalar (tensors allowed).
        decode_margin: output up to the input length plus this many tokens;
            a scalar (tensors allowed).

    Returns:
        `(translations, scores)`: string `(batch, beam_size)` and float32
        `(batch, beam_size)`, best first; blank inputs give "" and 0.
    """
    source_ids, blank = encode_sources(tokenizer, texts, max_source_tokens(model))
    result = beam_search(model, source_ids, beam_size=beam_size, alpha=alpha,
                         decode_margin=decode_margin, use_cache=use_cache)
    batch, n_best = tf.shape(result.tokens)[0], tf.shape(result.tokens)[1]
    flat = tf.reshape(result.tokens, [batch * n_best, -1])
    translations = tf.reshape(tokenizer.detokenize(flat), [batch, n_best])
    translations = tf.where(blank[:, None], "", translations)
    scores = tf.where(blank[:, None], 0.0, result.scores)
    return translations, scores


class Translator:
    """Translates lists of sentences with a trained model and its tokenizer.

    Args:
        model: a `Transformer`.
        tokenizer: its tokenizer (a `Tokenizer`, or an imported model's).
        beam_size: default: the model config's (the paper's 4); 1 is greedy
            search.
        alpha: the length penalty; default: the model config's (0.6).
        decode_margin: output up to the input length plus this many tokens;
            default: the model config's (50).
        batch_size: sentences per search; sentences are grouped by length.
        overlong: "truncate" (default) or "error", for sentences longer than
            the model accepts.
        precision: None to decode with the model as it is, or "float32",
            "bfloat16" (faster on CPUs with AVX-512 BF16 or AMX; the Benchmarks
            page of the guide gives its speed and BLEU) or "float16" (GPUs):
            the search runs on a copy of the model in that precision (see
            `models.in_precision`).

    Example:
        translator = Translator.from_directory("runs/ding")
        translator.translate(["Guten Morgen!"])  # -> ["Good morning!"]
    """

    def __init__(self, model, tokenizer, beam_size=None, alpha=None, decode_margin=None,
                 batch_size=64, overlong="truncate", precision=None):
        if overlong not in OVERLONG:
            raise ValueError(f"overlong must be one of {OVERLONG}; got {overlong!r}.")
        config = model.config
        model = model if precision is None else in_precision(model, precision)
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = config.beam_size if beam_size is None else beam_size
        self.alpha = config.length_penalty if alpha is None else alpha
        self.decode_margin = config.decode_margin if decode_margin is None else decode_margin
        for name, value, lowest in (("beam_size", self.beam_size, 1), ("alpha", self.alpha, 0),
                                    ("decode_margin", self.decode_margin, 0)):
            if value < lowest:
                raise ValueError(f"{name} must be >= {lowest}; got {value}.")
        self.batch_size = batch_size
        self.overlong = overlong
        self._translate = tf.function(
            lambda texts: translate_text(model, tokenizer, texts, self.beam_size, self.alpha,
                                         self.decode_margin),
            input_signature=[tf.TensorSpec([None], tf.string)],
        )

    @classmethod
    def from_directory(cls, directory, model_file=None, **options):
        """Loads a training (or import) output folder: `averaged.keras` if
        present, else `model.keras` (or `model_file`), and its tokenizer."""
        return cls(*load_model_and_tokenizer(directory, model_file), **options)

    def source_lengths(self, sentences):
        """The length in subword tokens of each sentence (str or bytes), as
        the model reads it (before any cut to `max_length - 1`)."""
        texts = tf.constant([clean_text(s).encode("utf-8") for s in sentences], tf.string)
        return [int(n) for n in self.tokenizer.tokenize(texts).row_lengths()]

    def too_long(self, sentences):
        """Indexes of the sentences longer than the model's `max_length - 1`
        tokens, which `translate` cuts (or refuses)."""
        limit = max_source_tokens(self.model)
        return [i for i, n in enumerate(self.source_lengths(sentences)) if n > limit]

    def translate(self, sentences, n_best=None, progress=False):
        """Translates a list of sentences (str or bytes), one result each.

        Args:
            sentences: a list of strings.
            n_best: None for one string per sentence; an integer for lists of
                up to `min(n_best, beam_size)` `(translation, score)` pairs.
            progress: show a progress bar.

        Warns:
            TruncationWarning: naming the sentences cut to the model's length.
        """
        sentences = [clean_text(s) for s in sentences]
        if not sentences:
            return []
        lengths = self.source_lengths(sentences)
        limit = max_source_tokens(self.model)
        too_long = [i for i, n in enumerate(lengths) if n > limit]
        if too_long and self.overlong == "error":
            raise ValueError(
                f"Sentence(s) {too_long[:10]} are longer than the model's {limit} tokens "
                f"(the first has {lengths[too_long[0]]}); shorten them or use overlong='truncate'."
            )
        if too_long:
            warnings.warn(truncation_warning(too_long, limit), stacklevel=2)
        order = np.argsort(lengths, kind="stable")[::-1]
        results = [None] * len(sentences)
        bar = keras.utils.Progbar(len(sentences), unit_name="sentence") if progress else None
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            texts, scores = self._translate(tf.constant([sentences[i].encode("utf-8") for i in rows]))
            for row, row_texts, row_scores in zip(rows, texts.numpy(), scores.numpy()):
                hypotheses = [(t.decode("utf-8", errors="replace"), float(s))
                              for t, s in zip(row_texts, row_scores)]
                results[row] = hypotheses[:n_best] if n_best else hypotheses[0][0]
            if bar is not None:
                bar.add(len(rows))
        return results


def load_model_and_tokenizer(directory, model_file=None):
    """The model and tokenizer of a training output folder, with clear errors
    for what is missing or unreadable."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a folder; give a training run's output folder "
                                "or one written by examples/import_pretrained.py.")
    candidates = [model_file] if model_file else ["averaged.keras", "model.keras"]
    paths = [os.path.join(directory, name) for name in candidates]
    path = next((p for p in paths if os.path.isfile(p)), None)
    if path is None:
        raise FileNotFoundError(f"No model in {directory!r}: looked for {candidates}.")
    return load_transformer(path), load_tokenizer(directory)


def load_transformer(path):
    """A saved `Transformer` (`.keras`), with errors that name the file."""
    try:
        model = keras.models.load_model(path, safe_mode=True)
    except Exception as error:  # Keras raises many types for a corrupt file
        raise ValueError(f"Cannot load the model {path!r}: {error}") from None
    if not isinstance(model, Transformer):
        raise ValueError(f"{path!r} holds a {type(model).__name__}, not a keras_transformer Transformer.")
    return model
