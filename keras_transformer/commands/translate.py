"""Translates sentences, one a line, from standard input or a file.

    echo "Guten Morgen!" | python examples/translate.py runs/ding
    python examples/translate.py runs/ding --input de.txt --output en.txt --beam-size 4

Defaults are the paper's: beam 4, length penalty 0.6, output up to the input
length + 50 tokens. Every input line gives one output line: empty and blank
lines give empty lines; bytes that are not UTF-8 are replaced, and lines
longer than the model accepts are cut, each with a warning naming the lines
(--overlong error refuses them instead). --output is written whole, only
when every line is translated, and never replaces a file without
--overwrite.
"""

import argparse
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer import cli, textfiles  # noqa: E402

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--input", help="the sentences, one a line (default: standard input)")
    parser.add_argument("--output", help="the translations, one a line (default: standard "
                                            "output)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--model-file", help="the weights in the run folder (default: "
                                                "averaged.keras, else model.keras)")
    parser.add_argument("--beam-size", type=cli.positive_int,
                        help="beam width; 1 is greedy search (default: the model's, 4)")
    parser.add_argument("--alpha", type=cli.non_negative_float,
                        help="length penalty (default: the model's, 0.6)")
    parser.add_argument("--decode-margin", type=cli.non_negative_int,
                        help="translations end within the input's length + this many tokens "
                             "(default: the model's, 50)")
    parser.add_argument("--n-best", type=cli.positive_int,
                        help="print the n best, TAB-separated with scores (default: the best "
                             "only, without scores)")
    parser.add_argument("--batch-size", type=cli.positive_int, default=64,
                        help="sentences translated together")
    cli.add_precision_argument(parser)
    parser.add_argument("--overlong", choices=("truncate", "error"), default="truncate",
                        help="lines longer than the model accepts: cut them (with a warning "
                             "naming them) or stop before translating")
    args = parser.parse_args()

    # Everything that can be wrong with the files is found before the model
    # is loaded.
    if args.output:
        textfiles.check_output(args.output, args.overwrite)
    source = textfiles.read_lines(args.input)
    for note in source.warnings():
        cli.warn(note)
    if not source.lines:
        cli.warn(f"{source.name} is empty; there is nothing to translate")
        textfiles.write_lines([], args.output)
        return

    from keras_transformer.decoding import Translator
    from keras_transformer.decoding.translator import max_source_tokens

    translator = Translator.from_directory(
        args.run_dir, model_file=args.model_file, beam_size=args.beam_size, alpha=args.alpha,
        decode_margin=args.decode_margin, batch_size=args.batch_size, precision=args.precision)
    cli.overlong_lines(source.name, [i + 1 for i in translator.too_long(source.lines)],
                       max_source_tokens(translator.model), refuse=args.overlong == "error")
    with warnings.catch_warnings():  # named above, by line
        warnings.simplefilter("ignore", textfiles.TruncationWarning)
        results = translator.translate(  # the progress bar needs a free standard output
            source.lines, n_best=args.n_best, progress=bool(args.output) and len(source) > 100)
    if args.n_best:
        results = ["\t".join(f"{text}\t{score:.4f}" for text, score in row) for row in results]
    textfiles.write_lines(results, args.output)

