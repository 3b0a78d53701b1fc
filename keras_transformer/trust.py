"""How far to trust a translation, in plain Python (no TensorFlow): the
flags read from its text and tokens, and the calibrator that turns the
model's own signals into a confidence.

The flags (`FLAGS`) say what is wrong with a translation, where it shows:
- `repetition`: a loop, a run of words (or of a few words) repeated three
  times or more in a row where the source repeats nothing as often
  ("I'm a old old old age.");
- `runaway`: an output that reached its length limit, or one far longer
  than its source (`RUNAWAY_RATIO`, `RUNAWAY_SLACK`, in tokens);
- `copy`: the source given back as it is (letters and digits compared,
  case folded), where it has words to translate (`COPY_WORDS`; names,
  numbers, URLs and e-mail addresses copied are not flagged);
- `untranslated`: the translation is in the source language, where a
  language detector is given (the server's; `documents.detection`);
- `omission`: a source word that almost no part of the translation attends
  to (the model's cross-attention, `decoding.quality`).

The confidence is the probability that a translation is good (`TARGET`),
from the model's signals for it (`decoding.quality.SIGNALS`), by a
logistic regression fitted on the run's validation sentences: the
`Calibrator`, saved beside the model (`CALIBRATION_FILE`), which refuses a
model other than the one it was fitted on. The Trust page of the guide
says what each signal is and how well the confidence predicts.
"""

import dataclasses
import json
import math
import os
import re
import unicodedata

import numpy as np

from keras_transformer.vocabularies.offsets import piece_offsets

FLAGS = ("repetition", "runaway", "copy", "untranslated", "omission")
"""Every flag a translation may carry, in the order they are listed."""

GUARDED = ("repetition", "runaway")
"""The flags whose translations are searched again (the Translator's guard)."""

LOOP_COPIES = 3
"""A unit repeated this many times in a row, or more, is a loop."""

MAX_UNIT = 6
"""The longest unit of a loop, in words."""

RUNAWAY_RATIO, RUNAWAY_SLACK = 3.0, 8
"""An output of more than `RUNAWAY_RATIO` x its source's tokens +
`RUNAWAY_SLACK` has run away (no reference translation of the Ding
validation and test pairs is that long: their longest is 2.6x + 3)."""

OMISSION_ATTENTION = 0.1
"""A source word of letters whose pieces receive, summed over the
translation's tokens, less than this share of their fair share (the
translation's tokens spread evenly over the source's) is omitted."""

COPY_WORDS = 3
"""A source of at least this many words of letters given back as it is
is a copy."""

CALIBRATION_FILE = "calibration.json"
"""The calibrator's file in a run or export folder."""

