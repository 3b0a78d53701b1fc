"""Validation BLEU and chrF while a run trains, on any Keras backend: the
validation sentences translated greedily by a search in `keras.ops` and
scored by `evaluation.score`.

Translation, evaluation and the exports search with `decoding.search`, in
TensorFlow ops (exportable, with finished sentences leaving the batch).
While a model trains its weights live on the training backend, so the
validation translations are searched there, by this loop: the same tokens
as `decoding.greedy_search` (the tests check it), with fixed shapes (a cache
of the longest output, batches padded to `data.shape_boundaries` lengths and
a fixed number of rows) so that it is compiled once per source length, and
the weights passed in as arguments, so that the compiled search reads the
weights of the moment rather than those it was compiled with.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer.data import encode_sources, shape_boundaries
from keras_transformer.evaluation import score

_NEG_INF = -1e9


def greedy_tokens(model, source_ids):
    """The greedy translation of each row of `source_ids` (int32 `(rows,
    width)`, padded, each source ending in the end token): int32 `(rows,
    1 + min(width + decode_margin, max_length))`, the start token, then the
    tokens up to the end token, padding after it."""
    config = model.config
    rows, width = source_ids.shape
    length = min(width + config.decode_margin, config.max_length)
    real = ops.sum(ops.cast((source_ids != config.pad_id) & (source_ids != config.eos_id),
                            "int32"), axis=1)
    limits = ops.minimum(real + config.decode_margin, config.max_length)
    vocabulary = model.target_vocab_size
    banned = sorted({config.pad_id, config.decoder_start_id} - {config.eos_id})
    ban = ops.convert_to_tensor(np.isin(np.arange(vocabulary), banned) * _NEG_INF, "float32")
    not_end = ops.arange(vocabulary) != config.eos_id
    cache = model.initial_cache(model.encode(source_ids, training=False), source_ids, length)
    output_weights = model.output_weights()
    tokens = ops.concatenate([ops.full((rows, 1), config.decoder_start_id, "int32"),
                              ops.full((rows, length), config.pad_id, "int32")], axis=1)
    columns = ops.arange(length + 1)

    def body(step, tokens, finished, cache):
        step_ids = ops.expand_dims(ops.take(tokens, step, axis=1), 1)
        logits, cache = model.decode_step(step_ids, step, cache, output_weights)
        log_probs = ops.log_softmax(ops.cast(logits[:, -1], "float32"), axis=-1) + ban[None]
        at_limit = step + 1 >= limits
        log_probs = ops.where(at_limit[:, None] & not_end[None], _NEG_INF, log_probs)
        choice = ops.where(finished, config.pad_id, ops.cast(ops.argmax(log_probs, axis=-1),
                                                             "int32"))
        tokens = ops.where(columns[None] == step + 1, choice[:, None], tokens)
        return step + 1, tokens, finished | (choice == config.eos_id), cache

    _, tokens, _, _ = ops.while_loop(
        lambda step, tokens, finished, cache: ~ops.all(finished), body,
        (ops.convert_to_tensor(0, "int32"), tokens, ops.zeros((rows,), "bool"), cache),
        maximum_iterations=length)
    return tokens


class KerasGreedyTranslator:
    """Greedy translations of lists of sentences on any Keras backend.

    Args:
        model: a `Transformer` (its current weights are read at every call).
        tokenizer: its tokenizer.
        rows: sentences a search (the last batch is filled with blank ones).
    """

    def __init__(self, model, tokenizer, rows=64):
        self.model = model
        self.tokenizer = tokenizer
        self.rows = rows
        self._widths = np.array(shape_boundaries(model.config.max_length))
        self._search = _compiled(self._search_with)

    def _search_with(self, values, source_ids):
        mapping = list(zip(self.model.variables, values))
        with keras.StatelessScope(state_mapping=mapping):
            return greedy_tokens(self.model, source_ids)

    def translate(self, texts):
        """Strings in, strings out, in the input's order; blank ones give ""."""
        config = self.model.config
        source_ids, blank = encode_sources(self.tokenizer, list(texts),
                                           config.max_source_tokens)
        source_ids, blank = np.asarray(source_ids), np.asarray(blank)
        lengths = (source_ids != config.pad_id).sum(axis=1)
        values = [variable.value for variable in self.model.variables]
        translations = [""] * len(texts)
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(order), self.rows):
            chosen = order[start:start + self.rows]
            width = int(self._widths[np.searchsorted(self._widths, lengths[chosen].max())])
            batch = np.full((self.rows, width), config.pad_id, np.int32)
            batch[:, 0] = config.eos_id  # blank rows fill the last batch
            sources = source_ids[chosen, :width]
            batch[:len(chosen), :sources.shape[1]] = sources
            tokens = ops.convert_to_numpy(self._search(values, batch))[:len(chosen), 1:]
            for index, text in zip(chosen, self.tokenizer.detokenize(tokens).numpy()):
                translations[index] = "" if blank[index] else text.decode("utf-8")
        return translations


class BleuValidator:
    """Translates fixed validation sentences and scores them; give it to
    `TrainingLoop.train(validators=[...])` to get `val_bleu` and `val_chrf`
    at the end of every epoch. Greedy search (`KerasGreedyTranslator`)
    keeps validation fast; the paper's final scores use beam search
    (`keras-transformer evaluate`).

    Args:
        tokenizer: the run's tokenizer.
        sources: a list of strings.
        references: a list of strings, one per source.
    """

    def __init__(self, tokenizer, sources, references):
        self.tokenizer = tokenizer
        self.sources = list(sources)
        self.references = list(references)
        self._translator = None

    def __call__(self, model):
        if self._translator is None or self._translator.model is not model:
            self._translator = KerasGreedyTranslator(model, self.tokenizer)
        hypotheses = self._translator.translate(self.sources)
        return score(hypotheses, self.references).as_dict(prefix="val_")


def _compiled(function):
    """`function` compiled by the backend: `jax.jit` (once per shape), a
    `tf.function`, or itself on PyTorch (without autograd)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(function)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, autograph=False)
    import torch

    return torch.no_grad()(function)
