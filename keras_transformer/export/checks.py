"""What every format's check compares with: the check sentences, the model's
own outputs on them, and the helpers that measure agreement and run a
format in a process of its own."""

import dataclasses
import json
import subprocess
import sys
import warnings

import numpy as np
import tensorflow as tf

from keras_transformer.decoding import Translator
from keras_transformer.data import encode_sources
from keras_transformer.textfiles import TruncationWarning

CHECK_SENTENCES = ("", "Guten Morgen!", "Das Haus ist groß.",
                   "Ich habe heute keine Zeit, aber morgen komme ich gern.",
                   ">>fra<< Wo ist der Bahnhof?")
"""What every format translates in its check. The last starts with a
language code: one id for a multilingual OPUS-MT model's tokenizer (unk if
its vocabulary lacks it), plain text for others."""

CHECK_SECONDS = 900
"""How long a check process may take before the export fails."""


@dataclasses.dataclass
class Checks:
    """The model, its tokenizer and what the formats' checks compare with,
    made once per export (`for_model`).

    Attributes:
        quantization: how the formats that can store weights in another
            type do so (`names.QUANTIZATIONS`).
        precision: what the SavedModels decode in.
        source, target: int32 source ids of the non-empty check sentences
            (padded, each ending in the end id), and target ids (the same
            sentences after the start id: any target will do for comparing
            logits).
        logits: the model's logits for them.
        modules: the SavedModels' functions (`saved_model.ServingModules`),
            each traced once per export and shared by the checks that
            compare with them.
    """

    model: object
    tokenizer: object
    quantization: str
    precision: str
    source: np.ndarray
    target: np.ndarray
    logits: np.ndarray
    modules: object

    @classmethod
    def for_model(cls, model, tokenizer, quantization, precision, modules):
        texts = tf.constant([s for s in CHECK_SENTENCES if s])
        source, _ = encode_sources(tokenizer, texts, model.config.max_source_tokens)
        ids = tokenizer.tokenize(texts)[:, :model.config.max_source_tokens]
        target = tf.concat([tf.fill([ids.nrows(), 1], tokenizer.bos_id), ids], axis=1).to_tensor(
            default_value=tokenizer.pad_id)
        source, target = source.numpy(), target.numpy()
        logits = model({"source_ids": source, "target_ids": target}).numpy()
        return cls(model, tokenizer, quantization, precision, source, target, logits, modules)

    @property
    def inputs(self):
        """The check ids, as the model and the exported graphs take them."""
        return {"source_ids": self.source, "target_ids": self.target}

    def settings(self):
        """The model config's beam size, length penalty and decode margin."""
        config = self.model.config
        return config.beam_size, float(config.length_penalty), config.decode_margin

    def translator_translations(self, model=None):
        """The `Translator`'s translations of the check sentences (with
        `model`, default the exported one)."""
        with warnings.catch_warnings():  # a check sentence may be longer than the model accepts
            warnings.simplefilter("ignore", TruncationWarning)
            return Translator(model or self.model, self.tokenizer).translate(list(CHECK_SENTENCES))

    def saved_model_translations(self, runs):
        """The text SavedModel's `translate` function's (run in this process)
        n-best translations and scores of the check sentences, for each
        `(beam_size, alpha, decode_margin)` of `runs`."""
        translate, found = self.modules.get().translate, []
        for beam_size, alpha, decode_margin in runs:
            output = translate(tf.constant(list(CHECK_SENTENCES)), tf.constant(beam_size),
                               tf.constant(float(alpha)), tf.constant(decode_margin))
            found.append(([[text.decode() for text in row]
                           for row in output["translations"].numpy()],
                          output["scores"].numpy()))
        return found


def run_checker(arguments, request, what):
    """A runner script's `--json` answer to `request`, from a process of its
    own (Python with `arguments`); a one-line `ValueError` naming `what`
    when that process fails or hangs."""
    try:
        done = subprocess.run([sys.executable, *arguments], input=json.dumps(request),
                              capture_output=True, text=True, timeout=CHECK_SECONDS)
    except subprocess.TimeoutExpired:
        raise ValueError(f"Export check failed: {what} did not finish in {CHECK_SECONDS} s.") \
            from None
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["no output"]
        raise ValueError(f"Export check failed: {what} did not run: {lines[-1]}")
    return json.loads(done.stdout)


def agreement(values, expected):
    """The fraction of items equal to the expected ones."""
    return float(np.mean([np.array_equal(a, b) for a, b in zip(values, expected)]))


def require(ok, message):
    """Fails the export with `message` unless `ok`."""
    if not ok:
        raise ValueError(f"Export check failed: {message}.")
