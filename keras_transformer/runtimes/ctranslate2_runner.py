"""Text in, text out with CTranslate2, without TensorFlow: the `ctranslate2/`
folder of an export (`ctranslate2_model.save`) read by
`ctranslate2.Translator`, with the export's own tokenizer in plain Python.

Decoding is ours, not CTranslate2's defaults:
- Length penalty. CTranslate2 ranks finished hypotheses by
  `log_prob / length ** length_penalty` (length counting the end token),
  not by the paper's GNMT rule `log_prob / ((5 + length) / 6) ** alpha`.
  Its beam search otherwise keeps the same hypotheses as ours: the 2K best
  extensions, the end tokens among the first K finish, a sentence stops
  with K finished (whenever CTranslate2's `length_penalty` is not 0; at 0
  it stops as soon as the best beam ends). So the translator asks for all
  K finished hypotheses (`num_hypotheses=K`, `length_penalty=1`), recovers
  each one's log-probability (score x length) and ranks them with GNMT's
  penalty and the export's alpha: the result is our beam search's. (It
  asks CTranslate2 to rank them by `length ** (alpha / 2)`, the nearest to
  GNMT's, which matters only when it must drop some, below.)
- Padding and the start token are never produced (`suppress_sequences`),
  the end token may come first (`min_decoding_length=0`), and each sentence
  stops at `min(source tokens + decode_margin, max_length)` tokens, the
  last one an end token, as in `keras_transformer.decoding`.
`decoding.json` in the folder holds these defaults.

Where it is not exact: CTranslate2 bans tokens before its softmax (their
probability is spread over the others; ours is not), which changes
log-probabilities by log(1 - p(banned)), tiny in a trained model; at the
length limit CTranslate2 stops without an end token (the translator adds
it and scores the hypothesis again), keeping the best K extensions of the
last free step where ours keeps the best K that do not end; when more than
K hypotheses finish at one step, CTranslate2 keeps the K best by its own
ranking before ours is applied; and it does not translate an empty source.
Greedy search gives our tokens in all of these cases but the last.

Usage:
    translator = CTranslate2Translator("exports/ding/ctranslate2")
    translator.translate(["Guten Morgen!"])
"""

import json
import os
import warnings

import numpy as np

from keras_transformer import run_folder
from keras_transformer.runtimes.runtime import Runtime
from keras_transformer.textfiles import clean_text, read_json, truncation_warning

DEFAULTS_FILE = "decoding.json"


def require_ctranslate2():
    """The `ctranslate2` module, or a one-line ImportError saying how to get it."""
    try:
        import ctranslate2
    except ImportError:
        raise ImportError("CTranslate2 is not installed: pip install 'keras-transformer[ctranslate2]' "
                          "(or pip install 'ctranslate2>=4.5').") from None
    return ctranslate2


def gnmt_penalty(length, alpha):
    """((5 + length) / 6) ** alpha in float32, as `decoding.search` computes it."""
    return np.power(np.float32((5.0 + length) / 6.0), np.float32(alpha))


def ctranslate2_length_penalty(alpha):
    """CTranslate2's `length_penalty` that ranks most like GNMT's `alpha`:
    `length ** (alpha / 2)` is within about 30% of `((5 + length) / 6) **
    alpha` in how it trades length for log-probability, for outputs of 3 to
    40 tokens. For alpha 0 a tiny value, not 0, which would change when
    CTranslate2's search stops."""
    return alpha / 2 if alpha > 0 else 1e-6


def _vocabularies(directory):
    """CTranslate2's saved token lists: (source, target)."""
    def load(name):
        with open(os.path.join(directory, f"{name}_vocabulary.json"), encoding="utf-8") as file:
            return json.load(file)

    if os.path.exists(os.path.join(directory, "shared_vocabulary.json")):
        shared = load("shared")
        return shared, shared
    return load("source"), load("target")


