"""The runtimes that run on TensorFlow: a run folder's (or an export's)
Keras model through the `Translator`, and an export's text SavedModel.
Imported when one of them is opened (`runtime.open_runtime`)."""

import collections
import dataclasses
import threading

import numpy as np

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops; tensorflow/text#315)

from keras_transformer import run_folder
from keras_transformer.decoding import Sampling, SlotTranslator, Translator
from keras_transformer.runtimes.runtime import Runtime, cleaned


class KerasRuntime(Runtime):
    """The `Translator` over a run folder's (or an export's) model.keras;
    it aligns by the model's attention.

    A search for one translation a sentence keeps its alignment as it goes
    (`Translator.translate(..., aligned=True)`), and the runtime keeps the
    alignments of its last `KEPT_ALIGNMENTS` translations, so that `align`
    on them (what a server asks right after translating) costs nothing;
    others are read in a second pass (`Translator.align`). Batches searched
    on several threads share them under a lock."""

    name = "keras"
    aligns = True
    takes_glossary = True
    KEPT_ALIGNMENTS = 4096

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        sampling = Sampling(decoding.sampling_topk, decoding.sampling_temperature, decoding.seed) \
            if decoding.sampling else None
        self.translator = Translator.from_directory(
            path, beam_size=decoding.beam_size, alpha=decoding.alpha,
            decode_margin=decoding.decode_margin, in_flight=in_flight, sampling=sampling,
            guard=decoding.guard)
        self._kept = collections.OrderedDict()  # (source, translation) -> Alignment
        self._lock = threading.Lock()

    def _translate(self, sentences, n_best, seed, glossary=None):
        if self.decoding.sampling:
            n_best = 1
        if n_best > 1:
            return self.translator.translate(sentences, n_best=n_best, seed=seed,
                                             on_overlong=lambda indexes, limit: None,
                                             glossary=glossary)
        found = self.translator.translate(sentences, n_best=1, seed=seed, aligned=True,
                                          on_overlong=lambda indexes, limit: None,
                                          glossary=glossary)
        self._keep(sentences, found)
        return [hypotheses for hypotheses, _ in found]

    def _keep(self, sentences, found):
        """Keeps the alignments of the latest translations: `found` holds
        `(hypotheses, alignment)` for each of `sentences`."""
        with self._lock:
            for sentence, (hypotheses, alignment) in zip(sentences, found):
                self._kept[sentence, hypotheses[0][0]] = alignment
                self._kept.move_to_end((sentence, hypotheses[0][0]))
            while len(self._kept) > self.KEPT_ALIGNMENTS:
                self._kept.popitem(last=False)

    @property
    def tokenizer(self):
        """The translator's tokenizer in plain Python (its `vocabulary`): the
        folder's, loaded once."""
        return self.translator.tokenizer.vocabulary

    def search_lone_faster(self, threads=None):
        """A lone sentence's search on onnxruntime, which keeps its
        alignment as `translate` asks (`Translator.search_lone_on_onnxruntime`);
        none with sampling, slots, or a model whose graphs cannot be
        written (a half precision, an activation they lack)."""
        if self.decoding.sampling or self.slots:
            return
        try:
            self.translator.search_lone_on_onnxruntime(threads)
        except ValueError:  # the traced search goes on serving lone sentences
            return
        self.lone = "onnxruntime"

    def slot_translator(self, n_best=1):
        """A `SlotTranslator` of `slots` (none without, or with sampling,
        whose draws are a batch's); one for the best translations keeps
        their alignments, as `translate` does."""
        if self.decoding.sampling or not self.slots:
            return None
        return SlotTranslator(self.translator, self.slots, n_best, aligned=n_best == 1,
                              on_aligned=self._keep if n_best == 1 else None)

    @property
    def quality_note(self):
        return self.translator.calibration_note and (
            f"its confidence is null: {self.translator.calibration_note}")

    @property
    def detect(self):
        return self.translator.detect

    @detect.setter
    def detect(self, detect):
        self.translator.detect = detect

    def assess(self, sentences, translations):
        """The `Translator`'s `assess`: confidence and every flag, from the
        model's signals."""
        return self.translator.assess(cleaned(sentences), list(translations))

    def align(self, sources, translations):
        sources, translations = list(sources), list(translations)
        with self._lock:
            found = [self._kept.get(pair) for pair in zip(sources, translations)]
        missing = [index for index, alignment in enumerate(found) if alignment is None]
        if missing:
            for index, alignment in zip(missing, self.translator.align(
                    cleaned([sources[i] for i in missing]), [translations[i] for i in missing])):
                found[index] = alignment
        return found


