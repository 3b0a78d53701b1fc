"""Draws the attention weights of a trained model for a sentence, as in the
paper's appendix: encoder self-attention, decoder self-attention and
encoder-decoder attention of one layer, a column per head.

    keras-transformer visualize runs/ding "Ich habe keine Zeit." \\
        --layer 3 --heads 1 2 3 4 --output attention.png

The translation is the model's own (beam search), unless --translation
gives one to attend over. An existing --output is only replaced with
--overwrite, and only once the new picture is drawn.
"""

import argparse

from keras_transformer import cli, textfiles

cli.use_tensorflow_backend()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("sentence")
    parser.add_argument("--translation", help="default: the model's translation")
    parser.add_argument("--layer", type=int, default=-1,
                        help="layer, counted from 1 (-1: the last), as in the plot's titles")
    parser.add_argument("--heads", type=cli.positive_int, nargs="+",
                        help="heads, counted from 1 (default: the first 8)")
    parser.add_argument("--output", default="attention.png")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--model-file")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    if args.layer == 0 or args.layer < -1:
        parser.error(f"--layer counts from 1 (or is -1 for the last), not {args.layer}")
    textfiles.check_output(args.output, args.overwrite)
    sentence = textfiles.clean_text(args.sentence)
    if sentence != args.sentence:
        cli.warn("the sentence had bytes that are not UTF-8 (or NUL); they were replaced")
    if not sentence.strip():
        parser.error("the sentence is empty; give one to translate")

    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.decoding import Translator
    from keras_transformer.plots import plot_attention

    translator = Translator.from_directory(args.run_dir, model_file=args.model_file)
    config = translator.model.config
    layers = max(config.num_encoder_layers, config.num_decoder_layers)
    if args.layer > layers:
        parser.error(f"--layer {args.layer}: the model has {layers} layers")
    if args.heads and max(args.heads) > config.num_heads:
        parser.error(f"--heads: the model has {config.num_heads} heads, got {args.heads}")
    if args.translation:
        translation = textfiles.clean_text(args.translation)
    else:
        translation = translator.translate([sentence])[0]
    layer = args.layer - 1 if args.layer > 0 else args.layer
    heads = [head - 1 for head in args.heads] if args.heads else None
    with textfiles.replace_path(args.output) as partial:
        plot_attention(translator.model, translator.tokenizer, sentence, translation, partial,
                       layer=layer, heads=heads)
    print(f"{sentence} -> {translation}\nWrote {args.output}")