class CTranslate2Translator:
    """Translates with a CTranslate2 export, with our search's rules (see the
    module docstring) and the same handling of awkward input as
    `keras_transformer.decoding.Translator`: str or bytes in, invalid UTF-8
    becomes U+FFFD and NUL a space, blank input gives "", input longer than
    the model accepts is cut to its `max_length - 1` tokens with a
    `TruncationWarning` naming it.

    Args:
        directory: the `ctranslate2/` folder of an export.
        compute_type: CTranslate2's, e.g. "default" (the stored weight type),
            "int8", "float32".
        threads: CPU threads (default: CTranslate2's choice).
        batch_size: sentences per CTranslate2 batch (sorted by length).
        seed: seeds CTranslate2's random generators for `sample`. They
            belong to the translator's threads, which draw one stream each:
            a new translator with the same seed, given the same calls, draws
            the same samples.
        warn_overlong: warn of the sentences cut to the model's length (a
            caller that counts them itself, as a server does, says False).
    """

    def __init__(self, directory, compute_type="default", threads=None, batch_size=32, seed=None,
                 warn_overlong=True):
        ctranslate2 = require_ctranslate2()
        if seed is not None:
            ctranslate2.set_random_seed(seed)  # before the threads that draw exist
        directory = os.fspath(directory)
        if not os.path.isfile(os.path.join(directory, "model.bin")):
            raise FileNotFoundError(f"{directory} holds no model.bin; give the ctranslate2/ folder "
                                    "of an export (keras-transformer export --formats ctranslate2).")
        self.defaults = read_json(os.path.join(directory, DEFAULTS_FILE))
        try:
            self.translator = ctranslate2.Translator(directory, device="cpu",
                                                     compute_type=compute_type,
                                                     intra_threads=threads or 0)
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"Cannot load the CTranslate2 model in {directory}: "
                             f"{str(error).splitlines()[0]}") from None
        self.tokenizer = run_folder.load_text_tokenizer(directory)
        self.source_tokens, self.target_tokens = _vocabularies(directory)
        self.target_ids = {token: index for index, token in enumerate(self.target_tokens)}
        self.eos_id = self.target_ids[self.defaults["eos_token"]]
        self.pad_id = self.target_ids[self.defaults["pad_token"]]
        self.batch_size = batch_size
        self.warn_overlong = warn_overlong

    # ----------------------------------------------------------- id level

    def _tokens(self, ids):
        return [self.source_tokens[int(i)] for i in ids]

    def score(self, sources, targets):
        """Log-probabilities of each target token and of the end token after
        it: `sources` and `targets` are lists of id lists without the end id
        (and targets without the start id); returns one list of
        `len(target) + 1` floats per pair (CTranslate2's `score_batch`)."""
        results = self.translator.score_batch(
            [self._tokens(s) for s in sources],
            [[self.target_tokens[int(i)] for i in t] for t in targets],
            max_batch_size=self.batch_size, max_input_length=0)
        return [list(result.log_probs) for result in results]

    def limits(self, sources, decode_margin=None):
        """Each sentence's longest output, end token included: source tokens
        (not counting padding or end ids) plus the margin, at most
        `max_length` (as `decoding.search.output_limits`)."""
        margin = self.defaults["decode_margin"] if decode_margin is None else decode_margin
        return [min(sum(int(i) not in (self.pad_id, self.eos_id) for i in ids) + margin,
                    self.defaults["max_length"]) for ids in sources]

    def _translate(self, sources, beam_size, alpha, max_output):
        """CTranslate2's finished hypotheses `(ids, log_prob)`, for outputs of
        at most `max_output` tokens before the end token."""
        penalty = ctranslate2_length_penalty(alpha)
        results = self.translator.translate_batch(
            [self._tokens(s) for s in sources], beam_size=beam_size, num_hypotheses=beam_size,
            length_penalty=penalty, return_scores=True, return_end_token=True, min_decoding_length=0,
            max_decoding_length=max(max_output, 1), max_input_length=0,
            suppress_sequences=self.defaults["suppress_sequences"] or None,
            max_batch_size=self.batch_size)
        # A score is the log-probability over length ** penalty.
        return [[([self.target_ids[t] for t in tokens], score * len(tokens) ** penalty)
                 for tokens, score in zip(result.hypotheses, result.scores)]
                for result in results]

    def search(self, sources, beam_size=None, alpha=None, decode_margin=None):
        """Beam search (greedy with `beam_size=1`) on source id lists
        (without the end id): per sentence, a list of `(target ids ending
        with the end id, score)` best first, the score being the
        log-probability over GNMT's length penalty. CTranslate2 does not
        translate an empty source: it gives the end id alone, score 0."""
        k = self.defaults["beam_size"] if beam_size is None else beam_size
        alpha = self.defaults["alpha"] if alpha is None else alpha
        limits = self.limits(sources, decode_margin)
        # One batch up to the longest limit; a sentence whose search went past
        # its own limit (rare: it ran on without ending) is searched again
        # alone with it, so that each stops where ours does.
        hypotheses = self._translate(sources, k, alpha, max(limits) - 1)
        again = {}
        for row, limit in enumerate(limits):
            if any(len(ids) > limit - 1 for ids, _ in hypotheses[row]):
                again.setdefault(limit, []).append(row)
        for limit, rows in again.items():
            for row, found in zip(rows, self._translate([sources[r] for r in rows], k, alpha, limit - 1)):
                hypotheses[row] = found
        for row, source in enumerate(sources):
            if not source:  # CTranslate2 does not translate an empty source
                hypotheses[row] = [([self.eos_id], 0.0)]
        # A hypothesis that reached its limit ends there without the end
        # token, where ours is given it: add it and rescore the whole.
        unended = [(row, j) for row, found in enumerate(hypotheses)
                   for j, (ids, _) in enumerate(found) if ids[-1] != self.eos_id]
        if unended:
            targets = [hypotheses[row][j][0][:limits[row] - 1] for row, j in unended]
            rescored = self.score([sources[row] for row, _ in unended], targets)
            for (row, j), ids, log_probs in zip(unended, targets, rescored):
                hypotheses[row][j] = (ids + [self.eos_id], sum(log_probs))
        return [sorted(((ids, float(log_prob / gnmt_penalty(len(ids), alpha)))
                        for ids, log_prob in found), key=lambda item: -item[1])
                for found in hypotheses]

    # --------------------------------------------------------- text level

    def encode(self, sentences):
        """Source id lists (without the end id), cut to `max_length - 1`
        tokens with a warning, and which sentences were blank."""
        limit = self.defaults["max_length"] - 1
        sources = [list(self.tokenizer.encode(clean_text(s))) for s in sentences]
        too_long = [i for i, ids in enumerate(sources) if len(ids) > limit]
        if too_long and self.warn_overlong:
            warnings.warn(truncation_warning(too_long, limit), stacklevel=3)
        return [ids[:limit] for ids in sources], [not ids for ids in sources]

    def sample(self, sentences, top_k=0, temperature=1.0, decode_margin=None):
        """Draws a translation of each sentence (str or bytes) from the
        model's distribution, for back-translation: from the `top_k` most
        likely tokens (0: all), after dividing the log-probabilities by
        `temperature`, as `decoding.Sampling` does, with CTranslate2's own
        random generators (other draws than our search's; see `seed`).
        Outputs stop at our search's length limits."""
        if not sentences:
            return []
        sources, blank = self.encode(sentences)
        limits = self.limits(sources, decode_margin)
        results = self.translator.translate_batch(
            [self._tokens(s) for s in sources], beam_size=1, sampling_topk=top_k,
            sampling_temperature=temperature, return_end_token=True, min_decoding_length=0,
            max_decoding_length=max(max(limits) - 1, 1), max_input_length=0,
            suppress_sequences=self.defaults["suppress_sequences"] or None,
            max_batch_size=self.batch_size)
        return ["" if empty else
                self.tokenizer.decode([self.target_ids[t] for t in result.hypotheses[0]][:limit - 1])
                for result, limit, empty in zip(results, limits, blank)]

    def translate(self, sentences, beam_size=None, alpha=None, decode_margin=None):
        """Translates a list of sentences (str or bytes), one string each."""
        if not sentences:
            return []
        sources, blank = self.encode(sentences)
        found = self.search(sources, beam_size, alpha, decode_margin)
        return ["" if empty else self.tokenizer.decode(best[0][0])
                for best, empty in zip(found, blank)]


class CTranslate2Runtime(Runtime):
    """An export's CTranslate2 model (`CTranslate2Translator`: our search's
    rules on CTranslate2's decoder)."""

    name = "ctranslate2"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        self.translator = CTranslate2Translator(run_folder.export_part(path, "ctranslate2"),
                                                threads=threads,
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
