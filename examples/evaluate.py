"""Scores a trained model with sacreBLEU (BLEU and chrF, with signatures) on a
dataset split or on a pair of files.

    python examples/evaluate.py runs/ding --split test --limit 1000
    python examples/evaluate.py runs/ding --split test --only-sentences
    python examples/evaluate.py runs/ding --source-file src.de --reference-file ref.en

Decodes with the paper's settings by default (averaged checkpoints, beam 4,
alpha 0.6, input length + 50).
"""

import argparse
import itertools
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer import data  # noqa: E402
from keras_transformer.decoding import Translator  # noqa: E402
from keras_transformer.evaluation import evaluate_pairs  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--split", default="test", choices=data.corpora.SPLITS)
    parser.add_argument("--dataset", help="default: the run's")
    parser.add_argument("--source-file")
    parser.add_argument("--reference-file")
    parser.add_argument("--limit", type=int, help="score the first N pairs")
    parser.add_argument("--only-sentences", action="store_true",
                        help="keep sources of 4+ words ending in . ? or !")
    parser.add_argument("--model-file")
    parser.add_argument("--beam-size", type=int)
    parser.add_argument("--alpha", type=float)
    parser.add_argument("--show", type=int, default=5, help="print this many sample translations")
    args = parser.parse_args()

    translator = Translator.from_directory(args.run_dir, model_file=args.model_file,
                                           beam_size=args.beam_size, alpha=args.alpha)
    if args.source_file or args.reference_file:
        if not (args.source_file and args.reference_file):
            parser.error("--source-file and --reference-file go together")
        with open(args.source_file, encoding="utf-8") as s, open(args.reference_file, encoding="utf-8") as r:
            pairs = list(zip((l.rstrip("\n") for l in s), (l.rstrip("\n") for l in r)))
    else:
        with open(os.path.join(args.run_dir, "run.json")) as file:
            options = json.load(file)["options"]
        corpus = data.corpus(args.dataset or options["dataset"], options["source_language"],
                             options["target_language"], data_dir=options["data_dir"],
                             ding_path=options["ding_path"])
        pairs = corpus.pairs(args.split).as_numpy_iterator()
    scores, rows = evaluate_pairs(translator, pairs, limit=args.limit,
                                  only_sentences=args.only_sentences, progress=True)
    print(scores)
    for source, reference, hypothesis in itertools.islice(rows, args.show):
        print(f"\n  source:     {source}\n  reference:  {reference}\n  hypothesis: {hypothesis}")


if __name__ == "__main__":
    main()
