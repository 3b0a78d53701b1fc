"""The interface every runtime offers, and how a folder's runtime is chosen
and opened (the runtimes themselves are this package's other modules).

Each translates a list of sentences into up to `n_best` `(translation,
score)` pairs each, best first, as `translate` does with the model (blank
sentences give `("", 0.0)` pairs; sentences longer than the model accepts
are cut to its `max_length - 1` tokens, which `source_lengths` lets the
caller see first), or, with sampling, one draw each.
"""

import concurrent.futures
import dataclasses
import importlib
import os

from keras_transformer import documents, run_folder, trust
from keras_transformer.batch_defaults import DEFAULT_IN_FLIGHT, default_batch_tokens, length_batches
from keras_transformer.documents.alignment import proportional
from keras_transformer.glossary import GlossaryError
from keras_transformer.names import RUNTIMES
from keras_transformer.textfiles import clean_text

_CLASSES = {"keras": "tensorflow_runtimes:KerasRuntime",
            "saved_model": "tensorflow_runtimes:SavedModelRuntime",
            "ctranslate2": "ctranslate2_runner:CTranslate2Runtime",
            "onnx": "onnx_runner:OnnxRuntime",
            "litert": "litert_runner:LiteRTRuntime"}
"""Each runtime's module in this package and its class. A runtime's module
is imported when it is opened: each imports its own engine (TensorFlow,
CTranslate2, onnxruntime, LiteRT), which the others need not install."""


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How to search: beam size (1 is greedy), GNMT length penalty alpha,
    output length margin (`None` takes the model's default); or, with
    `sampling_topk` set, drawing each translation from the model's
    distribution (`decoding.Sampling`: 0 for all tokens, k for the k most
    likely), with a temperature and a seed; `guard`: translations that loop
    or run away searched again (the keras runtime's `Translator`)."""

    beam_size: int | None = None
    alpha: float | None = None
    decode_margin: int | None = None
    sampling_topk: int | None = None
    sampling_temperature: float = 1.0
    seed: int = 0
    guard: bool = True

    @property
    def sampling(self):
        return self.sampling_topk is not None

    def resolved(self, config):
        """The settings with the model's defaults (its config) filled in."""
        return dataclasses.replace(
            self, beam_size=config["beam_size"] if self.beam_size is None else self.beam_size,
            alpha=float(config["length_penalty"] if self.alpha is None else self.alpha),
            decode_margin=config["decode_margin"] if self.decode_margin is None else self.decode_margin)


def default_runtime(path):
    """keras for a run folder; for an export, the first of saved_model,
    ctranslate2, onnx and litert it holds, else keras (whose `check_runtime` says
    what the folder lacks)."""
    if run_folder.folder_kind(path) == "run":
        return "keras"
    return next(runtime for runtime in RUNTIMES[1:] + ("keras",)
                if runtime == "keras" or os.path.isdir(run_folder.export_part(path, runtime)))


def check_runtime(path, runtime, decoding=Decoding()):
    """Raises a one-line ValueError if `runtime` cannot translate `path`
    with `decoding`, saying what to run instead."""
    path = os.fspath(path)
    if runtime not in RUNTIMES:
        raise ValueError(f"Unknown runtime {runtime!r}; expected one of {RUNTIMES}.")
    kind = run_folder.folder_kind(path)
    if kind == "run" and runtime != "keras":
        raise ValueError(f"{path} is a run folder, which the keras runtime translates; the "
                         f"{runtime} runtime reads an export: keras-transformer export {path} "
                         f"--output EXPORT{' --formats ctranslate2' * (runtime == 'ctranslate2')}, "
                         "then give EXPORT.")
    folder = run_folder.export_part(path, runtime)
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
    exported = run_folder.export_report(path)["formats"]["litert"]
    fixed = {"beam_size": exported["beam_size"], "alpha": exported["length_penalty"],
             "decode_margin": exported["decode_margin"]}
    asked = {name: getattr(decoding, name) for name in fixed
             if getattr(decoding, name) is not None}
    if any(value != fixed[name] for name, value in asked.items()):
        raise ValueError(f"The litert runtime searches as its files were exported (beam size "
                         f"{fixed['beam_size']}, alpha {fixed['alpha']}, decode margin "
                         f"{fixed['decode_margin']}); leave out --beam-size, --alpha and "
                         "--decode-margin, or use another runtime.")


def open_runtime(path, runtime=None, decoding=Decoding(), threads=None, in_flight=None,
                 slots=None):
    """The `Runtime` that translates the folder `path` (default runtime:
    `default_runtime`), after `check_runtime`.

    Args:
        decoding: a `Decoding` (unset fields: the model's defaults).
        threads: CPU threads of a CTranslate2, ONNX or LiteRT model (default: its
            own choice; TensorFlow takes its own).
        in_flight: searches a call is cut into and run at once on threads
            (keras and saved_model; default `batch_defaults.DEFAULT_IN_FLIGHT`).
        slots: sentences each thread of a server searches at once with
            continuous batching (`slot_translator`), where the runtime has it
            (keras); None: the server searches batches.
    """
    path = os.fspath(path)
    runtime = runtime or default_runtime(path)
    check_runtime(path, runtime, decoding)
    in_flight = DEFAULT_IN_FLIGHT if in_flight is None else in_flight
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1; got {in_flight}.")
    module, name = _CLASSES[runtime].split(":")
    kind = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    opened = kind(path, decoding.resolved(run_folder.model_config(path)), threads=threads,
                  in_flight=in_flight)
    opened.slots = slots
    return opened


class Runtime:
    """What every runtime offers (see the module docstring).

    Attributes:
        name: the runtime's name.
        path: the folder it reads.
        config: the model's config (a dict).
        decoding: the resolved `Decoding`.
        max_source_tokens: the longest source the model reads, in tokens.
        languages: the model's `(source, target)` language codes where its
            folder says (`run_folder.languages`), else None.
        aligns: whether `align` reads the model's attention; where it does
            not, it aligns by position (`documents.alignment.proportional`).
        takes_glossary: whether `translate` obeys a glossary (the keras
            runtime's search; the exports' engines run their own).
        slots: see `open_runtime`.
        detect: text -> a language code (`documents.detection.Detector`),
            by which `assess` flags translations left in the source
            language; None: that flag is not checked.
        quality_note: why `assess` gives no confidence here, or None where
            it does.
    """

    name = None
    aligns = False
    takes_glossary = False
    slots = None
    detect = None
    quality_note = ("its engine gives no signals of the model: confidence is null, flags are "
                    "read from the text (the keras runtime gives both)")

    def __init__(self, path, decoding, threads=None, in_flight=1):
        self.path = path
        self.config = run_folder.model_config(path)
        self.decoding = decoding
        self.threads = threads
        self.in_flight = in_flight
        self.max_source_tokens = self.config["max_length"] - 1
        self.languages = run_folder.languages(path)

    def translate(self, sentences, n_best=1, seed=None, glossary=None):
        """Up to `n_best` `(translation, score)` pairs a sentence (str), best
        first; with sampling, one drawn translation (score 0), drawn with
        `seed` (default: the decoding's); obeying `glossary` (a
        `glossary.Glossary`, where `takes_glossary`; elsewhere a one-line
        `GlossaryError`). Cut sentences are not warned about (see
        `source_lengths`)."""
        self.check_glossary(glossary)
        if not sentences:
            return []
        options = {"glossary": glossary} if glossary is not None else {}
        return self._translate(list(sentences), n_best,
                               self.decoding.seed if seed is None else seed, **options)

    def check_glossary(self, glossary):
        """Raises a one-line `GlossaryError` where this runtime cannot obey
        `glossary` (not None)."""
        if glossary is not None and not self.takes_glossary:
            raise GlossaryError(f"The {self.name} runtime takes no glossary (its engine runs "
                                "its own search); the keras runtime does: a run folder, or an "
                                "export's model.keras with --runtime keras.")
        if glossary is not None and self.slots:
            raise GlossaryError("Continuous batching (--slots) takes no glossary; the keras "
                                "runtime's batches do: serve without --slots.")

    lone = None
    """What searches a sentence that comes alone, where `search_lone_faster`
    readied a faster search than the runtime's own ("onnxruntime"); None."""

    def search_lone_faster(self, threads=None):
        """Readies, where the runtime has it, a faster search of a sentence
        that comes alone (a server's request at idle) and sets `lone`. The
        Keras runtime has one (`Translator.search_lone_on_onnxruntime`); the
        exports' engines run their own searches."""

    def slot_translator(self, n_best=1):
        """A translator with continuous batching for one thread of a server
        (`decoding.SlotTranslator`: `join`, `advance`, `cancel`, `free`,
        `live`), or None where this runtime has none: then a server
        searches batches. The Keras runtime has one; the exports' engines
        run their own searches."""
        return None

    def align(self, sources, translations):
        """An `Alignment` of each translation with its source (see
        `aligns`)."""
        return [proportional(source, translation)
                for source, translation in zip(sources, translations)]

    def assess(self, sentences, translations):
        """A `trust.Quality` of each translation (str) of `sentences`: here
        the flags read from the texts and their token counts
        (`trust.text_flags`: all but `omission`), confidence None (see
        `quality_note`); the keras runtime reads the model's signals. A
        blank sentence gets no flags."""
        found = []
        for sentence, translation in zip(cleaned(sentences), translations):
            if not sentence.strip():
                found.append(trust.Quality(None))
                continue
            source = min(len(self.tokenizer.encode(sentence)), self.max_source_tokens)
            limit = min(source + self.decoding.decode_margin, self.config["max_length"])
            found.append(trust.Quality(None, trust.ordered(trust.text_flags(
                sentence, translation, source, len(self.tokenizer.encode_target(translation)),
                limit, (self.languages or (None,))[0], self.detect))))
        return found

    def translate_documents(self, texts, format="text", split=True, language=None,
                            glossary=None):
        """Texts of several sentences, or HTML documents (`format`), each
        translated as `documents.read_document` reads it (split into
        sentences unless `split=False`, by the rules of `language`, default
        the model's source language), all their sentences in one call,
        obeying `glossary` (see `translate`)."""
        self.check_glossary(glossary)
        language = language or (self.languages or ("en",))[0]
        return documents.translate_documents(
            [documents.read_document(text, language, format, split) for text in texts],
            lambda sentences: [found[0][0] for found in self.translate(sentences,
                                                                       glossary=glossary)],
            self.align)

    def source_lengths(self, sentences):
        """Each sentence's length in the model's source tokens (before any
        cut to `max_source_tokens`), by the folder's tokenizer in plain
        Python (tens of microseconds a sentence: a server counts every
        request's)."""
        return [len(self.tokenizer.encode(text)) for text in cleaned(sentences)]

    @property
    def tokenizer(self):
        """The folder's tokenizer in plain Python (`vocabularies`)."""
        if getattr(self, "_tokenizer", None) is None:
            self._tokenizer = run_folder.load_text_tokenizer(self.path)
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


def cleaned(sentences):
    """The sentences as the model reads them (`textfiles.clean_text`)."""
    return [clean_text(sentence) for sentence in sentences]
