"""Translates sentences, one a line, from standard input or a file.

    echo "Guten Morgen!" | python examples/translate.py runs/ding
    python examples/translate.py runs/ding --input de.txt --output en.txt --beam-size 4

Defaults are the paper's: beam 4, length penalty 0.6, output up to the input
length + 50 tokens. Empty lines translate to empty lines; lines longer than
the model accepts are cut (or, with --overlong error, refused).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer.decoding import Translator  # noqa: E402
from keras_transformer.decoding.translator import OVERLONG  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--input", help="default: standard input")
    parser.add_argument("--output", help="default: standard output")
    parser.add_argument("--model-file", help="default: averaged.keras, else model.keras")
    parser.add_argument("--beam-size", type=int, help="default: the model's (4); 1 is greedy")
    parser.add_argument("--alpha", type=float, help="length penalty (default: the model's, 0.6)")
    parser.add_argument("--decode-margin", type=int, help="default: the model's (50)")
    parser.add_argument("--n-best", type=int, help="print the n best, TAB-separated with scores")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--overlong", choices=OVERLONG, default="truncate")
    args = parser.parse_args()

    translator = Translator.from_directory(
        args.run_dir, model_file=args.model_file, beam_size=args.beam_size, alpha=args.alpha,
        decode_margin=args.decode_margin, batch_size=args.batch_size, overlong=args.overlong)
    source = open(args.input, encoding="utf-8") if args.input else sys.stdin
    with source:
        sentences = [line.rstrip("\n") for line in source]
    results = translator.translate(sentences, n_best=args.n_best, progress=len(sentences) > 100)
    target = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    with target:
        for result in results:
            if args.n_best:
                result = "\t".join(f"{text}\t{score:.4f}" for text, score in result)
            target.write(result + "\n")


if __name__ == "__main__":
    main()