TARGET = 45.0
"""What the confidence is the probability of: a sentence chrF (sacreBLEU's
chrF of the translation against one reference) of at least this."""

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_ADDRESS = re.compile(r"\S+@\S+|\b(?:https?://|www\.)\S+", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Loop:
    """A unit of `words` repeated `copies` times in a row, from word
    `start` of a text's `words` (`words_of`)."""

    start: int
    unit: tuple
    copies: int

    @property
    def end(self):
        """The word after the loop's last copy."""
        return self.start + len(self.unit) * self.copies


@dataclasses.dataclass(frozen=True)
class Quality:
    """How far to trust one translation.

    Attributes:
        confidence: the probability that it is good (`TARGET`), in [0, 1];
            None where no calibrator is at hand (the runtime or folder says
            why).
        flags: the `FLAGS` it carries, in their order.
        signals: the model's signals it was computed from, by name (empty
            where none were read).
    """

    confidence: float | None
    flags: tuple = ()
    signals: dict = dataclasses.field(default_factory=dict)

    def as_dict(self):
        """The confidence (rounded to 3 places) and flags, as JSON answers them."""
        return {"confidence": None if self.confidence is None else round(self.confidence, 3),
                "flags": list(self.flags)}


def combined(qualities):
    """The `Quality` of a text of several sentences, from theirs (None for
    a sentence nothing translated): the least confidence (None where one of
    them has none, or none was translated) and the flags of any."""
    qualities = [quality for quality in qualities if quality is not None]
    confidences = [quality.confidence for quality in qualities]
    return Quality(None if not confidences or None in confidences else min(confidences),
                   ordered({flag for quality in qualities for flag in quality.flags}))


def words_of(text):
    """A text's words and punctuation marks, each a string (`\\w+`, or one
    mark), as loops are counted."""
    return _WORD.findall(text)


def _runs(words):
    """`(start, size, copies)` of every unit of 1 to `MAX_UNIT` words
    repeated two or more times in a row in `words` (case folded), from
    each start: for each size, one backward pass over where a word equals
    the word `size` before it."""
    folded = [word.casefold() for word in words]
    for size in range(1, MAX_UNIT + 1):
        same = 0  # words from here on, each equal to the one `size` after it
        for start in range(len(folded) - size - 1, -1, -1):
            same = same + 1 if folded[start] == folded[start + size] else 0
            if same >= size:
                yield start, size, 1 + same // size


def find_loop(words):
    """The `Loop` with the most copies in `words` (of those with as many,
    the earliest, then the shortest unit), or None where nothing repeats
    `LOOP_COPIES` times in a row."""
    runs = [run for run in _runs(words) if run[2] >= LOOP_COPIES]
    if not runs:
        return None
    start, size, copies = min(runs, key=lambda run: (-run[2], run[0], run[1]))
    return Loop(start, tuple(words[start:start + size]), copies)


def most_copies(text):
    """The most copies of any unit repeated in a row in `text` (1 where
    nothing repeats)."""
    return max((copies for _, _, copies in _runs(words_of(text))), default=1)


def loop_of(source, translation):
    """The loop that makes `translation` a `repetition` of `source` (a
    `Loop` with more copies than the source repeats anything), or None."""
    loop = find_loop(words_of(translation))
    if loop is None or loop.copies <= most_copies(source):
        return None
    return loop


def cut_before_loop(translation, loop):
    """`translation` cut after the first copy of its `loop`'s unit (what
    is given where every search repeats itself)."""
    spans = [match.span() for match in _WORD.finditer(translation)]
    return translation[:spans[loop.start + len(loop.unit) - 1][1]]


def ran_away(source_tokens, target_tokens, limit):
    """Whether an output of `target_tokens` (end token not counted) for a
    source of `source_tokens` ran away: it reached its output `limit`
    (end token counted, as the search counts it; None: no limit known) or
    is longer than `RUNAWAY_RATIO` x the source + `RUNAWAY_SLACK`."""
    return ((limit is not None and target_tokens + 1 >= limit)
            or target_tokens > RUNAWAY_RATIO * source_tokens + RUNAWAY_SLACK)


def _letters_only(text):
    """`text` without URLs and e-mail addresses, as its words of letters
    (case folded, accents kept)."""
    return [word for word in words_of(_ADDRESS.sub(" ", text).casefold())
            if any(unicodedata.category(c).startswith("L") for c in word)]


def is_copy(source, translation):
    """Whether `translation` gives `source` back as it is: the same words
    and numbers, case folded, punctuation and spacing aside, where the
    source has at least `COPY_WORDS` words of letters."""
    if len(_letters_only(source)) < COPY_WORDS:
        return False
    same = lambda text: [w for w in words_of(text.casefold()) if w[0].isalnum()]  # noqa: E731
    return same(source) == same(translation)


def text_flags(source, translation, source_tokens, target_tokens, limit=None,
               source_language=None, detect=None):
    """The flags read from a translation's text and token counts (every flag
    but `omission`, which needs the model's attention): `runaway` by
    `ran_away`, `repetition` by `loop_of`, `copy` by `is_copy`, and with
    `detect` (text -> a language code or None) and the `source_language`,
    `untranslated` where a translation of `COPY_WORDS` or more words of
    letters is detected as the source's language."""
    flags = set()
    if loop_of(source, translation) is not None:
        flags.add("repetition")
    if ran_away(source_tokens, target_tokens, limit):
        flags.add("runaway")
    if is_copy(source, translation):
        flags.add("copy")
    if (detect is not None and source_language is not None
            and len(_letters_only(translation)) >= COPY_WORDS
            and detect(translation) == source_language):
        flags.add("untranslated")
    return flags


def omitted_words(source, pieces, received, target_tokens):
    """The words of letters of `source` that its translation hardly attends
    to: `pieces` are the source's tokens (no end token), `received` the
    cross-attention each received, summed over the translation's
    `target_tokens` (end token counted; `decoding.quality.read_signals`);
    a word is omitted where its pieces received less than
    `OMISSION_ATTENTION` of their share of an even spread (the end token
    taking one share)."""
    fair = target_tokens / (len(pieces) + 1)
    words = {}
    for (start, end), attention in zip(piece_offsets(source, pieces), received):
        if start == end:
            continue
        for match in _WORD.finditer(source):
            if match.start() <= start < match.end():
                words.setdefault(match.span(), []).append(attention)
                break
    return [source[begin:end] for (begin, end), attentions in words.items()
            if any(unicodedata.category(c).startswith("L") for c in source[begin:end])
            and sum(attentions) < OMISSION_ATTENTION * fair * len(attentions)]


def ordered(flags):
    """`flags` (a set) in the order of `FLAGS`."""
    return tuple(flag for flag in FLAGS if flag in flags)


class Calibrator:
    """From the model's signals of a translation to the probability that it
    is good (`TARGET`), in two steps, with the digest of the model it was
    fitted for (`decoding.quality.model_digest`): a ridge regression
    predicts the translation's sentence chrF from its standardized signals
    (fitted on every sentence's chrF, which ranks translations far better
    than a logistic regression fitted on the few good ones), and a logistic
    curve (Platt scaling) turns the prediction into the probability,
    fitted on predictions made for each fold by a regression fitted on the
    others: what the regression predicts for sentences it was not fitted
    on.

    Written here rather than taken from scikit-learn (not a dependency of
    the package): a dozen signals and a few thousand sentences, fitted in
    closed form and by Newton's method in milliseconds, and applied by the
    SavedModel's graph as well as in Python.

    Attributes:
        signals: the signals' names, in the order of the weights.
        alpha: the length penalty of the `score` signal it reads (the
            translator's when it was fitted).
        mean, scale: each signal's standardization.
        weights, bias: the regression's (standardized signals -> chrF).
        slope, intercept: the logistic curve's (predicted chrF -> log-odds).
        model_digest: the model it belongs to.
        report: how it was fitted and how well it predicts (a dict: the
            sentences, their share of good ones, and the AUROC and expected
            calibration error of the confidence predicted for each fold).
    """

    PENALTY = 10.0
    """The ridge regression's L2 penalty on the standardized weights (the
    best of 0.1 to 50 on the Ding runs' validation sentences, cross-validated)."""

    FOLDS = 5
    MIN_SENTENCES = 10 * FOLDS
    """The fewest held-out sentences a calibrator is fitted on: ten a fold."""

    def __init__(self, signals, mean, scale, weights, bias, slope, intercept, model_digest,
                 alpha, report=None):
        self.signals = tuple(signals)
        self.alpha = float(alpha)
        self.mean, self.scale = np.asarray(mean, np.float64), np.asarray(scale, np.float64)
        self.weights, self.bias = np.asarray(weights, np.float64), float(bias)
        self.slope, self.intercept = float(slope), float(intercept)
        self.model_digest = model_digest
        self.report = dict(report or {})

    @classmethod
    def require_sentences(cls, count):
        """Refuses, in one line, to fit on `count` sentences where that is
        fewer than `MIN_SENTENCES`."""
        if count < cls.MIN_SENTENCES:
            raise ValueError(f"A calibrator is fitted on at least {cls.MIN_SENTENCES} held-out "
                             f"sentences; got {count}.")

    @classmethod
    def fit(cls, signals, features, chrf, model_digest, alpha):
        """Fits both steps to `features` `(sentences, len(signals))` and each
        sentence's chrF (see the class docstring), and reports how well the
        confidence predicts for the folds."""
        features, chrf = np.asarray(features, np.float64), np.asarray(chrf, np.float64)
        good = chrf >= TARGET
        cls.require_sentences(len(chrf))
        mean = features.mean(axis=0)
        scale = np.where(features.std(axis=0) > 1e-9, features.std(axis=0), 1.0)
        standardized = (features - mean) / scale
        predicted = np.zeros(len(chrf))
        order = np.random.default_rng(0).permutation(len(chrf))
        for fold in range(cls.FOLDS):
            held = order[fold::cls.FOLDS]
            kept = np.setdiff1d(order, held)
            weights, bias = _ridge(standardized[kept], chrf[kept], cls.PENALTY)
            predicted[held] = standardized[held] @ weights + bias
        slope, intercept = _logistic(predicted, good)
        confidence = 1.0 / (1.0 + np.exp(-(slope * predicted + intercept)))
        low, high = np.quantile(chrf, [0.25, 0.75])
        report = {"sentences": len(chrf), "good": round(float(good.mean()), 4),
                  "folds": cls.FOLDS,
                  "auroc": round(auroc(predicted[(chrf <= low) | (chrf >= high)],
                                       chrf[(chrf <= low) | (chrf >= high)] >= high), 4),
                  "calibration_error": round(calibration_error(confidence, good), 4)}
        weights, bias = _ridge(standardized, chrf, cls.PENALTY)
        return cls(signals, mean, scale, weights, bias, slope, intercept, model_digest, alpha,
                   report)

    def predicted_chrf(self, features):
        """The regression's sentence chrF for each row of `features`."""
        return ((np.asarray(features, np.float64) - self.mean) / self.scale) @ self.weights \
            + self.bias

    def confidence(self, features):
        """The probability of `TARGET` for each row of `features` `(n,
        len(signals))`: float64 `(n,)`."""
        return 1.0 / (1.0 + np.exp(-(self.slope * self.predicted_chrf(features)
                                     + self.intercept)))

    def to_json(self):
        return json.dumps({"target": f"sentence chrF >= {TARGET:g}",
                           "signals": list(self.signals), "alpha": self.alpha,
                           "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                           "weights": self.weights.tolist(), "bias": self.bias,
                           "slope": self.slope, "intercept": self.intercept,
                           "model_digest": self.model_digest, "report": self.report}, indent=1)

    def save(self, directory):
        """Writes `CALIBRATION_FILE` into `directory` (through a temporary
        file: a reader never sees half of it)."""
        path = os.path.join(directory, CALIBRATION_FILE)
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(self.to_json() + "\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, directory, model_digest=None, signals=None):
        """The calibrator of `directory`, or None where it has none.

        Raises:
            ValueError: in one line, where the file is damaged, or was
                fitted for another model than `model_digest` or on other
                `signals` than these (a folder whose weights changed since:
                run `keras-transformer calibrate` again).
        """
        path = os.path.join(os.fspath(directory), CALIBRATION_FILE)
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as file:
                kept = json.load(file)
            calibrator = cls(kept["signals"], kept["mean"], kept["scale"], kept["weights"],
                             kept["bias"], kept["slope"], kept["intercept"],
                             kept["model_digest"], kept["alpha"], kept.get("report"))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is damaged ({type(error).__name__}: {error}); run "
                             f"keras-transformer calibrate {directory} again.") from None
        numbers = calibrator.weights.tolist() + [calibrator.bias, calibrator.slope,
                                                  calibrator.intercept]
        if len({len(calibrator.signals), len(calibrator.mean), len(calibrator.scale),
                len(calibrator.weights)}) != 1 or not all(math.isfinite(v) for v in numbers):
            raise ValueError(f"{path} is damaged (its weights do not match its signals); run "
                             f"keras-transformer calibrate {directory} again.")
        if model_digest is not None and calibrator.model_digest != model_digest:
            raise ValueError(f"{path} was fitted for another model than {directory}'s (its "
                             f"weights changed since); run keras-transformer calibrate "
                             f"{directory} again.")
        if signals is not None and calibrator.signals != tuple(signals):
            raise ValueError(f"{path} reads other signals than this version computes; run "
                             f"keras-transformer calibrate {directory} again.")
        return calibrator


def _ridge(x, y, penalty):
    """`(weights, bias)` of the ridge regression of `y` on `x` (standardized
    columns), the bias not penalized."""
    design = np.hstack([x, np.ones((len(y), 1))])
    ridge = np.full(design.shape[1], penalty)
    ridge[-1] = 0.0
    theta = np.linalg.solve(design.T @ design + np.diag(ridge), design.T @ y)
    return theta[:-1], theta[-1]


def _logistic(x, good, penalty=1e-3):
    """`(slope, intercept)` of the logistic regression of `good` (bool) on
    `x`, by Newton's method, with a small L2 penalty on both (and half a
    pseudo-sentence of each kind): finite where every sentence is of one
    kind, or where the kinds are separated."""
    x, good = np.asarray(x, np.float64), np.asarray(good, np.float64)
    center, spread = x.mean(), max(x.std(), 1e-9)
    design = np.stack([(x - center) / spread, np.ones(len(x))], axis=1)
    design = np.vstack([design, [[0.0, 1.0], [0.0, 1.0]]])
    target, weight = np.append(good, [1.0, 0.0]), np.append(np.ones(len(x)), [0.5, 0.5])
    theta = np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-design @ theta))
        gradient = design.T @ (weight * (p - target)) + penalty * theta
        hessian = (design * (weight * p * (1 - p))[:, None]).T @ design + penalty * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return theta[0] / spread, theta[1] - theta[0] * center / spread


def auroc(scores, positive):
    """The area under the ROC curve of `scores` separating the `positive`
    rows (bool) from the others: the probability that a positive row scores
    higher than a negative one (ties count half)."""
    scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks of ties (1-based).
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    n_pos, n_neg = positive.sum(), (~positive).sum()
    if not n_pos or not n_neg:
        raise ValueError("AUROC needs positive and negative rows.")
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def calibration_error(confidence, good, bins=10):
    """The expected calibration error: over `bins` equal-width bins of
    `confidence`, the mean |share good - mean confidence|, weighted by each
    bin's share of the rows."""
    confidence, good = np.asarray(confidence, np.float64), np.asarray(good, np.float64)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    error = 0.0
    for b in range(bins):
        rows = which == b
        if rows.any():
            error += rows.mean() * abs(good[rows].mean() - confidence[rows].mean())
    return float(error)
