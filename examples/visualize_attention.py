"""Draws the attention weights of a trained model for a sentence, as in the
paper's appendix: encoder self-attention, decoder self-attention and
encoder-decoder attention of one layer, a column per head.

    python examples/visualize_attention.py runs/ding "Ich habe keine Zeit." \\
        --layer 3 --heads 1 2 3 4 --output attention.png

The translation is the model's own (beam search), unless --translation
gives one to attend over.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer.decoding import Translator  # noqa: E402
from keras_transformer.plots import plot_attention  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("sentence")
    parser.add_argument("--translation", help="default: the model's translation")
    parser.add_argument("--layer", type=int, default=-1,
                        help="layer, counted from 1 (-1: the last), as in the plot's titles")
    parser.add_argument("--heads", type=int, nargs="+",
                        help="heads, counted from 1 (default: the first 8)")
    parser.add_argument("--output", default="attention.png")
    parser.add_argument("--model-file")
    args = parser.parse_args()
    if args.layer == 0 or args.layer < -1:
        parser.error(f"--layer counts from 1 (or is -1 for the last), not {args.layer}")
    if args.heads and min(args.heads) < 1:
        parser.error(f"--heads count from 1, got {args.heads}")
    translator = Translator.from_directory(args.run_dir, model_file=args.model_file)
    translation = args.translation or translator.translate([args.sentence])[0]
    layer = args.layer - 1 if args.layer > 0 else args.layer
    heads = [head - 1 for head in args.heads] if args.heads else None
    path = plot_attention(translator.model, translator.tokenizer, args.sentence, translation,
                          args.output, layer=layer, heads=heads)
    print(f"{args.sentence} -> {translation}\nWrote {path}")


if __name__ == "__main__":
    main()
