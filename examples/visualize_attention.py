"""Draws the attention weights of a trained model for a sentence, as in the
paper's appendix: encoder self-attention, decoder self-attention and
encoder-decoder attention of one layer, a column per head.

    python examples/visualize_attention.py runs/ding "Ich habe keine Zeit." \\
        --layer 3 --heads 0 1 2 3 --output attention.png

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
    parser.add_argument("--layer", type=int, default=-1, help="1-based layer, or -1 for the last")
    parser.add_argument("--heads", type=int, nargs="+", help="0-based heads (default: up to 8)")
    parser.add_argument("--output", default="attention.png")
    parser.add_argument("--model-file")
    args = parser.parse_args()
    translator = Translator.from_directory(args.run_dir, model_file=args.model_file)
    translation = args.translation or translator.translate([args.sentence])[0]
    layer = args.layer - 1 if args.layer > 0 else args.layer
    path = plot_attention(translator.model, translator.tokenizer, args.sentence, translation,
                          args.output, layer=layer, heads=args.heads)
    print(f"{args.sentence} -> {translation}\nWrote {path}")


if __name__ == "__main__":
    main()
