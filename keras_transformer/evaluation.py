"""BLEU and chrF with sacreBLEU, the scores papers and WMT report.

The paper's BLEU is tokenized BLEU on newstest2014; sacreBLEU scores detokenized
text with its own standard tokenisation, so its numbers are comparable across
papers and are about one point lower than the paper's for the same outputs.
Each score comes with sacreBLEU's signature, which says exactly how it was
computed.
"""

import dataclasses

import numpy as np
import sacrebleu

from keras_transformer import data, run_folder, trust
from keras_transformer.data.sentences import is_full_sentence
from keras_transformer.decoding import Translator, quality
from keras_transformer.names import LENGTH_PENALTIES
from keras_transformer.textfiles import clean_text


@dataclasses.dataclass(frozen=True)
class Scores:
    """Corpus-level BLEU and chrF of some translations."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int

    def __str__(self):
        return (f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.sentences} sentences)\n"
                f"  {self.bleu_signature}\n  {self.chrf_signature}")

    def as_dict(self, prefix=""):
        return {f"{prefix}bleu": self.bleu, f"{prefix}chrf": self.chrf}


def score(hypotheses, references):
    """BLEU and chrF of `hypotheses` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    if not hypotheses:
        raise ValueError("Nothing to score.")
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return Scores(bleu_score.score, chrf_score.score, str(bleu.get_signature()),
                  str(chrf.get_signature()), len(hypotheses))


def select_pairs(pairs, limit=None, only_sentences=False):
    """The `(source, reference)` pairs to score, as cleaned strings.

    Args:
        pairs: an iterable of `(source, reference)` (str or bytes; bytes
            that are not UTF-8 become U+FFFD).
        limit: keep at most this many pairs (the first ones).
        only_sentences: keep only pairs whose source `is_full_sentence`.
    """
    kept = []
    for source, reference in pairs:
        source, reference = clean_text(source), clean_text(reference)
        if only_sentences and not is_full_sentence(source):
            continue
        kept.append((source, reference))
        if limit and len(kept) >= limit:
            break
    return kept


def run_corpus(run_dir, dataset=None):
    """The `data.Corpus` a training run was trained on (or `dataset` in its
    languages), from its run.json: where its held-out pairs come from."""
    options = run_folder.run_options(run_dir)
    if options is None:
        raise ValueError(f"{run_dir} holds no run.json, so the run's dataset is unknown (an "
                         "imported model has none); give --source-file and --reference-file.")
    try:
        return data.corpus(dataset or options["dataset"], options["source_language"],
                           options["target_language"], data_dir=options["data_dir"],
                           ding_path=options["ding_path"])
    except KeyError:
        raise ValueError(f"{run_dir}'s run.json does not hold a run's options; the file is "
                         "damaged: give --source-file and --reference-file.") from None


def evaluate_pairs(translator, pairs, limit=None, only_sentences=False, progress=False):
    """Translates `(source, reference)` string pairs and scores them.

    Args:
        translator: a `Translator`.
        pairs: see `select_pairs`.
        limit: see `select_pairs`.
        only_sentences: see `select_pairs`.

    Returns:
        `(Scores, rows)`, rows being `(source, reference, hypothesis)`.
    """
    kept = select_pairs(pairs, limit, only_sentences)
    hypotheses = translator.translate([s for s, _ in kept], progress=progress)
    rows = [(s, r, h) for (s, r), h in zip(kept, hypotheses)]
    return score(hypotheses, [r for _, r in kept]), rows


def choose_length_penalty(translator, pairs, alphas=LENGTH_PENALTIES):
    """The alpha of `alphas` whose translations of `pairs` by `translator`
    (a `decoding.Translator`, whose `alpha` is set to each in turn and left
    at the best) score the highest chrF (the first of them on a tie), and
    `{alpha: Scores}`.

    The paper chose its alpha and beam size "after experimentation on the
    development set"; `pairs` should be held-out pairs apart from those
    the final scores are reported on. A model trained for minutes on a
    dictionary ends its sentences too early: the demo's translations of
    test sentences were about 0.69 of the references' length with 0.6 and
    0.77 with 1.5, which added 1.4-1.7 chrF in five runs.
    """
    kept = select_pairs(pairs)
    if not kept:
        raise ValueError("No held-out pairs to choose the length penalty on.")
    if not alphas or min(alphas) < 0:
        raise ValueError(f"alphas must be one or more values >= 0; got {alphas}.")
    scores = {}
    for alpha in alphas:
        translator.alpha = alpha
        scores[alpha], _ = evaluate_pairs(translator, kept)
    translator.alpha = max(alphas, key=lambda alpha: scores[alpha].chrf)
    return translator.alpha, scores


def fit_calibrator(translator, pairs):
    """A `trust.Calibrator` for `translator`'s model (float32), fitted on
    `(source, reference)` string pairs: each source translated as the
    translator translates (its guard included), its signals read
    (`Translator.assess`; the translator has no calibrator of its own, so
    that they are read with its own alpha), and its sentence chrF against
    its reference (`trust.Calibrator.fit`).

    Raises:
        ValueError: in one line, for a model that is not float32 or too few
            pairs (before anything is translated).
    """
    if translator.model.compute_dtype != "float32":
        raise ValueError("A calibrator is fitted on the float32 model; this translator computes "
                         f"in {translator.model.compute_dtype}.")
    pairs = [(source, reference) for source, reference in pairs if source.strip()]
    trust.Calibrator.require_sentences(len(pairs))  # before translating them for nothing
    sources = [source for source, _ in pairs]
    translations = translator.translate(sources)
    found = translator.assess(sources, translations)
    features = np.array([[q.signals[name] for name in quality.SIGNALS] for q in found])
    chrf = [sacrebleu.sentence_chrf(translation, [reference]).score
            for translation, (_, reference) in zip(translations, pairs)]
    return trust.Calibrator.fit(quality.SIGNALS, features, chrf,
                                quality.model_digest(translator.model), translator.alpha)


def calibrate_run(run_dir, pairs, model_file=None):
    """Fits the calibrator of the model of a run or export folder (its
    `model_file`, default `run_folder.load_model`'s) on `(source, reference)`
    string pairs, translating with the folder's decoding settings, and
    saves it there (`trust.CALIBRATION_FILE`); returns it."""
    translator = Translator.from_directory(run_dir, model_file=model_file, calibrator=None)
    calibrator = fit_calibrator(translator, pairs)
    calibrator.save(run_dir)
    return calibrator
