"""BLEU and chrF with sacreBLEU, the scores papers and WMT report.

The paper's BLEU is tokenized BLEU on newstest2014; sacreBLEU scores detokenized
text with its own standard tokenisation, so its numbers are comparable across
papers and are about one point lower than the paper's for the same outputs.
Each score comes with sacreBLEU's signature, which says exactly how it was
computed.
"""

import dataclasses
import os

import sacrebleu

from keras_transformer.decoding import Translator
from keras_transformer.textfiles import clean_text, read_json


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


def is_full_sentence(text):
    """Four or more words ending in . ? or ! (the Ding dictionary mixes such
    sentences with single words and phrases)."""
    return len(text.split()) >= 4 and text.rstrip()[-1:] in (".", "?", "!")


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
    from keras_transformer import data

    path = os.path.join(run_dir, "run.json")
    if not os.path.isfile(path):
        raise ValueError(f"{path} does not exist, so the run's dataset is unknown (an imported "
                         "model has none); give --source-file and --reference-file.")
    try:
        options = read_json(path)["options"]
        return data.corpus(dataset or options["dataset"], options["source_language"],
                           options["target_language"], data_dir=options["data_dir"],
                           ding_path=options["ding_path"])
    except (KeyError, TypeError):
        raise ValueError(f"{path} does not hold a run's options; the file is damaged: give "
                         "--source-file and --reference-file.") from None


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


class BleuValidator:
    """Translates fixed validation sentences and scores them; give it to
    `Trainer.train(validators=[...])` to get `val_bleu` and `val_chrf` at the
    end of every epoch.

    Args:
        tokenizer: the run's tokenizer (see `keras_transformer.data.load_tokenizer`).
        sources: a list of strings.
        references: a list of strings, one per source.
        beam_size: 1 (greedy) keeps validation fast; the paper's final
            scores use 4.
        batch_tokens: see `Translator` (default: its default).
    """

    def __init__(self, tokenizer, sources, references, beam_size=1, batch_tokens=None):
        self.tokenizer = tokenizer
        self.sources = list(sources)
        self.references = list(references)
        self.beam_size = beam_size
        self.batch_tokens = batch_tokens
        self._translator = None

    def __call__(self, model):
        if self._translator is None or self._translator.model is not model:
            self._translator = Translator(model, self.tokenizer, beam_size=self.beam_size,
                                          batch_tokens=self.batch_tokens)
        hypotheses = self._translator.translate(self.sources)
        return score(hypotheses, self.references).as_dict(prefix="val_")
