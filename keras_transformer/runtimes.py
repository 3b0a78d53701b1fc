"""One interface over what can translate a folder: a run folder (a training
run, or a model brought in by `keras-transformer import`) through the
`Translator`, and an export folder through its SavedModel, CTranslate2 or
ONNX runtime. `keras-transformer serve` and `translate-corpus` open their
model here, so that both take either kind of folder, and say in one line
what to run where a runtime cannot.

| runtime | reads | needs |
|---|---|---|
| keras | a run folder (averaged.keras, else model.keras), or an export's model.keras | TensorFlow |
| saved_model | an export's saved_model/ (text in, text out) | TensorFlow, tensorflow-text |
| ctranslate2 | an export's ctranslate2/ (`--formats ctranslate2`) | ctranslate2, no TensorFlow |
| onnx | an export's onnx/ (encoder and decoder-step graphs, the search in NumPy) | onnxruntime, no TensorFlow |
| litert | an export's litert/translate.tflite (`--formats litert`), the search in the file | ai-edge-litert (or TensorFlow's LiteRT interpreter), tensorflow-text's kernels |

Each translates a list of sentences into up to `n_best` `(translation,
score)` pairs each, best first, as `translate` does with the model (blank
sentences give `("", 0.0)` pairs; sentences longer than the model accepts are cut
to its `max_length - 1` tokens, which `source_lengths` lets the caller see
first), or, with sampling, one draw each.

Plain Python at import: each runtime imports its own library when opened.
"""

import concurrent.futures
import dataclasses
import os

from keras_transformer.textfiles import read_json

