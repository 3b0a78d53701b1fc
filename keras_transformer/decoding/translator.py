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

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import queue
import threading
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import documents, onnx_step, run_folder, trust
from keras_transformer.batch_defaults import (
    DEFAULT_IN_FLIGHT,
    DEFAULT_WINDOW,
    default_batch_tokens,
    length_batches,
)
from keras_transformer.data.tokenizer import encode_sources
from keras_transformer.decoding.constraints import MAX_PHRASE_TOKENS, Constraints, word_starts
from keras_transformer.decoding.alignment import (
    alignment_layer,
    attention_alignments,
    token_alignment,
)
from keras_transformer.decoding import quality
from keras_transformer.decoding.search import beam_search, greedy_search
from keras_transformer.decoding.slots import SlotSearch, Wakeup, pad_sources
from keras_transformer.documents.alignment import Alignment
from keras_transformer.glossary import GlossaryError, GlossaryWarning
from keras_transformer.models import in_precision
from keras_transformer.names import OVERLONG
from keras_transformer.textfiles import clean_text, truncation_warning

NO_BAN = np.int32(0)
"""The traced searches' `no_repeat_ngram` where nothing is banned."""

GUARD_NGRAM = 2
"""The n-grams the guard's search bans repeats of: pairs of tokens, so that
no loop of any unit goes on. On the demo's run of `benchmarks/trust.py`
(33 loops in 565 held-out sentences) this gave the chrF of a first try
with the n-grams one token longer than the loop's unit and a second with
pairs (21.22 against 21.23), in one search of the flagged sentences
instead of one for each size and try (1.08x the time of the file without
the guard, against 1.18x)."""

KEPT_FLAGS = 4096
"""Translations the guard cut whose flags a Translator keeps for `assess`."""

GLOSSARY_BEAM = 4
"""The least beam a glossary's sentences are searched with: a beam of one
cannot keep a hypothesis that has placed a term beside one that has not."""


def search(model, source_ids, beam_size, alpha, decode_margin, use_cache=True, sampling=None,
           best_only=False, alignment_layer=None, output_weights=None, constraints=None,
           static_cache=False, max_output_length=None, no_repeat_ngram=None):
    """The search a translation runs: with `sampling` (a `Sampling`) one
    drawn translation; greedy search when `beam_size` is the Python integer
    1 (the same tokens as a beam of one, faster); else beam search
    (`beam_size` may be a tensor), which with `best_only` returns the best
    hypothesis alone, sooner (see `beam_search`). `alignment_layer`,
    `output_weights`, `static_cache`, `max_output_length`,
    `no_repeat_ngram` and `constraints` (beam search only): see
    `beam_search`."""
    if constraints is None and (sampling is not None
                                or (isinstance(beam_size, int) and beam_size == 1)):
        return greedy_search(model, source_ids, alpha=alpha, decode_margin=decode_margin,
                             max_output_length=max_output_length, use_cache=use_cache,
                             static_cache=static_cache, sampling=sampling,
                             alignment_layer=alignment_layer, output_weights=output_weights,
                             no_repeat_ngram=no_repeat_ngram)
    return beam_search(model, source_ids, beam_size=beam_size, alpha=alpha,
                       decode_margin=decode_margin, max_output_length=max_output_length,
                       use_cache=use_cache, static_cache=static_cache, best_only=best_only,
                       alignment_layer=alignment_layer, output_weights=output_weights,
                       constraints=constraints, no_repeat_ngram=no_repeat_ngram)


def translate_ids(model, tokenizer, source_ids, blank, beam_size, alpha, decode_margin,
                  use_cache=True, sampling=None, best_only=False, alignment_layer=None,
                  output_weights=None, constraints=None, no_repeat_ngram=None):
    """Searches padded source ids and detokenises the result in one graph.

    Args:
        source_ids: int32 `(batch, length)` from `encode_sources`.
        blank: bool `(batch,)`: the sentences that were blank.
        beam_size: scalar (a tensor allowed).
        alpha: scalar (a tensor allowed).
        decode_margin: scalar (a tensor allowed).
        sampling: see `search`.
        best_only: see `search`.
        alignment_layer: see `search`.
        output_weights: see `search`.
        constraints: see `search`.
        no_repeat_ngram: see `search`.

    Returns:
        `(translations, scores, lengths)`: string `(batch, n_best)`, float32
        `(batch, n_best)`, best first, blank inputs giving "" and 0; and
        int32 `(batch,)`, the tokens of each best translation, end token
        included (what a progress report counts). With `alignment_layer`,
        also the best translation's tokens and attended source positions,
        int32 `(batch, length)` each (`SearchResult`). With `constraints`,
        last, whether each hypothesis holds its sentence's, bool `(batch,
        n_best)`.
    """
    result = search(model, source_ids, beam_size, alpha, decode_margin, use_cache, sampling,
                    best_only, alignment_layer, output_weights, constraints,
                    no_repeat_ngram=no_repeat_ngram)
    batch, n_best = tf.shape(result.tokens)[0], tf.shape(result.tokens)[1]
    flat = tf.reshape(result.tokens, [batch * n_best, -1])
    translations = tf.reshape(tokenizer.detokenize(flat), [batch, n_best])
    translations = tf.where(blank[:, None], "", translations)
    scores = tf.where(blank[:, None], 0.0, result.scores)
    lengths = tf.reduce_sum(tf.cast(result.tokens[:, 0] != model.config.pad_id, tf.int32), axis=1)
    outputs = (translations, scores, lengths)
    if alignment_layer is not None:
        outputs += (result.tokens[:, 0], result.attended[:, 0])
    return outputs + ((result.met,) if constraints is not None else ())


def translate_text(model, tokenizer, texts, beam_size, alpha, decode_margin, use_cache=True,
                   sampling=None, constraints=None):
    """Translates a batch of strings in one graph.

    Args:
        texts: string `(batch,)`.
        beam_size: hypotheses kept per sentence; a scalar (tensors allowed).
        alpha: the length penalty; a scalar (tensors allowed).
        decode_margin: output up to the input length plus this many tokens;
            a scalar (tensors allowed).
        sampling: a `Sampling` to draw the translations instead of beam
            search (`beam_size` is then not used).
        constraints: a `Constraints` each translation must hold (see
            `beam_search`).

    Returns:
        `(translations, scores)`: string `(batch, beam_size)` (with
        `sampling`, `(batch, 1)`) and float32 of the same shape, best
        first; blank inputs give "" and 0. With `constraints`, also
        whether each hypothesis holds them (`SearchResult.met`).
    """
    source_ids, blank = encode_sources(tokenizer, texts, model.config.max_source_tokens)
    translations, scores, _, *met = translate_ids(
        model, tokenizer, source_ids, blank, beam_size, alpha, decode_margin, use_cache, sampling,
        constraints=constraints)
    return (translations, scores, *met)


