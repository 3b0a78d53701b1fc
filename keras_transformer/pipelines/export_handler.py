"""A RunInference model handler for this package's exports.

Beam's own TensorFlow handlers (`apache_beam.ml.inference.
tensorflow_inference`) load models with `tf.keras.models.load_model` and
import `tensorflow_hub`: neither loads a plain `tf.saved_model` export under
Keras 3 (Beam issue #30616), and tensorflow_hub no longer imports on
TensorFlow 2.21. `ExportModelHandler` loads an export folder
(`export/export_model.py`) itself, once per worker process (RunInference
shares a loaded model between the threads of a process), with either
runtime:

- "saved_model": `saved_model/`'s `translate` signature (text in, text out,
  the beam search and tf-text's SentencePiece inside the graph); TensorFlow
  and tensorflow_text only;
- "ctranslate2": `ctranslate2/` with `CTranslate2Translator` (our search's
  rules on CTranslate2's decoder), no TensorFlow.

Both translate each sentence as `examples/translate.py` does with the
model the export was made from (blank lines give "", lines longer than the
model accepts are cut).
"""

import concurrent.futures
import dataclasses
import os
import warnings
import zlib

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from keras_transformer.batch_defaults import DEFAULT_IN_FLIGHT
from keras_transformer.textfiles import TruncationWarning, read_json

RUNTIMES = ("saved_model", "ctranslate2")


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How to search: beam size (1 is greedy), GNMT length penalty alpha,
    output length margin (`None` takes the export's default); or, with
    `sampling_topk` set, drawing each translation from the model's
    distribution (`decoding.Sampling`: 0 for all tokens, k for the k most
    likely), with a temperature and a seed."""

    beam_size: int | None = None
    alpha: float | None = None
    decode_margin: int | None = None
    sampling_topk: int | None = None
    sampling_temperature: float = 1.0
    seed: int = 0

    def resolved(self, config):
        """The settings with the export's defaults (its `export.json`
        config) filled in."""
        return dataclasses.replace(
            self, beam_size=config["beam_size"] if self.beam_size is None else self.beam_size,
            alpha=float(config["length_penalty"] if self.alpha is None else self.alpha),
            decode_margin=config["decode_margin"] if self.decode_margin is None else self.decode_margin)


def export_config(export_dir):
    """The model config recorded in an export's `export.json`."""
    path = os.path.join(export_dir, "export.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{export_dir} holds no export.json; give a folder written by "
                                "export/export_model.py.")
    return read_json(path)["config"]


def check_runtime(export_dir, runtime):
    """Raises a one-line error if the export cannot run on `runtime`."""
    if runtime not in RUNTIMES:
        raise ValueError(f"Unknown runtime {runtime!r}; expected one of {RUNTIMES}.")
    if not os.path.isdir(export_dir):
        raise ValueError(f"{export_dir} is not a folder; give one written by keras-transformer "
                         "export.")
    folder = os.path.join(export_dir, runtime)
    if not os.path.isdir(folder):
        how = ("export it with --formats ctranslate2" if runtime == "ctranslate2" else
               "its tokenizer is not TensorFlow ops (FSMT): use --runtime ctranslate2")
        raise ValueError(f"{export_dir} has no {runtime}/ folder; {how}.")


def batch_seed(seed, batch):
    """The seed a batch of `Line`s draws with: the run's seed and the
    batch's lines (files and numbers), so that lines in the same place of
    two batches draw independently, and a batch of the same lines draws the
    same translations again."""
    keys = ",".join(f"{line.file}:{line.number}" for line in batch)
    return zlib.crc32(f"{seed}/{keys}".encode("utf-8")) & 0x7FFFFFFF


def split_by_tokens(batch, parts):
    """`batch` (`Line`s, with `tokens`) cut into at most `parts` runs of
    consecutive lines with about equal tokens (end tokens counted)."""
    total = sum(line.tokens + 1 for line in batch)
    runs, run, done = [], [], 0
    for line in batch:
        run.append(line)
        done += line.tokens + 1
        if done * parts >= total * (len(runs) + 1) and len(runs) < parts - 1:
            runs.append(run)
            run = []
    return runs + [run] if run else runs