RUNTIMES = ("keras", "saved_model", "ctranslate2", "onnx", "litert")


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How to search: beam size (1 is greedy), GNMT length penalty alpha,
    output length margin (`None` takes the model's default); or, with
    `sampling_topk` set, drawing each translation from the model's
    distribution (`decoding.Sampling`: 0 for all tokens, k for the k most
    likely), with a temperature and a seed."""

    beam_size: int | None = None
    alpha: float | None = None
    decode_margin: int | None = None
    sampling_topk: int | None = None
    sampling_temperature: float = 1.0
    seed: int = 0

    @property
    def sampling(self):
        return self.sampling_topk is not None

    def resolved(self, config):
        """The settings with the model's defaults (its config) filled in."""
        return dataclasses.replace(
            self, beam_size=config["beam_size"] if self.beam_size is None else self.beam_size,
            alpha=float(config["length_penalty"] if self.alpha is None else self.alpha),
            decode_margin=config["decode_margin"] if self.decode_margin is None else self.decode_margin)


def folder_kind(path):
    """"export" (an export folder: export.json) or "run" (a run folder:
    config.json and a .keras model), with a one-line error for anything else."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path} is not a folder; give a training run, an imported model or an "
                         "export (keras-transformer export).")
    if os.path.isfile(os.path.join(path, "export.json")):
        return "export"
    if os.path.isfile(os.path.join(path, "config.json")) and any(
            os.path.isfile(os.path.join(path, name)) for name in ("averaged.keras", "model.keras")):
        return "run"
    raise ValueError(f"{path} is neither a run folder (config.json and averaged.keras or "
                     "model.keras) nor an export (export.json); give one of them.")


def model_config(path):
    """The model's config (a dict of `TransformerConfig` fields) of a run
    (config.json) or an export (export.json)."""
    path = os.fspath(path)
    if folder_kind(path) == "export":
        return read_json(os.path.join(path, "export.json"))["config"]
    return read_json(os.path.join(path, "config.json"))


def default_runtime(path):
    """keras for a run folder; for an export, the first of saved_model,
    ctranslate2, onnx and litert it holds, else keras (whose `check_runtime` says
    what the folder lacks)."""
    if folder_kind(path) == "run":
        return "keras"
    return next(runtime for runtime in RUNTIMES[1:] + ("keras",)
                if runtime == "keras" or os.path.isdir(os.path.join(path, runtime)))


def check_runtime(path, runtime, decoding=Decoding()):
    """Raises a one-line ValueError if `runtime` cannot translate `path`
    with `decoding`, saying what to run instead."""
    path = os.fspath(path)
    if runtime not in RUNTIMES:
        raise ValueError(f"Unknown runtime {runtime!r}; expected one of {RUNTIMES}.")
    kind = folder_kind(path)
    if kind == "run" and runtime != "keras":
        raise ValueError(f"{path} is a run folder, which the keras runtime translates; the "
                         f"{runtime} runtime reads an export: keras-transformer export {path} "
                         f"--output EXPORT{' --formats ctranslate2' * (runtime == 'ctranslate2')}, "
                         "then give EXPORT.")
    folder = os.path.join(path, "model.keras" if runtime == "keras" else runtime)
    if kind == "export" and not os.path.exists(folder):
        how = {"ctranslate2": "export it again with --formats ctranslate2",
               "onnx": "export it again with --formats onnx",
               "litert": "export it again with --formats litert",
               "saved_model": "its tokenizer is not TensorFlow ops (FSMT): use --runtime "
                              "ctranslate2, onnx or keras",
               "keras": "export it again with --formats keras"}[runtime]
        raise ValueError(f"{path} has no {os.path.basename(folder)}; {how}.")
    if decoding.sampling and runtime == "onnx":
        raise ValueError("The onnx runtime does not sample; use --runtime saved_model, "
                         "ctranslate2 or keras to sample.")
    if runtime == "litert":
        _check_litert_decoding(path, decoding)


def _check_litert_decoding(path, decoding):
    """The LiteRT files search with the settings they were exported with
    (export.json): refuses others, and sampling, in one line."""
    if decoding.sampling:
        raise ValueError("The litert runtime does not sample; use --runtime saved_model, "
                         "ctranslate2 or keras to sample.")
    exported = read_json(os.path.join(path, "export.json"))["formats"]["litert"]
    fixed = {"beam_size": exported["beam_size"], "alpha": exported["length_penalty"],
             "decode_margin": exported["decode_margin"]}
    asked = {name: getattr(decoding, name) for name in fixed
             if getattr(decoding, name) is not None}
    if any(value != fixed[name] for name, value in asked.items()):
        raise ValueError(f"The litert runtime searches as its files were exported (beam size "
                         f"{fixed['beam_size']}, alpha {fixed['alpha']}, decode margin "
                         f"{fixed['decode_margin']}); leave out --beam-size, --alpha and "
                         "--decode-margin, or use another runtime.")


def open_runtime(path, runtime=None, decoding=Decoding(), threads=None, in_flight=None):
    """The `Runtime` that translates the folder `path` (default runtime:
    `default_runtime`), after `check_runtime`.

    Args:
        decoding: a `Decoding` (unset fields: the model's defaults).
        threads: CPU threads of a CTranslate2, ONNX or LiteRT model (default: its
            own choice; TensorFlow takes its own).
        in_flight: searches a call is cut into and run at once on threads
            (keras and saved_model; default `batch_defaults.DEFAULT_IN_FLIGHT`).
    """
    from keras_transformer.batch_defaults import DEFAULT_IN_FLIGHT

    path = os.fspath(path)
    runtime = runtime or default_runtime(path)
    check_runtime(path, runtime, decoding)
    in_flight = DEFAULT_IN_FLIGHT if in_flight is None else in_flight
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1; got {in_flight}.")
    kind = {"keras": KerasRuntime, "saved_model": SavedModelRuntime,
            "ctranslate2": CTranslate2Runtime, "onnx": OnnxRuntime,
            "litert": LiteRTRuntime}[runtime]
    return kind(path, decoding.resolved(model_config(path)), threads=threads, in_flight=in_flight)


class Runtime:
    """What every runtime offers (see the module docstring).

    Attributes:
        name: the runtime's name.
        path: the folder it reads.
        config: the model's config (a dict).
        decoding: the resolved `Decoding`.
        max_source_tokens: the longest source the model reads, in tokens.
    """

    name = None

    def __init__(self, path, decoding, threads=None, in_flight=1):
        self.path = path
        self.config = model_config(path)
        self.decoding = decoding
        self.threads = threads
        self.in_flight = in_flight
        self.max_source_tokens = self.config["max_length"] - 1

    def translate(self, sentences, n_best=1, seed=None):
        """Up to `n_best` `(translation, score)` pairs a sentence (str), best
        first; with sampling, one drawn translation (score 0), drawn with
        `seed` (default: the decoding's). Cut sentences are not warned about
        (see `source_lengths`)."""
        if not sentences:
            return []
        return self._translate(list(sentences), n_best,
                               self.decoding.seed if seed is None else seed)

    def source_lengths(self, sentences):
        """Each sentence's length in the model's source tokens (before any
        cut to `max_source_tokens`), by the folder's tokenizer in plain
        Python (tens of microseconds a sentence: a server counts every
        request's)."""
        return [len(self.tokenizer.encode(text)) for text in _cleaned(sentences)]

    @property
    def tokenizer(self):
        """The folder's tokenizer in plain Python (`export.text_tokenizer`)."""
        if getattr(self, "_tokenizer", None) is None:
            from keras_transformer.export.text_tokenizer import text_tokenizer

            self._tokenizer = text_tokenizer(self.path)
        return self._tokenizer

    def _in_parts(self, sentences, search):
        """`search(part)` over `in_flight` parts of `sentences` of about
        equal tokens, run at once on threads (while one search is between
        steps the other uses the cores), results in the input's order."""
        parts = split_by_tokens(self.source_lengths(sentences), self.in_flight)
        if len(parts) == 1:
            return search(sentences)
        with concurrent.futures.ThreadPoolExecutor(len(parts)) as threads:
            searched = threads.map(lambda rows: search([sentences[i] for i in rows]), parts)
            return [result for part in searched for result in part]


class KerasRuntime(Runtime):
    """The `Translator` over a run folder's (or an export's) model.keras."""

    name = "keras"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        from keras_transformer.decoding import Sampling, Translator

        sampling = Sampling(decoding.sampling_topk, decoding.sampling_temperature, decoding.seed) \
            if decoding.sampling else None
        self.translator = Translator.from_directory(
            path, beam_size=decoding.beam_size, alpha=decoding.alpha,
            decode_margin=decoding.decode_margin, in_flight=in_flight, sampling=sampling)

    def _translate(self, sentences, n_best, seed):
        if self.decoding.sampling:
            n_best = 1
        return self.translator.translate(sentences, n_best=n_best, seed=seed,
                                         on_overlong=lambda indexes, limit: None)


class SavedModelRuntime(Runtime):
    """An export's text SavedModel: its `translate` signature (tf-text's
    SentencePiece and the beam search in the graph), or `sample`."""

    name = "saved_model"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops; tensorflow/text#315)

        folder = os.path.join(path, "saved_model")
        self.model = tf.saved_model.load(folder)
        if decoding.sampling and "sample" not in self.model.signatures:
            raise ValueError(f"{folder} has no sample signature (exported before it existed); "
                             "export the run again to sample with it.")

    def _translate(self, sentences, n_best, seed):
        return self._in_parts(sentences, lambda part: self._search(part, n_best, seed))

    def _search(self, sentences, n_best, seed):
        import tensorflow as tf

        settings = self.decoding
        text = tf.constant([s.encode("utf-8") for s in _cleaned(sentences)], tf.string)
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
        return [[(t.decode("utf-8", errors="replace"), float(s)) for t, s in zip(texts, scores)]
                [:n_best] for texts, scores in zip(outputs["translations"].numpy(),
                                                    outputs["scores"].numpy())]


class CTranslate2Runtime(Runtime):
    """An export's CTranslate2 model (`export.CTranslate2Translator`: our
    search's rules on CTranslate2's decoder)."""

    name = "ctranslate2"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        from keras_transformer.export.ctranslate2_translator import CTranslate2Translator

        self.translator = CTranslate2Translator(os.path.join(path, "ctranslate2"), threads=threads,
                                                seed=decoding.seed, warn_overlong=False)
        self._tokenizer = self.translator.tokenizer

    def _translate(self, sentences, n_best, seed):
        settings, translator = self.decoding, self.translator
        if settings.sampling:
            return [[(text, 0.0)] for text in translator.sample(
                sentences, settings.sampling_topk, settings.sampling_temperature,
                settings.decode_margin)]
        sources, blank = translator.encode(sentences)
        found = translator.search(sources, settings.beam_size, settings.alpha,
                                  settings.decode_margin)
        return [[("", 0.0)] * min(n_best, settings.beam_size) if empty else
                [(translator.tokenizer.decode(ids), score) for ids, score in hypotheses[:n_best]]
                for hypotheses, empty in zip(found, blank)]


class OnnxRuntime(Runtime):
    """An export's ONNX graphs (encoder and decoder step) with the beam
    search in NumPy (`export.OnnxTranslator`)."""

    name = "onnx"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        from keras_transformer.export import OnnxTranslator

        self.translator = OnnxTranslator(os.path.join(path, "onnx"), threads=threads,
                                         warn_overlong=False)
        self._tokenizer = self.translator.tokenizer

    def _translate(self, sentences, n_best, seed):
        settings, translator = self.decoding, self.translator
        source, blank = translator.encode(sentences)
        tokens, scores = translator.search.beam(source, beam_size=settings.beam_size,
                                                alpha=settings.alpha,
                                                decode_margin=settings.decode_margin)
        return [[("", 0.0)] * min(n_best, settings.beam_size) if empty else
                [(translator.decode(ids), float(score)) for ids, score in zip(rows, row_scores)]
                [:n_best] for rows, row_scores, empty in zip(tokens, scores, blank)]


class LiteRTRuntime(Runtime):
    """An export's `litert/translate.tflite` (`export.translate_litert`):
    the search is the file's, with the settings it was exported with. A
    file that takes token ids (a BPE model's) gets them from the folder's
    tokenizer in Python, cut to the model's length, with the end id. One
    call runs at a time (a LiteRT interpreter is not safe to share between
    threads, which a server's and Beam's workers are)."""

    name = "litert"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        import threading

        from keras_transformer.export import translate_litert

        self._litert = translate_litert
        self._lock = threading.Lock()
        self.runner = translate_litert.open_file(
            os.path.join(path, "litert", translate_litert.TRANSLATE_FILE), threads)
        self.text_in = translate_litert.takes_text(self.runner)

    def _translate(self, sentences, n_best, seed):
        cleaned = _cleaned(sentences)
        if self.text_in:
            inputs = cleaned
        else:
            inputs = self._litert.padded(
                [self.tokenizer.encode(text)[:self.max_source_tokens] + [self.config["eos_id"]]
                 for text in cleaned], self.config["pad_id"])
        with self._lock:
            translations, scores = self._litert.translate(self.runner, inputs)
        return [[(text, float(score)) for text, score in zip(texts, row_scores)][:n_best]
                for texts, row_scores in zip(translations, scores)]


def translate_sorted(runtime, sentences, n_best=1, batch_tokens=None, batch_size=None,
                     on_batch=None):
    """`runtime.translate` of a list of sentences sorted by length and cut
    into batches of at most `batch_tokens` source tokens, padding included
    (default: `batch_defaults.default_batch_tokens` of the runtime's beam
    size), and `batch_size` sentences, as the `Translator` batches (the
    translate command's `--runtime`); results in the input's order.
    `on_batch(count, tokens)` is called after each batch with its sentences
    and the tokens of their best translations, as the folder's tokenizer
    counts them."""
    from keras_transformer.batch_defaults import default_batch_tokens, length_batches

    lengths = [min(n, runtime.max_source_tokens) + 1 for n in runtime.source_lengths(sentences)]
    results = [None] * len(sentences)
    batch_tokens = batch_tokens or default_batch_tokens(runtime.decoding.beam_size)
    for batch in length_batches(lengths, batch_tokens, batch_size):
        found = runtime.translate([sentences[i] for i in batch], n_best=n_best)
        for index, result in zip(batch, found):
            results[index] = result
        if on_batch:
            on_batch(len(batch), sum(runtime.source_lengths([row[0][0] for row in found])))
    return results


def split_by_tokens(lengths, parts):
    """Indexes of sentences of `lengths` tokens (end tokens counted on top)
    cut into at most `parts` runs of consecutive sentences of about equal
    tokens."""
    total = sum(length + 1 for length in lengths)
    runs, run, done = [], [], 0
    for index, length in enumerate(lengths):
        run.append(index)
        done += length + 1
        if done * parts >= total * (len(runs) + 1) and len(runs) < parts - 1:
            runs.append(run)
            run = []
    return runs + [run] if run else runs


def _cleaned(sentences):
    from keras_transformer.textfiles import clean_text

    return [clean_text(sentence) for sentence in sentences]