class Translator:
    """Translates lists and streams of sentences with a trained model and
    its tokenizer.

    How a list (or each window of a stream) is translated, as CTranslate2
    does: all of its sentences are tokenised at once, sorted by length, cut
    into batches by a budget of source tokens counted with padding, and each
    batch is searched by one traced `tf.function` (traced once, for every
    batch shape), finished sentences leaving the batch as they end; the
    results come back in the input's order.

    Args:
        model: a `Transformer`. Its output projection's matrix is read
            (transposed) when the translator is made, once for all its
            searches: after the model's weights change (training goes on,
            weights are loaded), make a new translator.
        tokenizer: its tokenizer (a `Tokenizer`, or an imported model's).
        beam_size: default: the model config's (the paper's 4); 1 is
            greedy search.
        alpha: the length penalty; default: the model config's (0.6).
            Read at every call: set `translator.alpha` to decode with
            another (see `evaluation.choose_length_penalty`).
        decode_margin: output up to the input length plus this many tokens;
            default: the model config's (50).
        batch_tokens: source tokens per search, padding included (default:
            `default_batch_tokens(beam_size)`).
        batch_size: at most this many sentences per search (default: no
            limit but `batch_tokens`).
        overlong: "truncate" (default) or "error", for sentences longer than
            the model accepts.
        in_flight: searches run at once on threads (default:
            `batch_defaults.DEFAULT_IN_FLIGHT`, 2); 1 runs them one after
            the other. The results are the same either way. They are
            fastest sharing the cores: `batch_defaults.share_cores(in_flight)`
            before TensorFlow starts (the commands call it).
        sampling: a `Sampling` to draw each translation from the model's
            distribution (for back-translation) instead of beam search.
            Each batch draws with its own seed, made of the sampling's and
            the index of the batch's first sentence, so that sentences in the
            same place of two batches draw independently; the same input
            gives the same translations.
        precision: None to decode with the model as it is, or "float32",
            "bfloat16" (faster on CPUs with AVX-512 BF16 or AMX; the Benchmarks
            page of the guide gives its speed and BLEU) or "float16" (GPUs):
            the search runs on a copy of the model in that precision (see
            `models.in_precision`).
        source_language: the language code of the model's source, whose
            rules `translate_documents` splits sentences by (default: the
            run folder's, with `from_directory`; else English's).
        slots: continuous batching (`decoding.slots`): each search in
            flight holds up to this many sentences, and a sentence takes the
            place of one that ended at the next step, instead of batches
            searched to their end (`batch_tokens`, `batch_size` then unused).
            None: batches. Sampling always searches batches (a batch's draws
            are made together, `search.Sampling`).
        guard: search again each translation that loops or runs away
            (`trust.GUARDED` flags), with repeated pairs of tokens banned,
            and keep that try where it does neither, or cut the
            translation before its loop where it still does (`_Mending`);
            translations not flagged are untouched. Not for sampling, nor
            for a glossary's sentences (flagged only). Default on.
        calibrator: a `trust.Calibrator` fitted for this model, which turns
            the model's signals into each translation's confidence
            (`assess`, `translate(..., quality=True)`); one fitted for
            another model is set aside (`calibration_note` says so).
            `from_directory` reads the folder's.
        detect: text -> a language code (`documents.detection.Detector`),
            by which `assess` flags translations left in the source
            language (`untranslated`); None: that flag is not checked.

    Example:
        translator = Translator.from_directory("runs/ding")
        translator.translate(["Guten Morgen!"])  # -> ["Good morning!"]
        translator.translate_documents(["Guten Morgen! Wie geht es?"])
    """

    def __init__(self, model, tokenizer, beam_size=None, alpha=None, decode_margin=None,
                 batch_tokens=None, batch_size=None, overlong="truncate", precision=None,
                 in_flight=DEFAULT_IN_FLIGHT, sampling=None, source_language=None, slots=None,
                 guard=True, calibrator=None, detect=None):
        if overlong not in OVERLONG:
            raise ValueError(f"overlong must be one of {OVERLONG}; got {overlong!r}.")
        config = model.config
        # The calibrator belongs to the float32 weights, not to a copy in
        # another precision.
        self.calibrator, self.calibration_note = None, (
            "it has no calibrator: keras-transformer calibrate RUN fits one")
        if calibrator is not None and calibrator.model_digest != quality.model_digest(model):
            self.calibration_note = ("its calibrator was fitted for another model (the weights "
                                     "changed since): run keras-transformer calibrate RUN again")
        elif calibrator is not None:
            self.calibrator, self.calibration_note = calibrator, None
        model = model if precision is None else in_precision(model, precision)
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = config.beam_size if beam_size is None else beam_size
        self.alpha = config.length_penalty if alpha is None else alpha
        self.decode_margin = config.decode_margin if decode_margin is None else decode_margin
        self.batch_tokens = (default_batch_tokens(self.beam_size) if batch_tokens is None
                             else batch_tokens)
        for name, value, lowest in (("beam_size", self.beam_size, 1), ("alpha", self.alpha, 0),
                                    ("decode_margin", self.decode_margin, 0),
                                    ("batch_tokens", self.batch_tokens, 1),
                                    ("batch_size", batch_size or 1, 1),
                                    ("in_flight", in_flight, 1), ("slots", slots or 1, 1)):
            if value < lowest:
                raise ValueError(f"{name} must be >= {lowest}; got {value}.")
        self.batch_size = batch_size
        self.overlong = overlong
        self.in_flight = in_flight
        self.sampling = sampling
        self.source_language = source_language
        self.slots = slots
        self.guard = guard
        self.detect = detect
        # (sentence, translation) -> the flags of a translation the guard
        # cut, for `assess`; the latest `KEPT_FLAGS`.
        self._stuck, self._lock = collections.OrderedDict(), threading.Lock()
        self._slot_searches = {}  # (alpha, best_only, aligned, slots) -> a SlotSearch to fork
        # The output projection's matrix, transposed once here and passed to
        # every search: made inside each call, it cost a base model's
        # one-sentence call 4-8% of its time (32-40 ms with 37,000 tokens;
        # docs/benchmarks-log.md, "Decoding"), for one more copy of the
        # embedding in memory.
        self._output_weights = model.output_weights()
        # One traced search for one translation a sentence (the beam ends
        # each sentence once its best is settled), one for n-best lists, one
        # for aligned translations; each is traced on its first use.
        self._translate, self._translate_n_best = (
            self._traced_search(best_only) for best_only in (True, False))
        self._translate_aligned = self._traced_search(True, alignment_layer(self.model))
        # The same three under a glossary's constraints (traced on first use),
        # whose phrases end where a word does.
        self._word_starts = word_starts(
            tokenizer.target_pieces(range(model.target_vocab_size)), model.config.eos_id)
        self._bound = {(best_only, aligned): self._traced_search(
            best_only, alignment_layer(self.model) if aligned else None, constrained=True)
            for best_only, aligned in ((True, False), (False, False), (True, True))}
        # The model's signals of a translation (traced when first asked for).
        self._signals = tf.function(
            functools.partial(quality.read_signals, self.model),
            input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2
            + [tf.TensorSpec([None], tf.string)] * 2 + [tf.TensorSpec([], tf.float32)],
            autograph=False)
        self._lone = None  # `search_lone_on_onnxruntime`'s search

    def _traced_search(self, best_only, alignment_layer=None, constrained=False):
        """The search of a batch of padded source ids, as one `tf.function`
        whose signature leaves the batch's shape free: traced once. It takes
        the size of the n-grams it may not repeat (`search.repeated_ngram_ban`;
        0: none), so that the guard searches again with the same trace.
        With `constrained`, it also takes a batch's `Constraints` (the
        phrases and their owners) and searches with a beam of at least
        `GLOSSARY_BEAM`."""
        model, tokenizer, sampling = self.model, self.tokenizer, self.sampling
        signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.bool),
                     tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.float32),
                     tf.TensorSpec(self._output_weights.shape, self._output_weights.dtype),
                     tf.TensorSpec([], tf.int32)]
        if constrained:
            signature += [tf.TensorSpec([None, None, MAX_PHRASE_TOKENS], tf.int32),
                          tf.TensorSpec([None, None], tf.int32)]
        beam_size = max(self.beam_size, GLOSSARY_BEAM) if constrained else self.beam_size

        def traced(source_ids, blank, seed, alpha, output_weights, no_repeat_ngram, *bound):
            # alpha is an input of the trace, so that one translator decodes
            # with several (choosing one on held-out data) without tracing
            # again.
            return translate_ids(
                model, tokenizer, source_ids, blank, beam_size, alpha, self.decode_margin,
                sampling=sampling and dataclasses.replace(sampling, seed=seed),
                best_only=best_only, alignment_layer=alignment_layer,
                output_weights=output_weights,
                constraints=Constraints(*bound, self._word_starts) if bound else None,
                no_repeat_ngram=no_repeat_ngram)

        # The search's loops and branches are tf.while_loop and tf.cond
        # already; autograph's rewriting of its Python was most of the first
        # batch's time (translate.py's start-up). Wrapped in a partial:
        # TensorFlow counts the traces of every tf.function of one Python
        # code object together, and warns of "retracing" once five of a
        # translator's searches (each traced once) have been traced.
        return tf.function(functools.partial(traced), input_signature=signature,
                           autograph=False)

    def search_lone_on_onnxruntime(self, threads=None):
        """From now on, searches a lone sentence (a call, or a batch, of one)
        on onnxruntime (`onnx_step`: the encoder and decoder step written as
        ONNX graphs from the model's weights, the beam's bookkeeping in
        NumPy), for the latency of one sentence: the traced search spends
        it dispatching a step's several hundred small operations, and XLA's
        compilation of it uses one core, where onnxruntime's kernels use
        `threads` (default: onnxruntime's choice, every core). The graphs
        take a fraction of a second to write; the translations, scores and
        alignments are the traced search's (its scores within 1e-5,
        onnxruntime's kernels rounding otherwise), docs/translating.md
        gives the times.

        Raises:
            ValueError: for a sampling translator, or a model that is not
                float32 or whose activation the graphs do not write.
        """
        if self.sampling is not None:
            raise ValueError("A lone sentence's search on onnxruntime is beam or greedy search; "
                             "this translator samples.")
        if self.model.compute_dtype != "float32":
            raise ValueError(f"A lone sentence's search on onnxruntime is float32; this model "
                             f"computes in {self.model.compute_dtype}.")
        self._lone = onnx_step.StepSearch(
            onnx_step.StepGraphs(self.model, alignment_layer(self.model)), self.model.config,
            threads)

    def _search_lone(self, aligned, source, blank):
        """`traced`'s outputs (see `_traced_search`), as NumPy arrays, for one
        source `(1, length)`, by the search on onnxruntime; detokenized in
        plain Python (`tokenizer.vocabulary`, a few microseconds, where a
        call of the tokenizer's op costs 0.7 ms)."""
        if blank[0]:
            tokens, score, attended = [self.tokenizer.eos_id], 0.0, [0]
        else:
            tokens, score, _, attended = self._lone.search(
                source[0], self.beam_size, self.alpha, self.decode_margin)
        text = self.tokenizer.vocabulary.decode(tokens)
        outputs = (np.array([[text.encode("utf-8")]], object),  # (as the op's bytes)
                   np.array([[score]], np.float32), np.array([len(tokens)]))
        return outputs + ((np.array([tokens]), np.array([attended])) if aligned else ())

    @classmethod
    def from_directory(cls, directory, model_file=None, **options):
        """The translator of a run folder (or an export's model.keras):
        its model (`run_folder.load_model`), tokenizer, source language and
        calibrator (`trust.CALIBRATION_FILE`, where the folder has one).

        Raises:
            ValueError: the folder's calibrator is damaged (one line)."""
        options.setdefault("source_language", (run_folder.languages(directory) or (None,))[0])
        options.setdefault("calibrator", trust.Calibrator.load(directory, signals=quality.SIGNALS))
        return cls(run_folder.load_model(directory, model_file),
                   run_folder.load_tokenizer(directory), **options)

    def align(self, sources, translations):
        """An `Alignment` of each translation (str) with its source (str),
        by the model's attention read in a second, teacher-forced pass
        (`decoding.alignment`): for translations made elsewhere; the
        Translator's own come with theirs (`translate(..., aligned=True)`)."""
        return attention_alignments(self.model, self.tokenizer, list(sources),
                                    list(translations))

    def translate_documents(self, texts, format="text", split=True, glossary=None):
        """Texts of several sentences, or HTML documents (`format`), each
        translated as `documents.read_document` reads it: split into
        sentences (unless `split=False`) by the source language's rules,
        all their sentences searched together, written back with their
        whitespace and markup (placed by the alignments the search keeps,
        where a document has markup inside a sentence); `glossary`: see
        `translate_stream`."""
        language = self.source_language or "en"
        read = [documents.read_document(text, language, format, split) for text in texts]
        sentences = [sentence for document in read for sentence in document.sentences]
        if not documents.marked_sentences(read):
            return documents.render_documents(read, self.translate(sentences, glossary=glossary),
                                              {})
        found = self.translate(sentences, aligned=True, glossary=glossary)
        return documents.render_documents(read, [translation for translation, _ in found],
                                          {i: alignment for i, (_, alignment) in enumerate(found)})

    def _tokenize(self, sentences):
        """Cleaned strings -> ragged ids (no end token), one call for all."""
        texts = tf.constant([s.encode("utf-8") for s in sentences], tf.string)
        return self.tokenizer.tokenize(texts)

    def source_lengths(self, sentences):
        """The length in subword tokens of each sentence (str or bytes), as
        the model reads it (before any cut to `max_length - 1`)."""
        return [int(n) for n in self._tokenize([clean_text(s) for s in sentences]).row_lengths()]

    def too_long(self, sentences):
        """Indexes of the sentences longer than the model's `max_length - 1`
        tokens, which `translate` cuts (or refuses)."""
        limit = self.model.config.max_source_tokens
        return [i for i, n in enumerate(self.source_lengths(sentences)) if n > limit]

    def translate(self, sentences, n_best=None, progress=False, on_batch=None, on_overlong=None,
                  seed=None, aligned=False, glossary=None, quality=False):
        """Translates a list of sentences (str or bytes), one result each,
        sorting and batching the whole list together.

        Args:
            sentences: a list of strings.
            n_best: None for one string per sentence; an integer for lists of
                up to `min(n_best, beam_size)` `(translation, score)` pairs.
            progress: show a progress bar (Keras').
            on_batch: see `translate_stream`.
            on_overlong: see `translate_stream`.
            seed: see `translate_stream`.
            aligned: see `translate_stream`.
            glossary: see `translate_stream`.
            quality: see `translate_stream`.

        Warns:
            TruncationWarning: naming the sentences cut to the model's length
                (unless `on_overlong` is given).
            GlossaryWarning: see `translate_stream`.
        """
        sentences = list(sentences)
        if progress:
            bar = keras.utils.Progbar(len(sentences), unit_name="sentence")
            on_batch = lambda count, tokens, report=on_batch: (  # noqa: E731
                bar.add(count), report and report(count, tokens))
        return list(self.translate_stream(sentences, n_best=n_best, window=max(len(sentences), 1),
                                          on_batch=on_batch, on_overlong=on_overlong,
                                          seed=seed, aligned=aligned, glossary=glossary,
                                          quality=quality))

    def translate_stream(self, sentences, n_best=None, window=DEFAULT_WINDOW, on_batch=None,
                         on_overlong=None, seed=None, aligned=False, glossary=None,
                         quality=False):
        """Translates an iterable of sentences (str or bytes) of any length,
        yielding one result per sentence in the input's order, holding only
        `window` sentences at a time (each window is sorted and batched as
        the class docstring says).

        Args:
            n_best: as in `translate`.
            window: sentences read ahead and sorted together.
            on_batch: called after each search with the number of sentences
                it translated and the tokens of their best translations.
            on_overlong: called for each window with sentences longer than
                the model accepts, with their indexes (counted from 0 in the
                whole stream) and the limit; default: a `TruncationWarning`.
            seed: with `sampling`, the seed this call draws with (default:
                the sampling's); calls from several threads may each give
                their own.
            aligned: give `(result, Alignment)` for each sentence (the
                result as without it: a translation, or with `n_best=1` a
                list of one `(translation, score)`), the alignment of the
                best translation by the model's attention, which the search
                kept as it went (`decoding.alignment`; no second pass); not
                with `n_best` above 1.
            glossary: a `glossary.Glossary` every translation obeys: each
                sentence holding its terms is searched under their target
                terms (lexically constrained beam search,
                `decoding.constraints`, with a beam of at least
                `GLOSSARY_BEAM`, greedy translators too); the others as
                without it. At most the beam's size of terms a sentence.
            quality: give `(result, trust.Quality)` for each sentence (the
                result as without it), how far to trust its best
                translation (`assess`).

        Warns:
            GlossaryWarning: naming a sentence with more terms than its beam
                holds (the first are kept), and one whose translation could
                not place a term before its output limit (its best is
                given as it is).

        Raises:
            ValueError: with `overlong="error"`, at the first window holding
                a sentence longer than the model accepts (nothing of that
                window is translated); a `GlossaryError` for a target term
                longer than a constraint may be, or a glossary with
                sampling or slots (neither takes one).
        """
        if window < 1:
            raise ValueError(f"window must be >= 1; got {window}.")
        if aligned and (n_best or 1) > 1:
            raise ValueError("aligned searches for the best translation alone; n_best must be "
                             f"None or 1, got {n_best}.")
        if glossary is not None and (self.sampling is not None or self.slots):
            raise GlossaryError("A glossary needs beam search in batches: this translator "
                                f"{'samples' if self.sampling else 'searches slots'}; make one "
                                "without it.")
        iterator = iter(sentences)
        start = 0
        while True:
            chunk = [clean_text(s) for s in itertools.islice(iterator, window)]
            if not chunk:
                return
            results = self._translate_window(chunk, start, n_best, on_batch, on_overlong, seed,
                                             aligned, glossary)
            if quality:
                results = list(zip(results, self.assess(
                    chunk, [_best_text(result, aligned) for result in results])))
            yield from results
            start += len(chunk)

    def _source_ids(self, sentences):
        """The ids of cleaned strings (no end token), flat, and where each
        sentence starts in them, NumPy arrays: one sentence in plain Python
        (`tokenizer.vocabulary`, the same ids: a call of tf-text's op costs
        0.3 ms, the `sentencepiece` package a few microseconds a short
        sentence), more in one call of the tokenizer's op."""
        if len(sentences) == 1:
            ids = np.array(self.tokenizer.vocabulary.encode(sentences[0]), np.int32)
            return ids, np.array([0, len(ids)])
        ids = self._tokenize(sentences)
        return ids.flat_values.numpy(), ids.row_splits.numpy()

    def _translate_window(self, sentences, start, n_best, on_batch, on_overlong, seed, aligned,
                          glossary=None):
        """The results of one window of cleaned `sentences` (the first at
        `start` of the stream), in their order (see `translate_stream`)."""
        values, splits = self._source_ids(sentences)
        lengths = np.diff(splits)
        limit = self.model.config.max_source_tokens
        too_long = np.flatnonzero(lengths > limit)
        if len(too_long) and self.overlong == "error":
            first = int(too_long[0])
            raise ValueError(
                f"Sentence(s) {[start + int(i) for i in too_long[:10]]} are longer than the "
                f"model's {limit} tokens (the first has {lengths[first]}); shorten them or use "
                "overlong='truncate'.")
        if len(too_long):
            indexes = [start + int(i) for i in too_long]
            if on_overlong is None:
                warnings.warn(truncation_warning(indexes, limit), stacklevel=3)
            else:
                on_overlong(indexes, limit)
        # The sources as the search reads them (cut, end token appended),
        # as NumPy rows: batching them is then plain NumPy, no TF ops.
        lengths = np.minimum(lengths, limit)

        if self.sampling and seed is None:
            seed = self.sampling.seed
        # i -> (terms found, the target alternatives' ids of each): the
        # sentences a glossary constrains, searched apart from the others.
        bound = self._constraints(sentences, start, glossary) if glossary is not None else {}

        def padded(rows):
            """The sources of sentences `rows` as the search reads them."""
            return pad_sources([np.append(values[splits[i]:splits[i] + lengths[i]],
                                          self.tokenizer.eos_id) for i in rows],
                               self.tokenizer.pad_id)

        def search(rows):
            source = padded(rows)
            # A sampling seed a batch, from the index of its first sentence
            # in the stream: the same input draws the same translations.
            batch_seed = seed * 1_000_003 + start + int(rows[0]) if self.sampling else 0
            if lone and len(rows) == 1 and int(rows[0]) not in bound:
                return rows, self._search_lone(aligned, source, lengths[rows] == 0), False
            inputs = (source, lengths[rows] == 0, tf.constant(batch_seed, tf.int64),
                      tf.constant(self.alpha, tf.float32), self._output_weights, NO_BAN)
            if int(rows[0]) not in bound and not shared:
                return rows, traced(*inputs), False
            constraints = Constraints.of([bound[int(i)][1] if int(i) in bound else []
                                          for i in rows])
            return rows, bound_traced(*inputs, constraints.phrases, constraints.owner), True

        one = (n_best or 1) == 1 or self.beam_size == 1 or self.sampling is not None
        traced = (self._translate_aligned if aligned else
                  self._translate if one else self._translate_n_best)
        lone = self._lone is not None and one and self.sampling is None
        bound_traced = self._bound[(n_best or 1) == 1, aligned]
        # Under a glossary, the sentences without terms go through the
        # constrained search too (with none: the same translations, each
        # step kind running only where it is needed), so that a file traces
        # one search, not two, where its beam is the constrained search's.
        shared = glossary is not None and self.beam_size >= GLOSSARY_BEAM

        def align(i, translation, tokens, attended):
            """The alignment of sentence `i`'s translation."""
            return self._kept_alignment(sentences[i], values[splits[i]:splits[i] + lengths[i]],
                                        translation, tokens, attended)

        align = align if aligned else None
        # The guard's (`_Mending`) sentences: not a glossary's (flagged
        # only, by `assess`), nor blank ones.
        guarded = ({i for i in range(len(sentences)) if i not in bound and lengths[i]}
                   if self.guard and self.sampling is None else set())

        def mending(results):
            """The guard over the window's `results`."""
            return _Mending(self, sentences, lengths, lambda i: padded([i])[0], results, n_best,
                            aligned, align, shared)

        if self.slots and self.sampling is None:
            results = self._search_slots(values, splits, lengths, n_best, one, on_batch, align)
            guard = mending(results)
            guard.flag(sorted(guarded))
            return guard.settled()
        batches = []
        for group in ([i for i in range(len(sentences)) if i not in bound], sorted(bound)):
            group = np.array(group, dtype=np.int64)
            if len(group):
                batches += [group[batch] for batch in length_batches(
                    lengths[group] + 1, self.batch_tokens, self.batch_size)]
        results = [None] * len(sentences)
        guard = mending(results)
        unmet = []  # the constrained sentences whose best misses a term
        if self.in_flight == 1 or len(batches) == 1:  # no pool to start for one batch
            self._collect(map(search, batches), results, n_best, on_batch, align, unmet)
            guard.flag(sorted(guarded))
        else:
            # A pool a window, shut down however the window ends: callers on
            # several threads share no pool, and its threads cost
            # microseconds to start. The stop that shutting down puts on the
            # queue also ends a thread that Ctrl-C interrupted while it
            # started (Thread.start waits for it, where a Ctrl-C in `map`
            # most often lands): the pool never registered that thread, and
            # Python used to wait for it at exit forever.
            with concurrent.futures.ThreadPoolExecutor(self.in_flight) as threads:
                try:
                    self._collect(self._flagging([threads.submit(search, batch)
                                                  for batch in batches], guard, guarded, threads),
                                  results, n_best, on_batch, align, unmet)
                except BaseException:
                    # Ctrl-C (or an error): the queued batches (and tries)
                    # are dropped, not searched first.
                    threads.shutdown(wait=False, cancel_futures=True)
                    raise
        for i in sorted(unmet):
            best = results[i][0] if aligned else results[i]
            best = best[0][0] if isinstance(best, list) else best
            missing = [term.entry.targets[0] for term, alternatives in zip(*bound[i][::2])
                       if not any(alternative in best for alternative in alternatives)]
            warnings.warn(GlossaryWarning(
                f"Sentence {start + i}: its translation does not hold "
                f"{', '.join(repr(term) for term in missing) or 'every term'} of "
                f"{glossary.name} (the output limit came first); its best is given as it is"),
                stacklevel=3)
        return guard.settled()

    def _flagging(self, futures, guard, guarded, pool):
        """The searched batches of `futures` (a window's, on `pool`, in the
        order they were started) as they end, for `_collect` (which writes
        each sentence's place, in any order); the sentences of each batch in
        `guarded` are flagged by `guard` (a `_Mending`) once written. Those
        flagged in all but the last `in_flight` batches are searched again in
        one batch once these have ended: with every batch started, on a
        thread left free while the last ones run. Those flagged in the last
        ones are searched again after them. The tries' batches are the same
        in whatever order the searches end, and so are their translations."""
        first = set(futures[:-self.in_flight])
        last = []
        for future in concurrent.futures.as_completed(futures):
            searched = future.result()
            yield searched
            rows = [i for i in searched[0].tolist() if i in guarded]
            if future not in first:
                last += rows
                continue
            guard.flag(rows)
            first.discard(future)
            if not first:
                guard.retry(pool, 1)
        guard.flag(last)
        guard.retry(pool, self.in_flight)

    def _mended(self, sentences, sources, results, n_best, aligned, align=None):
        """`results` (as `translate` gives them) of `sentences` (their ids as
        the search reads them, `sources`, a row each), mended by the guard
        (`_Mending`; `align` as it takes it)."""
        counts = [int(np.sum((source != self.tokenizer.pad_id) & (source != self.tokenizer.eos_id)))
                  for source in sources]
        mending = _Mending(self, sentences, counts, sources.__getitem__, list(results), n_best,
                           aligned, align, shared=False)
        mending.flag(range(len(sentences)))
        return mending.settled()

    def _retried(self, sources, n_best, aligned, align, shared=False):
        """The results (lists of `(translation, score)`, with `aligned` each
        with its `align(row, translation, tokens, attended)`) of `sources`
        (rows of ids as the search reads them) searched with the n-grams of
        `GUARD_NGRAM` tokens banned from repeating (`shared`: see
        `_Mending`)."""
        inputs = (pad_sources(sources, self.tokenizer.pad_id),
                  np.zeros(len(sources), bool), tf.constant(0, tf.int64),
                  tf.constant(self.alpha, tf.float32), self._output_weights,
                  tf.constant(GUARD_NGRAM, tf.int32))
        if shared:
            none = Constraints.of([[]] * len(sources))
            searched = self._bound[(n_best or 1) == 1, aligned](*inputs, none.phrases, none.owner)
        else:
            searched = (self._translate_aligned if aligned else self._translate
                        if (n_best or 1) == 1 or self.beam_size == 1 else self._translate_n_best
                        )(*inputs)
        found = [None] * len(sources)
        self._collect([(np.arange(len(sources)), searched, shared)], found, n_best or 1, None,
                      align, [])
        return found

    def _runaway(self, sentence, translation, source_tokens):
        """False where `translation` of `sentence` (of `source_tokens`
        tokens) neither loops nor runs away (`trust.GUARDED`); else its
        `trust.Loop`, or None where it runs away without one."""
        loop = trust.loop_of(sentence, translation)
        if loop is None and not self._ran_away(translation, source_tokens):
            return False
        return loop

    def _ran_away(self, translation, source_tokens):
        """`trust.ran_away` of `translation` (its tokens counted by the
        target vocabulary) for a source of `source_tokens` tokens, whose
        output limit the search's settings give."""
        limit = min(source_tokens + self.decode_margin, self.model.config.max_length)
        return trust.ran_away(source_tokens, len(self.tokenizer.vocabulary.encode_target(
            translation)), limit)

    def _guarded_flags(self, sentence, translation, source_tokens):
        """Which of `trust.GUARDED` `translation` of `sentence` (of
        `source_tokens` tokens) carries, a set."""
        return ({"repetition"} if trust.loop_of(sentence, translation) is not None else set()) \
            | ({"runaway"} if self._ran_away(translation, source_tokens) else set())

    def assess(self, sources, translations):
        """A `trust.Quality` of each translation (str) of `sources` (str): its
        confidence (by `calibrator`; None without one, as
        `calibration_note` says) and flags, from the model's signals read
        in teacher-forced passes over batches of similar lengths
        (`decoding.quality`; `untranslated` where `detect` and the
        `source_language` are known). A blank source gets confidence None
        and no flags."""
        sources = [clean_text(text) for text in sources]
        translations = [clean_text(text) for text in translations]
        if not sources:
            return []
        config, vocabulary = self.model.config, self.tokenizer.vocabulary
        source_rows = [vocabulary.encode(text)[:config.max_source_tokens] for text in sources]
        target_rows = [vocabulary.encode_target(text)[:config.max_length - 1]
                       for text in translations]
        features = np.zeros((len(sources), len(quality.SIGNALS)))
        received = [None] * len(sources)
        lengths = [max(len(source), len(target)) + 1
                   for source, target in zip(source_rows, target_rows)]
        alpha = tf.constant(self.alpha if self.calibrator is None else self.calibrator.alpha,
                            tf.float32)

        def read(batch):
            found, attention = self._signals(
                pad_sources([source_rows[i] + [config.eos_id] for i in batch], config.pad_id),
                pad_sources([target_rows[i] + [config.eos_id] for i in batch], config.pad_id),
                tf.constant([sources[i] for i in batch]),
                tf.constant([translations[i] for i in batch]), alpha)
            features[batch] = found.numpy()
            for row, i in enumerate(batch):
                received[i] = attention.numpy()[row, :len(source_rows[i])]

        # In flight as the searches are: each pass's operations get their
        # share of the cores (`batch_defaults.share_cores`).
        with concurrent.futures.ThreadPoolExecutor(self.in_flight) as threads:
            list(threads.map(read, length_batches(lengths, self.batch_tokens)))
        confidence = (self.calibrator.confidence(features) if self.calibrator is not None
                      else [None] * len(sources))
        assessed = []
        for i, (source, translation) in enumerate(zip(sources, translations)):
            if not source_rows[i]:
                assessed.append(trust.Quality(None))
                continue
            limit = min(len(source_rows[i]) + self.decode_margin, config.max_length)
            flags = trust.text_flags(source, translation, len(source_rows[i]),
                                     len(target_rows[i]), limit, self.source_language,
                                     self.detect)
            with self._lock:
                flags |= self._stuck.get((source, translation), set())
            if trust.omitted_words(source, self.tokenizer.pieces(source_rows[i]), received[i],
                                   len(target_rows[i]) + 1):
                flags.add("omission")
            assessed.append(trust.Quality(
                None if confidence[i] is None else float(confidence[i]), trust.ordered(flags),
                dict(zip(quality.SIGNALS, features[i].tolist()))))
        return assessed

    def _constraints(self, sentences, start, glossary):
        """`{index: (terms, ids, alternatives)}` of the sentences of a window
        (the first at `start` of the stream) that hold terms of `glossary`:
        the terms (`glossary.Found`), each one's target alternatives as
        token ids, and as strings. Warns of a sentence with more terms than
        the beam holds (the first are kept)."""
        most = max(self.beam_size, GLOSSARY_BEAM)
        limit = min(MAX_PHRASE_TOKENS, self.model.config.max_length - 1)
        asked = [glossary.constraints(sentence) for sentence in sentences]
        strings = sorted({text for alternatives, _ in asked for each in alternatives
                          for text in each})
        ids = dict(zip(strings, self.tokenizer.tokenize_target(
            tf.constant(strings, tf.string)).to_list())) if strings else {}
        bound = {}
        for i, (alternatives, terms) in enumerate(asked):
            if not alternatives:
                continue
            for each, term in zip(alternatives, terms):
                for text in each:
                    if not 0 < len(ids[text]) <= limit:
                        raise GlossaryError(
                            f"{glossary.name}, line {term.entry.line}: the target term "
                            f"{text!r} is {len(ids[text])} tokens; a term is 1 to {limit}")
            if len(terms) > most:
                warnings.warn(GlossaryWarning(
                    f"Sentence {start + i} holds {len(terms)} terms of {glossary.name}, more "
                    f"than its beam of {most} places; kept the first {most}, left out "
                    f"{', '.join(repr(t.entry.sources[0]) for t in terms[most:])}"), stacklevel=4)
                alternatives, terms = alternatives[:most], terms[:most]
            bound[i] = (terms, [[ids[text] for text in each] for each in alternatives],
                        alternatives)
        return bound

    def slot_search(self, best_only=True, aligned=False, slots=None):
        """An empty `SlotSearch` of this translator's model and settings
        (`slots` default: the translator's), which shares its traced graphs
        with every other of the same settings (`SlotSearch.fork`); with
        `aligned`, it keeps the attention that aligns translations."""
        key = (float(self.alpha), best_only, aligned, slots or self.slots)
        if key not in self._slot_searches:
            self._slot_searches[key] = SlotSearch(
                self.model, key[3], self.beam_size, self.alpha, self.decode_margin,
                best_only=best_only,
                alignment_layer=alignment_layer(self.model) if aligned else None,
                detokenize=self.tokenizer.detokenize, output_weights=self._output_weights)
        return self._slot_searches[key].fork()

    def _kept_alignment(self, sentence, source_ids, translation, tokens, attended):
        """The `Alignment` of `translation` (str) with `sentence` (str, read
        as `source_ids`), from the source positions its search attended to
        for each of its `tokens`."""
        ends = np.flatnonzero(tokens == self.model.config.eos_id)
        end = int(ends[0]) if len(ends) else len(tokens)
        return token_alignment(self.tokenizer, sentence, list(source_ids), translation,
                               tokens[:end].tolist(), attended[:end].tolist())

    def _search_slots(self, values, splits, lengths, n_best, best_only, on_batch, align=None):
        """The results of one window's sentences (their ids: `values`
        cut at `splits`, `lengths` long) searched with continuous batching:
        `in_flight` `SlotSearch`es on threads, each admitting the next
        waiting sentence (the longest first, as batches take them) whenever
        one of its sentences ends; `align` as in `_collect`."""
        eos, pad = self.tokenizer.eos_id, self.tokenizer.pad_id
        waiting = list(np.argsort(-lengths, kind="stable"))
        lock, stop, ended = threading.Lock(), threading.Event(), queue.Queue()

        def search(slots):
            try:
                while not stop.is_set():
                    with lock:
                        newcomers = waiting[:slots.free]
                        del waiting[:len(newcomers)]
                        left = len(waiting)
                    if newcomers:
                        slots.join(pad_sources(
                            [np.append(values[splits[i]:splits[i] + lengths[i]], eos)
                             for i in newcomers], pad), newcomers)
                    if not slots.live:
                        return
                    # Newcomers join in groups of a quarter of the slots (one
                    # encoder call and one return to Python for several).
                    ended.put(slots.advance(free=max(1, min(left, self.slots // 4)) if left
                                            else self.slots))
            finally:
                ended.put(None)  # this thread is done

        found = {}
        with concurrent.futures.ThreadPoolExecutor(self.in_flight) as threads:
            workers = [threads.submit(search, self.slot_search(best_only, align is not None))
                       for _ in range(self.in_flight)]
            try:
                running = len(workers)
                while running:
                    batch = ended.get()
                    if batch is None:
                        running -= 1
                        continue
                    # i -> (texts, scores, tokens, attended positions or None)
                    found.update((i, (kept[-1], scores, tokens, (kept[:-1] or [None])[0]))
                                 for i, tokens, scores, _, *kept in batch)
                    if on_batch is not None and batch:
                        on_batch(len(batch), sum(int(np.count_nonzero(found[i][2][0] != pad))
                                                 for i, *_ in batch))
            finally:
                stop.set()  # Ctrl-C or an error: the threads stop at their next call
            for worker in workers:
                worker.result()  # a search's error raises here
        searched = _hypotheses([found[i][:2] for i in range(len(lengths))], lengths == 0)
        results = []
        for i, hypotheses in enumerate(searched):
            results.append(hypotheses[:n_best] if n_best else hypotheses[0][0])
            if align is not None:  # the best translation's tokens and attended positions
                results[-1] = (results[-1], align(i, hypotheses[0][0], found[i][2][0],
                                                  found[i][3][0]))
        return results

    @staticmethod
    def _collect(searched, results, n_best, on_batch, align=None, unmet=None):
        """Writes each searched batch's translations (or n-best lists; with
        `align`, `(translation, align(i, translation, tokens, attended))`)
        to their sentences' places in `results`; adds to `unmet` the
        constrained sentences whose best translation misses a term."""
        # (Tensors from the traced searches, NumPy arrays from the lone one.)
        for rows, (texts, scores, output_lengths, *kept), constrained in searched:
            kept = [np.asarray(values) for values in kept]  # with align: tokens, attended
            if constrained:  # and last, whether each hypothesis holds its terms
                unmet.extend(int(i) for i, met in zip(rows, kept.pop()) if not met[0])
            for row, (i, row_texts, row_scores) in enumerate(zip(rows, np.asarray(texts),
                                                                 np.asarray(scores))):
                hypotheses = [(t.decode("utf-8", errors="replace"), float(s))
                              for t, s in zip(row_texts, row_scores)]
                results[i] = hypotheses[:n_best] if n_best else hypotheses[0][0]
                if align is not None:
                    results[i] = (results[i], align(i, hypotheses[0][0],
                                                    *(values[row] for values in kept)))
            if on_batch is not None:
                on_batch(len(rows), int(np.asarray(output_lengths).sum()))


class SlotTranslator:
    """Sentences (str) translated with continuous batching by one thread: a
    `SlotSearch` of a `Translator`'s settings with its tokenizer around it,
    for a server's worker that admits sentences as they arrive
    (`serving.batcher`), which tells a running `advance` when to come back
    through `wakeup` (`decoding.slots.Wakeup`). Sentences longer than the
    model accepts are cut, as `Translator.translate` cuts them.

    Args:
        translator: a `Translator` (its model, tokenizer and decoding).
        slots: sentences searched at once.
        n_best: hypotheses a sentence gives (1: the best alone, which ends
            each sentence once its best is settled).
        aligned: each best translation also gives its `Alignment`, from the
            attention its search kept.
        on_aligned: with `aligned`, called after each `advance` with the
            sentences that ended (as joined) and their `(hypotheses,
            alignment)` (a runtime keeping alignments).
    """

    def __init__(self, translator, slots, n_best=1, aligned=False, on_aligned=None):
        self.translator = translator
        self.n_best = n_best
        self.search = translator.slot_search(best_only=n_best == 1, aligned=aligned,
                                              slots=slots)
        self.aligned = aligned
        self.on_aligned = on_aligned
        self._sources = {}  # key -> (sentence, cleaned, source ids without the end token)
        self.wakeup = Wakeup()  # of `advance(on_ended=...)`, set by other threads

    @property
    def slots(self):
        return self.search.slots

    @property
    def keys(self):
        """The keys of the sentences being searched."""
        return self.search.keys

    @property
    def free(self):
        return self.search.free

    @property
    def live(self):
        return self.search.live

    def join(self, sentences, keys):
        """Admits `sentences` (at most `free`), each known by its key."""
        cleaned = [clean_text(sentence) for sentence in sentences]
        limit = self.translator.model.config.max_source_tokens
        ids = [row[:limit] for row in self.translator._tokenize(cleaned).to_list()]
        self.search.join(pad_sources([row + [self.translator.tokenizer.eos_id] for row in ids],
                                     self.translator.tokenizer.pad_id), keys)
        self._sources.update(zip(keys, zip(sentences, cleaned, ids)))

    def advance(self, max_steps=2**30, on_ended=None):
        """Steps until some sentence ends (or `max_steps`): `(key,
        hypotheses, alignment)` of each that ended, `hypotheses` up to
        `n_best` `(translation, score)` pairs, `alignment` None unless
        `aligned`.

        With `on_ended`, the search instead hands what it found for them to
        `on_ended` from inside its loop, at the step they end (see
        `SlotSearch.advance`), and goes on until no sentence is live,
        `max_steps`, or `wakeup` says to return (then it returns []).
        `answers` turns what was handed into these tuples, on another
        thread: `on_ended` runs on one of TensorFlow's threads, where a
        TensorFlow call (detokenizing) can wait forever for the threads the
        search holds.
        """
        if on_ended is None:
            return self.answers(self.search.advance(max_steps))
        return self.search.advance(max_steps, on_ended=on_ended, wakeup=self.wakeup)

    def answers(self, ended):
        """`advance`'s answers of what the search found for the sentences
        that `ended`."""
        if not ended:
            return []
        sources = [self._sources.pop(key) for key, *_ in ended]
        searched = _hypotheses([(kept[-1], scores) for _, _, scores, _, *kept in ended],
                               [not source_ids for _, _, source_ids in sources])
        results, sentences = [], []
        translator = self.translator
        for (key, tokens, _, _, *kept), (sentence, cleaned, source_ids), hypotheses in zip(
                ended, sources, searched):
            sentences.append(sentence)
            align = (lambda _, translation, tokens, attended, cleaned=cleaned, ids=source_ids:
                     translator._kept_alignment(cleaned, ids, translation, tokens, attended))
            result = hypotheses[:self.n_best]
            if self.aligned:
                result = (result, align(0, hypotheses[0][0], tokens[0], kept[0][0]))
            if translator.guard and source_ids:
                result, = translator._mended(
                    [cleaned], [np.array(source_ids + [translator.tokenizer.eos_id], np.int32)],
                    [result], self.n_best, self.aligned, align if self.aligned else None)
            results.append((key, *(result if self.aligned else (result, None))))
        if self.on_aligned is not None:
            self.on_aligned(sentences, [(hypotheses, alignment)
                                        for _, hypotheses, alignment in results])
        return results

    def cancel(self, keys):
        """Takes the sentences of `keys` out before they end; returns those
        it took (the others ended already, or never joined)."""
        searched = set(self.search.keys)
        keys = [key for key in keys if key in searched]
        self.search.cancel(keys)
        for key in keys:
            del self._sources[key]
        return keys


class _Mending:
    """The guard (`Translator`'s `guard`) over `results` (as `translate`
    gives them, mended in place) of `sentences`: `flag` reads the results of
    some of them once they are written, and finds each best translation
    that loops or runs away (`trust.loop_of`, `trust.ran_away`); `retry`
    searches those found so far again, with every pair of tokens banned from
    repeating (`GUARD_NGRAM`), on a pool's threads; `settled` waits for the
    tries and keeps each one that does neither. Where it still does, the
    translation is cut before its loop, and its flags are kept for `assess`
    (the cut text no longer shows them).

    A window's searches flag their results batch by batch and retry while
    their last batch runs (`Translator._flagging`): that batch most often
    holds the shortest sentences, many of them, and searches alone while
    the pool's other thread waits, so the tries cost little time there. On
    the demo's run of `benchmarks/trust.py`, a thread waited 0.3 s of a
    1.3 s file, and the tries searched after the file made it 1.089x as
    long as without the guard; searched there, 1.03x.

    Args:
        translator: the `Translator` whose searches these are.
        sentences: the cleaned sentences (by index).
        counts: the number of source tokens of each, as searched.
        source: index -> the sentence's ids as the search reads them.
        results: the results, written by index.
        n_best, aligned: as `translate` was asked.
        align: for aligned results, `align(index, translation, tokens,
            attended)`.
        shared: search again with the constrained search's trace (with no
            constraints), as the searches before did.
    """

    def __init__(self, translator, sentences, counts, source, results, n_best, aligned, align,
                 shared):
        self.translator = translator
        self.sentences, self.counts, self.source = sentences, counts, source
        self.results, self.n_best, self.aligned = results, n_best, aligned
        self.align, self.shared = align, shared
        self.loops = {}  # index -> its `trust.Loop`, or None where it runs away without one
        self.waiting = []  # the flagged indexes not yet searched again
        self.tries = []  # (indexes, the future of their results)

    def flag(self, indexes):
        """Finds the loops and runaways among the results of `indexes`."""
        for k in indexes:
            loop = self.translator._runaway(self.sentences[k],
                                            _best_text(self.results[k], self.aligned),
                                            self.counts[k])
            if loop is not False:
                self.loops[k] = loop
                self.waiting.append(k)

    def retry(self, pool, parts):
        """Searches the flagged sentences not yet searched again on `pool`,
        in up to `parts` batches of like lengths."""
        flagged = sorted(self.waiting, key=lambda k: (-self.counts[k], k))
        self.waiting = []
        for part in range(min(parts, len(flagged))):
            batch = flagged[part::parts]
            align = self.align and (lambda row, *kept, batch=batch: self.align(batch[row], *kept))
            self.tries.append((batch, pool.submit(
                self.translator._retried, [self.source(k) for k in batch], self.n_best,
                self.aligned, align, self.shared)))

    def settled(self):
        """The results, mended: the flagged sentences not yet searched again
        are, in `in_flight` batches at once."""
        if self.waiting:
            with concurrent.futures.ThreadPoolExecutor(self.translator.in_flight) as pool:
                self.retry(pool, self.translator.in_flight)
        translator = self.translator
        for batch, found in self.tries:
            for k, each in zip(batch, found.result()):
                best = (each[0] if self.aligned else each)[0][0]
                if translator._runaway(self.sentences[k], best, self.counts[k]) is False:
                    self.results[k] = _as_asked(each, self.n_best, self.aligned)
                    del self.loops[k]
        for k, loop in self.loops.items():  # the try loops or runs away too
            best = _best_text(self.results[k], self.aligned)
            flags = translator._guarded_flags(self.sentences[k], best, self.counts[k])
            if loop is not None:
                self.results[k] = _cut(self.results[k], trust.cut_before_loop(best, loop),
                                       self.aligned)
            with translator._lock:
                translator._stuck[self.sentences[k], _best_text(self.results[k],
                                                                self.aligned)] = flags
                while len(translator._stuck) > KEPT_FLAGS:
                    translator._stuck.popitem(last=False)
        return self.results


def _best_text(result, aligned):
    """The best translation of a result of `Translator.translate` (a string,
    or a list of `(translation, score)`; with `aligned`, the first of a
    pair)."""
    result = result[0] if aligned else result
    return result if isinstance(result, str) else result[0][0]


def _as_asked(found, n_best, aligned):
    """A result found as a list of `(translation, score)` (with `aligned`,
    the first of a pair), as `translate` gives it for `n_best`."""
    if aligned:
        return _as_asked(found[0], n_best, False), found[1]
    return found[:n_best] if n_best else found[0][0]


def _cut(result, text, aligned):
    """A result whose best translation is cut to `text` (a start of it): its
    score kept, the alignment's pairs past the cut left out."""
    if aligned:
        result, alignment = result
        return _cut(result, text, False), Alignment(tuple(
            pair for pair in alignment.pairs if pair[1] <= len(text)))
    return text if isinstance(result, str) else [(text, result[0][1])] + result[1:]


def _hypotheses(searched, blank):
    """The `(translation, score)` pairs of searched sentences: `searched`
    holds each one's texts (bytes) and scores, `(n,)` each; a sentence that
    was `blank` gets ("", 0.0) for each."""
    return [[("", 0.0) if empty else (text.decode("utf-8", errors="replace"), float(score))
             for text, score in zip(texts, scores)]
            for (texts, scores), empty in zip(searched, blank)]