class SavedModelRuntime(Runtime):
    """An export's text SavedModel: its `translate` signature (tf-text's
    SentencePiece and the beam search in the graph), or `sample`.

    The `translate` signature gives each best translation's confidence where
    the export holds a calibrator (`export.exporter`); the runtime keeps
    those of its last `KEPT` translations for `assess`, which reads the
    flags from the texts."""

    name = "saved_model"
    KEPT = 4096

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        folder = run_folder.export_part(path, "saved_model")
        self.model = tf.saved_model.load(folder)
        if decoding.sampling and "sample" not in self.model.signatures:
            raise ValueError(f"{folder} has no sample signature (exported before it existed); "
                             "export the run again to sample with it.")
        self._confidence = collections.OrderedDict()  # (sentence, translation) -> confidence
        self._lock = threading.Lock()
        outputs = self.model.signatures["translate"].structured_outputs
        self.quality_note = None if "confidence" in outputs and run_folder.export_report(
            path).get("confidence", "").startswith("calibrated") else (
            "its confidence is null: the export holds no calibrator (keras-transformer calibrate "
            "the run, then export it again)")

    def assess(self, sentences, translations):
        """The flags read from the texts, and the confidence the `translate`
        signature gave where it translated the sentence into that
        translation lately (else None)."""
        found = super().assess(sentences, translations)
        with self._lock:
            kept = [self._confidence.get(pair) for pair in zip(cleaned(sentences), translations)]
        return [dataclasses.replace(quality, confidence=confidence)
                for quality, confidence in zip(found, kept)]

    def _translate(self, sentences, n_best, seed):
        return self._in_parts(sentences, lambda part: self._search(part, n_best, seed))

    def _search(self, sentences, n_best, seed):
        settings = self.decoding
        text = tf.constant([s.encode("utf-8") for s in cleaned(sentences)], tf.string)
        margin = tf.constant(settings.decode_margin, tf.int32)
        if settings.sampling:
            outputs = self.model.signatures["sample"](
                text=text, top_k=tf.constant(settings.sampling_topk, tf.int32),
                temperature=tf.constant(settings.sampling_temperature, tf.float32),
                seed=tf.constant(seed, tf.int32), decode_margin=margin)
            return [[(t.decode("utf-8", errors="replace"), 0.0)]
                    for t in outputs["translations"].numpy().reshape(-1)]
        outputs = self.model.signatures["translate"](
            text=text, beam_size=tf.constant(settings.beam_size, tf.int32),
            alpha=tf.constant(settings.alpha, tf.float32), decode_margin=margin)
        found = [[(t.decode("utf-8", errors="replace"), float(s)) for t, s in zip(texts, scores)]
                 [:n_best] for texts, scores in zip(outputs["translations"].numpy(),
                                                     outputs["scores"].numpy())]
        if self.quality_note is None:
            with self._lock:
                for sentence, hypotheses, confidence in zip(
                        cleaned(sentences), found, outputs["confidence"].numpy()):
                    if np.isfinite(confidence):
                        self._confidence[sentence, hypotheses[0][0]] = float(confidence)
                        self._confidence.move_to_end((sentence, hypotheses[0][0]))
                while len(self._confidence) > self.KEPT:
                    self._confidence.popitem(last=False)
        return found

