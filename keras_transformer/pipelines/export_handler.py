"""A RunInference model handler for this package's models: an export
folder, or a run folder.

Beam's own TensorFlow handlers (`apache_beam.ml.inference.
tensorflow_inference`) load models with `tf.keras.models.load_model` and
import `tensorflow_hub`: neither loads a plain `tf.saved_model` export under
Keras 3 (Beam issue #30616), and tensorflow_hub no longer imports on
TensorFlow 2.21. `ExportModelHandler` opens the folder with
`keras_transformer.runtimes` itself, once per worker process (RunInference
shares a loaded model between the threads of a process), with any of its
runtimes: an export's "saved_model" (TensorFlow and tensorflow_text only),
"ctranslate2" (no TensorFlow) or "onnx", or "keras" (the `Translator`, for a
run folder or an export's model.keras).

Each translates each sentence as `keras-transformer translate` does with
the model the export was made from (blank lines give "", lines longer than
the model accepts are cut).
"""

import zlib

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from keras_transformer import run_folder, trust
from keras_transformer.glossary import Glossary, GlossaryError
from keras_transformer.documents import TextDocument
from keras_transformer.batch_defaults import DEFAULT_IN_FLIGHT
from keras_transformer.runtimes import Decoding, check_runtime, default_runtime, open_runtime


def batch_seed(seed, batch):
    """The seed a batch of `Line`s draws with: the run's seed and the
    batch's lines (files and numbers), so that lines in the same place of
    two batches draw independently, and a batch of the same lines draws the
    same translations again."""
    keys = ",".join(f"{line.file}:{line.number}" for line in batch)
    return zlib.crc32(f"{seed}/{keys}".encode("utf-8")) & 0x7FFFFFFF


class ExportModelHandler(ModelHandler):
    """Translates batches of `Line`s (any objects with `text`) with an export
    or a run folder; each result's inference is the translation (str) and
    how far to trust it (a `trust.Quality`: `Runtime.assess` of its
    sentences, `trust.combined`).

    Batches come from upstream (`SortAndBatchElements` in
    `translate_corpus`): use it with `RunInference(handler.
    with_no_batching())`. The SavedModel and keras runtimes cut each batch
    into `in_flight` searches of about equal tokens and run them at once on
    threads (RunInference gives a worker one batch at a time, so this is the
    place to overlap them); CTranslate2 batches and threads by itself.

    Args:
        export_dir: an export folder, or a run folder.
        runtime: one of `runtimes.RUNTIMES` (default: the folder's,
            `runtimes.default_runtime`).
        decoding: a `Decoding` (defaults: the model's).
        threads: CPU threads of a CTranslate2 or ONNX model (default: its
            own choice); TensorFlow takes its own.
        in_flight: searches a batch is cut into (SavedModel and keras runtimes).
        language: the language whose rules split a line into sentences
            (default: the model's source language where its folder says,
            else English's).
        split: translate each line sentence by sentence, joined back with
            its own spacing (`documents.TextDocument`); False takes a line as
            one input.
        glossary: `(data, format)` of a glossary file (`glossary.FORMATS`)
            every translation obeys (the keras runtime's), read again by
            each worker as it loads the model; None: none.
    """

    def __init__(self, export_dir, runtime=None, decoding=Decoding(), threads=None,
                 in_flight=DEFAULT_IN_FLIGHT, language=None, split=True, glossary=None):
        super().__init__()
        runtime = runtime or default_runtime(export_dir)
        check_runtime(export_dir, runtime, decoding)
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1; got {in_flight}.")
        self.export_dir = str(export_dir)
        self.runtime = runtime
        self.decoding = decoding.resolved(run_folder.model_config(export_dir))
        self.threads = threads
        self.in_flight = in_flight if runtime in ("saved_model", "keras") else 1
        self.language = language or (run_folder.languages(export_dir) or ("en",))[0]
        self.split = split
        self.glossary_file, self._glossary = glossary, None
        if glossary is not None:
            if runtime != "keras":
                raise GlossaryError(f"--glossary is obeyed by the keras runtime's search; the "
                                    f"{runtime} runtime runs its own: give --runtime keras")
            self._read_glossary()  # a mistake in it, before any work

    def _read_glossary(self):
        data, format = self.glossary_file
        target = (run_folder.languages(self.export_dir) or (None, None))[1]
        return Glossary.parse(data, format, self.language, target, name="--glossary")

    def load_model(self):
        if self.glossary_file is not None:
            self._glossary = self._read_glossary()
        runtime = open_runtime(self.export_dir, self.runtime, self.decoding, self.threads,
                               self.in_flight)
        runtime.check_glossary(self._glossary)
        return runtime

    def run_inference(self, batch, model, inference_args=None):
        seed = batch_seed(self.decoding.seed, batch) if self.decoding.sampling else None
        # A blank line gives "", as translate writes it.
        read = [TextDocument(line.text if line.text.strip() else "", self.language, self.split)
                for line in batch]
        options = {"glossary": self._glossary} if self._glossary is not None else {}
        sentences = [sentence for document in read for sentence in document.sentences]
        translations = [found[0][0] for found in model.translate(sentences, seed=seed,
                                                                 **options)]
        assessed = iter(zip(translations, model.assess(sentences, translations)))
        results = []
        for line, document in zip(batch, read):
            mine = [next(assessed) for _ in document.sentences]
            results.append(PredictionResult(line, (
                document.render([translation for translation, _ in mine]),
                trust.combined([quality for _, quality in mine]))))
        return results

    def get_num_bytes(self, batch):
        return sum(len(line.text) for line in batch)

    def get_metrics_namespace(self):
        return "keras_transformer"