class ExportModelHandler(ModelHandler):
    """Translates batches of `Line`s (any objects with `text` and `tokens`)
    with an export folder; each result's inference is the translation
    (str).

    Batches come from upstream (`SortAndBatchElements` in
    `translate_corpus`): use it with `RunInference(handler.
    with_no_batching())`. The SavedModel runtime cuts each batch into
    `in_flight` searches of about equal tokens and runs them at once on
    threads, as `decoding.Translator` keeps searches in flight: while one
    is between steps in the graph's loop, the other uses the cores.
    (RunInference gives a worker one batch at a time, so this is the place
    to overlap them.)

    Args:
        export_dir: an export folder.
        runtime: "saved_model" or "ctranslate2".
        decoding: a `Decoding` (defaults: the export's).
        threads: CPU threads of one CTranslate2 model (default: its own
            choice); TensorFlow takes its own.
        in_flight: searches a batch is cut into (SavedModel runtime; the
            CTranslate2 one batches and threads by itself).
    """

    def __init__(self, export_dir, runtime="saved_model", decoding=Decoding(), threads=None,
                 in_flight=DEFAULT_IN_FLIGHT):
        super().__init__()
        check_runtime(export_dir, runtime)
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1; got {in_flight}.")
        self.export_dir = os.fspath(export_dir)
        self.runtime = runtime
        self.decoding = decoding.resolved(export_config(export_dir))
        self.threads = threads
        self.in_flight = in_flight if runtime == "saved_model" else 1

    def load_model(self):
        folder = os.path.join(self.export_dir, self.runtime)
        if self.runtime == "ctranslate2":
            from keras_transformer.export.ctranslate2_translator import CTranslate2Translator

            return CTranslate2Translator(folder, threads=self.threads, seed=self.decoding.seed)
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops; tensorflow/text#315)

        model = tf.saved_model.load(folder)
        if self.decoding.sampling_topk is not None and "sample" not in model.signatures:
            raise ValueError(f"{folder} has no sample signature (exported before it existed); "
                             "export the run again to sample with it.")
        return model

    def run_inference(self, batch, model, inference_args=None):
        settings = self.decoding
        if self.runtime == "ctranslate2":
            texts = [line.text for line in batch]
            with warnings.catch_warnings():  # cut lines are reported by the pipeline, by name
                warnings.simplefilter("ignore", TruncationWarning)
                if settings.sampling_topk is not None:
                    translations = model.sample(texts, settings.sampling_topk,
                                                settings.sampling_temperature, settings.decode_margin)
                else:
                    translations = model.translate(texts, settings.beam_size, settings.alpha,
                                                   settings.decode_margin)
            return [PredictionResult(line, text) for line, text in zip(batch, translations)]
        parts = split_by_tokens(batch, self.in_flight)
        with concurrent.futures.ThreadPoolExecutor(len(parts)) as threads:
            searched = threads.map(lambda lines: self._search(lines, model), parts)
            translations = [text for part in searched for text in part]
        return [PredictionResult(line, translation.decode("utf-8", errors="replace"))
                for line, translation in zip(batch, translations)]

    def _search(self, lines, model):
        """The SavedModel's translations (bytes) of `lines`, one search."""
        import tensorflow as tf

        settings = self.decoding
        text = tf.constant([line.text.encode("utf-8") for line in lines], tf.string)
        margin = tf.constant(settings.decode_margin, tf.int32)
        if settings.sampling_topk is not None:
            outputs = model.signatures["sample"](
                text=text, top_k=tf.constant(settings.sampling_topk, tf.int32),
                temperature=tf.constant(settings.sampling_temperature, tf.float32),
                seed=tf.constant(batch_seed(settings.seed, lines), tf.int32), decode_margin=margin)
            return list(outputs["translations"].numpy())
        outputs = model.signatures["translate"](
            text=text, beam_size=tf.constant(settings.beam_size, tf.int32),
            alpha=tf.constant(settings.alpha, tf.float32), decode_margin=margin)
        return list(outputs["translations"].numpy()[:, 0])

    def get_num_bytes(self, batch):
        return sum(len(line.text) for line in batch)

    def get_metrics_namespace(self):
        return "keras_transformer"
