"""TensorFlow SavedModel exports that load without keras_transformer.

Two SavedModels come out of a model:

- the text model (`include_text=True`): `serving_default` takes a batch of
  strings and returns translations and scores, with SentencePiece
  tokenisation (tf-text) and the cached beam search inside the graph, with the
  paper's defaults; `translate` takes the beam size, alpha and decode margin
  as inputs and returns n-best lists; `sample` draws each translation from
  the model's distribution (top_k, 0 for all tokens; temperature; seed;
  decode margin: `decoding.Sampling`), for back-translation; plus the id
  signatures below. Loading it
  needs TF Text's ops: `import tensorflow_text` in Python, or a TensorFlow
  Serving build that links them.
- the core model (`include_text=False`): only the id signatures, made of core
  TensorFlow ops, which any stock TensorFlow Serving binary runs:
  `search_ids` (source ids -> n-best target ids and scores, beam search
  inside), `logits` (source and target ids -> logits) and `encode`
  (source ids -> encoder output).
"""

import keras
import tensorflow as tf

from keras_transformer.decoding import Sampling, beam_search, translate_text
from keras_transformer.export.traced import graph_function

_IDS = tf.TensorSpec([None, None], tf.int32)
_TEXT = tf.TensorSpec([None], tf.string)
_INT = tf.TensorSpec([], tf.int32)
_FLOAT = tf.TensorSpec([], tf.float32)


class ServingModule(tf.Module):
    """The functions a SavedModel serves, on one model's weights.

    Args:
        model: a `Transformer`.
        tokenizer: its tokenizer (one whose `in_graph` is True); `None` for
            a core-ops-only module.
    """

    def __init__(self, model, tokenizer=None):
        super().__init__(name="keras_transformer")
        self.model = model
        self.tokenizer = tokenizer
        config = model.config
        self.defaults = (config.beam_size, float(config.length_penalty), config.decode_margin)
        self.search_ids = graph_function(self._search_ids, [_IDS, _INT, _FLOAT, _INT])
        self.logits = graph_function(self._logits, [_IDS, _IDS])
        self.encode = graph_function(self._encode, [_IDS])
        if tokenizer is not None:
            self.translate = graph_function(self._translate, [_TEXT, _INT, _FLOAT, _INT])
            self.serving_default = graph_function(self._serving_default, [_TEXT])
            self.sample = graph_function(self._sample, [_TEXT, _INT, _FLOAT, _INT, _INT])

    def _search_ids(self, source_ids, beam_size, alpha, decode_margin):
        result = beam_search(self.model, source_ids, beam_size=beam_size, alpha=alpha,
                             decode_margin=decode_margin)
        return {"target_ids": result.tokens, "scores": result.scores}

    def _logits(self, source_ids, target_ids):
        return {"logits": self.model({"source_ids": source_ids, "target_ids": target_ids})}

    def _encode(self, source_ids):
        return {"encoder_output": self.model.encode(source_ids)}

    def _translate(self, text, beam_size, alpha, decode_margin):
        translations, scores = translate_text(self.model, self.tokenizer, text, beam_size, alpha,
                                              decode_margin)
        return {"translations": translations, "scores": scores}

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

    def with_text(self, tokenizer):
        """A text module (`tokenizer`'s) on this module's model that shares
        this module's id functions, traces included: an export writes a
        SavedModel of each, and tracing a beam search takes seconds."""
        module = ServingModule(self.model, tokenizer)
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
    sublayers. Saving the functions' own module did both: the small run's
    text SavedModel took 13-15 s to write after its signatures were traced,
    and 2.8 s this way (and 3.2 MB instead of 5.3).
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
    return sorted(core + ["sample", "serving_default", "translate"]) if text else core


def save(model, path, tokenizer=None):
    """Writes a SavedModel of `model` (with text signatures if a tokenizer is
    given) to `path`."""
    return ServingModule(model, tokenizer).save(path)
