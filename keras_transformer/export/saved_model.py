"""TensorFlow SavedModel exports that load without keras_transformer.

Two SavedModels come out of a model:

- the text model (`include_text=True`): `serving_default` takes a batch of
  strings and returns translations and scores, with SentencePiece
  tokenisation (tf-text) and the cached beam search inside the graph, with the
  paper's defaults; `translate` takes the beam size, alpha and decode margin
  as inputs and returns n-best lists; `sample` draws each translation from
  the model's distribution (top_k, 0 for all tokens; temperature; seed;
  decode margin: `decoding.Sampling`), for back-translation;
  `translate_constrained` takes each sentence's target phrases too (a
  glossary's terms: `phrases`, strings `(batch, phrases)`, "" for none, and
  `owner`, the constraint each is an alternative of) and returns n-best
  lists that hold them (`met` says which do: lexically constrained beam
  search, `decoding.constraints`); plus the id signatures below. Loading it
  needs TF Text's ops: `import tensorflow_text` in Python, or a TensorFlow
  Serving build that links them.
- the core model (`include_text=False`): only the id signatures, made of core
  TensorFlow ops, which any stock TensorFlow Serving binary runs:
  `search_ids` (source ids -> n-best target ids and scores, beam search
  inside), `logits` (source and target ids -> logits) and `encode`
  (source ids -> encoder output).
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import clean_texts, encode_sources
from keras_transformer.decoding import Sampling, beam_search, constraints, quality, translate_text
from keras_transformer.decoding.translator import translate_ids
from keras_transformer.export.checks import CHECK_SENTENCES, agreement, require
from keras_transformer.export.formats import ExportFormat
from keras_transformer.export.traced import graph_function
from keras_transformer.models import in_precision
from keras_transformer.run_folder import SAVED_MODEL_CORE

_IDS = tf.TensorSpec([None, None], tf.int32)
_TEXT = tf.TensorSpec([None], tf.string)
_INT = tf.TensorSpec([], tf.int32)
_FLOAT = tf.TensorSpec([], tf.float32)
_PHRASES = tf.TensorSpec([None, None], tf.string)


class ServingModule(tf.Module):
    """The functions a SavedModel serves, on one model's weights.

    Args:
        model: a `Transformer`.
        tokenizer: its tokenizer (one whose `in_graph` is True); `None` for
            a core-ops-only module.
        calibrator: the model's `trust.Calibrator`, whose confidence
            `translate` gives; None: NaN.
    """

    def __init__(self, model, tokenizer=None, calibrator=None):
        super().__init__(name="keras_transformer")
        self.model = model
        self.tokenizer = tokenizer
        self.calibrator = calibrator
        config = model.config
        self.defaults = (config.beam_size, float(config.length_penalty), config.decode_margin)
        self.search_ids = graph_function(self._search_ids, [_IDS, _INT, _FLOAT, _INT])
        self.logits = graph_function(self._logits, [_IDS, _IDS])
        self.encode = graph_function(self._encode, [_IDS])
        if tokenizer is not None:
            self.translate = graph_function(self._translate, [_TEXT, _INT, _FLOAT, _INT])
            self.serving_default = graph_function(self._serving_default, [_TEXT])
            self.sample = graph_function(self._sample, [_TEXT, _INT, _FLOAT, _INT, _INT])
            self.word_starts = constraints.word_starts(
                tokenizer.target_pieces(range(model.target_vocab_size)), config.eos_id)
            self.translate_constrained = graph_function(
                self._translate_constrained, [_TEXT, _PHRASES, _IDS, _INT, _FLOAT, _INT])

    def _search_ids(self, source_ids, beam_size, alpha, decode_margin):
        result = beam_search(self.model, source_ids, beam_size=beam_size, alpha=alpha,
                             decode_margin=decode_margin)
        return {"target_ids": result.tokens, "scores": result.scores}

    def _logits(self, source_ids, target_ids):
        return {"logits": self.model({"source_ids": source_ids, "target_ids": target_ids})}

    def _encode(self, source_ids):
        return {"encoder_output": self.model.encode(source_ids)}

    def _translate(self, text, beam_size, alpha, decode_margin):
        source_ids, blank = encode_sources(self.tokenizer, text, self.model.config.max_source_tokens)
        translations, scores, _ = translate_ids(self.model, self.tokenizer, source_ids, blank,
                                                beam_size, alpha, decode_margin)
        confidence = tf.fill([tf.shape(text)[0]], np.float32(np.nan))
        if self.calibrator is not None:
            confidence = tf.where(blank, confidence, quality.confidence_in_graph(
                self.model, self.tokenizer, self.calibrator, source_ids, clean_texts(text),
                translations[:, 0]))
        return {"translations": translations, "scores": scores, "confidence": confidence}

    def _translate_constrained(self, text, phrases, owner, beam_size, alpha, decode_margin):
        translations, scores, met = translate_text(
            self.model, self.tokenizer, text, beam_size, alpha, decode_margin,
            constraints=constraints.of_text(self.tokenizer, phrases, owner, self.word_starts))
        return {"translations": translations, "scores": scores, "met": met}

    def _sample(self, text, top_k, temperature, seed, decode_margin):
        translations, scores = translate_text(
            self.model, self.tokenizer, text, 1, self.defaults[1], decode_margin,
            sampling=Sampling(top_k, temperature, seed))
        return {"translations": translations[:, 0], "scores": scores[:, 0]}

    def _serving_default(self, text):
        # A call of `translate`'s traced graph, not a second trace of the
        # search: half the tracing of the two, and one copy in the file.
        outputs = self.translate(text, *self.defaults)
        return {"translations": outputs["translations"][:, 0], "scores": outputs["scores"][:, 0]}

    def with_text(self, tokenizer, calibrator=None):
        """A text module (`tokenizer`'s, with `calibrator`) on this module's
        model that shares this module's id functions, traces included: an
        export writes a SavedModel of each, and tracing a beam search takes
        seconds."""
        module = ServingModule(self.model, tokenizer, calibrator)
        module.search_ids, module.logits, module.encode = self.search_ids, self.logits, self.encode
        return module

    def signatures(self):
        """Name -> concrete function, for `tf.saved_model.save`."""
        names = signature_names(self.tokenizer is not None)
        return {name: getattr(self, name).get_concrete_function() for name in names}

    def save(self, path):
        """Writes the SavedModel to `path` and returns `path`."""
        return save_traced(path, self.signatures(), [self.model, self.tokenizer])


def save_traced(path, signatures, captured):
    """Writes a SavedModel serving `signatures` (name -> concrete function,
    traced already), each also an attribute of the loaded object, and
    returns `path`. `captured`: what the functions read, Keras models (their
    weights are saved) and other trackables (a tokenizer's resources).

    What is saved holds the traced functions, not `tf.function`s, and the
    models' weights, not the models: `tf.saved_model.save` traces every
    `tf.function` of the object it saves anew (inside its save context,
    which is part of a trace's cache key), and reads every attribute of
    every object it tracks, which each Keras layer answers by walking its
    sublayers. Saving the functions' own module did both: a text
    SavedModel took several times as long to write after its signatures
    were traced, and its files were larger.
    """
    root = tf.Module(name="keras_transformer")
    root.captured = [variable for item in captured if isinstance(item, keras.Model)
                     for variable in item.weights]
    root.captured += [item for item in captured
                      if item is not None and not isinstance(item, keras.Model)]
    for name, function in signatures.items():
        setattr(root, name, function)
    tf.saved_model.save(root, path, signatures=signatures)
    return path


def signature_names(text):
    """The signatures of a text SavedModel (`text=True`) or a core one."""
    core = ["encode", "logits", "search_ids"]
    return sorted(core + ["sample", "serving_default", "translate", "translate_constrained"]) \
        if text else core


def save(model, path, tokenizer=None, calibrator=None):
    """Writes a SavedModel of `model` (with text signatures if a tokenizer is
    given; `calibrator`: see `ServingModule`) to `path`."""
    return ServingModule(model, tokenizer, calibrator).save(path)


class ServingModules:
    """The export's `ServingModule`s, each made once: the SavedModels' checks
    and the ONNX and LiteRT checks against the text SavedModel's functions
    share them, and with them their traces: each function is traced once per
    export (tracing a beam search takes seconds)."""

    def __init__(self, model, tokenizer, calibrator=None):
        self.tokenizer, self._model, self._modules = tokenizer, model, {}
        self.calibrator = calibrator

    def get(self, precision="float32", text=True):
        """The module decoding in `precision`, with the text functions
        (`text`) or the id functions only; the text one shares the id
        functions of the other."""
        key = (precision, text)
        if key not in self._modules:
            if text:
                module = self.get(precision, text=False).with_text(self.tokenizer,
                                                                   self.calibrator)
            else:
                module = ServingModule(in_precision(self._model, precision))
            self._modules[key] = module
        return self._modules[key]


LOGIT_TOLERANCE = {"float32": 1e-5, "float16": 2**-6, "bfloat16": 2**-3}
"""How far a SavedModel's logits may be from the float32 model's, relative
to the largest float32 logit: rounding only in float32; in float16 and
bfloat16 about 32 half-units of the last place (2**-11 and 2**-8) of the
format, more than the largest difference measured on the test models
(1.8e-3 and 3.8e-2) and far less than wrong weights give."""


class SavedModelFormat(ExportFormat):
    """saved_model_core/ (the id signatures, core TF ops) and, for a
    tokenizer made of TensorFlow ops, saved_model/ (text in, text out),
    decoding in the export's precision.

    The check:
    - loaded back, each gives exactly what the same functions give in this
      process before saving, text in (tokenizer, search, weights), ids in
      and logits (what the files hold is complete);
    - their logits are the float32 model's within `LOGIT_TOLERANCE` of its
      precision (the functions compute this model); checked first, so that
      a model that fails it is refused before anything is traced or written.
    Equality with the `Translator`'s translations is measured
    (`translator_agreement`), not required: the Translator sorts sentences
    by length, and a sentence's rounding can change with its place in the
    batch (bfloat16 on CPUs without native bfloat16, such as AVX2 ones,
    flips translations that way; float32 moves logits by about 1e-6)."""

    name = "saved_model"

    def write_and_check(self, checks, folder):
        core = checks.modules.get(checks.precision, text=False)
        serving, tokenizer = core.model, checks.tokenizer
        config = serving.config
        ids = {"source_ids": tf.constant(checks.source)}
        settings = {"beam_size": tf.constant(config.beam_size),
                    "alpha": tf.constant(float(config.length_penalty)),
                    "decode_margin": tf.constant(config.decode_margin)}
        text = {"text": tf.constant(list(CHECK_SENTENCES))}
        # One call of each computation: text in (tokenizer, search, weights),
        # ids in, logits. `translate` and `encode` are variants of these.
        calls = {self.name: {"serving_default": text},
                 SAVED_MODEL_CORE: {"search_ids": ids | settings,
                                    "logits": ids | {"target_ids": tf.constant(checks.target)}}}
        logits = core.logits(**calls[SAVED_MODEL_CORE]["logits"])["logits"].numpy()
        difference = float(np.abs(logits - checks.logits).max() / np.abs(checks.logits).max())
        tolerance = LOGIT_TOLERANCE[checks.precision]
        require(difference <= tolerance,
                f"the SavedModels' logits are {difference:.3g} of the largest logit away from the "
                f"float32 model's (more than {tolerance:.3g} in {checks.precision})")
        report = {"paths": [], "precision": checks.precision, "signatures": {},
                  "relative_logit_difference": difference}
        # A tokenizer that is not TensorFlow ops (FSMT's Moses tokenization)
        # cannot go into a SavedModel: such models serve ids only.
        for path, text_in in ((self.name, True), (SAVED_MODEL_CORE, False)):
            if text_in and not tokenizer.in_graph:
                continue
            module = checks.modules.get(checks.precision, text=text_in)
            loaded = tf.saved_model.load(module.save(os.path.join(folder, path))).signatures
            for name, call in calls[path].items():
                served, expected = loaded[name](**call), getattr(module, name)(**call)
                require(all(np.array_equal(served[key].numpy(), expected[key].numpy())
                            for key in expected),
                        f"{path}'s {name} gives other outputs loaded than in this process")
                if name == "serving_default":
                    report["translator_agreement"] = agreement(
                        [t.decode() for t in served["translations"].numpy()],
                        checks.translator_translations(serving))
            report["paths"].append(path)
            report["signatures"][path] = signature_names(text=text_in)
        return report
