"""Translates sentences, one a line, from standard input or a file.

    echo "Guten Morgen!" | keras-transformer translate runs/ding
    keras-transformer translate runs/ding --input de.txt --output en.txt --beam-size 4

Defaults are the model's, the paper's unless its run chose otherwise (the
demo chooses the length penalty): beam 4, length penalty 0.6, output up to
the input length + 50 tokens. --sampling-topk K draws each translation from the
model's distribution instead (the K most likely tokens, 0 for all), as
back-translation wants it. Every input line gives one output line: empty and blank
lines give empty lines; bytes that are not UTF-8 are replaced, and lines
longer than the model accepts are cut, each with a warning naming the lines
(--overlong error refuses them instead, before translating). --output is
written whole, only when every line is translated, and never replaces a
file without --overwrite.

Files of any size: the input is read --window lines at a time, each window
sorted by length, cut into batches of --batch-tokens source tokens and
translated, and its lines written in their order, so that memory does not
grow with the file. A progress line (lines, tokens per second, time left)
shows on standard error when it is a terminal.

--runtime translates an export (keras-transformer export) with one of its
formats, as serve does: saved_model, ctranslate2, onnx or litert
(keras_transformer/runtimes says what each needs).

    keras-transformer translate exports/ding --runtime litert --input de.txt
"""

import argparse
import itertools

from keras_transformer import cli, runtimes, textfiles
from keras_transformer.batch_defaults import DEFAULT_WINDOW, share_cores
from keras_transformer.names import OVERLONG, RUNTIMES

cli.use_tensorflow_backend()


def windows(lines, size):
    """`(start, list)`: the lines in lists of `size`, with the index of the first."""
    lines = iter(lines)
    for start in itertools.count(0, size):
        window = list(itertools.islice(lines, size))
        if not window:
            return
        yield start, window


def refuse_overlong_lines(translator, source, lines, window):
    """--overlong error: every line is measured before any is translated;
    an error names the lines longer than the model accepts."""
    too_long = [start + i + 1 for start, chunk in windows(lines, window)
                for i in translator.too_long(chunk)]
    cli.overlong_lines(source, too_long, translator.model.config.max_source_tokens, refuse=True)


def n_best_line(hypotheses):
    """One output line of `--n-best`: each translation and its score, tab
    separated."""
    return "\t".join(f"{text}\t{score:.4f}" for text, score in hypotheses)


def translate_with_runtime(args, source, lines):
    """Translates the lines with an export's runtime (`--runtime`), window
    by window as the Translator does (`runtimes.translate_sorted`)."""
    decoding = runtimes.Decoding(args.beam_size, args.alpha, args.decode_margin,
                                 args.sampling_topk, args.sampling_temperature, args.seed)
    runtime = runtimes.open_runtime(args.run_dir, args.runtime, decoding, args.threads)
    limit = runtime.max_source_tokens
    if args.overlong == "error":
        lines = list(lines)
        cli.overlong_lines(source.name, [i + 1 for i, n in enumerate(runtime.source_lengths(lines))
                                         if n > limit], limit, refuse=True)
    progress = cli.Progress(textfiles.count_lines(args.input) if args.input else None)
    with textfiles.line_writer(args.output) as write:
        for start, window in windows(lines, args.window):
            for note in source.new_warnings():
                cli.warn(note)
            cli.overlong_lines(source.name, [start + i + 1 for i, n in enumerate(
                runtime.source_lengths(window)) if n > limit], limit, refuse=False)
            results = runtimes.translate_sorted(runtime, window, args.n_best or 1,
                                                args.batch_tokens, args.batch_size,
                                                on_batch=progress.update)
            if args.n_best:
                write([n_best_line(row) for row in results])
            else:
                write([row[0][0] for row in results])
    progress.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder (or an export, with --runtime)")
    parser.add_argument("--input", help="the sentences, one a line (default: standard input)")
    parser.add_argument("--output", help="the translations, one a line (default: standard "
                                            "output)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--model-file", help="the weights in the run folder (default: "
                                                "averaged.keras, else model.keras)")
    cli.add_search_arguments(parser)
    parser.add_argument("--n-best", type=cli.positive_int,
                        help="print the n best, TAB-separated with scores (default: the best "
                             "only, without scores)")
    parser.add_argument("--batch-tokens", type=cli.positive_int,
                        help="source tokens per batch, padding included (default: 2048 for "
                             "beam search, 4096 for greedy)")
    parser.add_argument("--batch-size", type=cli.positive_int,
                        help="at most this many lines per batch (default: no limit)")
    parser.add_argument("--window", type=cli.positive_int, default=DEFAULT_WINDOW,
                        help="lines read ahead and sorted together")
    cli.add_precision_argument(parser)
    parser.add_argument("--overlong", choices=OVERLONG, default="truncate",
                        help="lines longer than the model accepts: cut them (with a warning "
                             "naming them) or stop before translating")
    cli.add_sampling_arguments(parser)
    parser.add_argument("--runtime", choices=RUNTIMES,
                        help="translate an export with this runtime (default: keras, the "
                             "Translator on the folder's .keras model)")
    parser.add_argument("--threads", type=cli.positive_int,
                        help="CPU threads of a CTranslate2, ONNX or LiteRT model (default: the "
                             "runtime's own choice)")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    cli.check_sampling(parser, args)
    if args.sampling_topk is not None and args.n_best:
        parser.error("--sampling-topk draws one translation; leave out --n-best")
    by_runtime = args.runtime not in (None, "keras")
    if by_runtime and (args.model_file or args.precision):
        parser.error("--model-file and --precision are the keras runtime's; leave them out with "
                     f"--runtime {args.runtime}")
    if not by_runtime and args.threads:
        parser.error("--threads is for the ctranslate2, onnx and litert runtimes (TensorFlow "
                     "takes TF_NUM_INTRAOP_THREADS); give --runtime or leave it out")

    # Everything that can be wrong with the files is found before the model
    # is loaded.
    if args.output:
        textfiles.check_output(args.output, args.overwrite)
    source = textfiles.LineStream(args.input)
    lines = iter(source)
    first = next(lines, None)
    if first is None:
        cli.warn(f"{source.name} is empty; there is nothing to translate")
        textfiles.write_lines([], args.output)
        return
    lines = itertools.chain([first], lines)

    if by_runtime:
        translate_with_runtime(args, source, lines)
        return
    share_cores()
    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.decoding import Sampling, Translator

    sampling = None if args.sampling_topk is None else Sampling(
        args.sampling_topk, args.sampling_temperature, args.seed)
    translator = Translator.from_directory(
        args.run_dir, model_file=args.model_file, beam_size=args.beam_size, alpha=args.alpha,
        decode_margin=args.decode_margin, batch_tokens=args.batch_tokens,
        batch_size=args.batch_size, precision=args.precision, overlong=args.overlong,
        sampling=sampling)
    if args.overlong == "error":
        if args.input is None:  # standard input can be read only once
            lines = list(lines)
        refuse_overlong_lines(translator, source.name,
                              lines if args.input is None else textfiles.LineStream(args.input),
                              args.window)
    progress = cli.Progress(textfiles.count_lines(args.input) if args.input else None)
    with textfiles.line_writer(args.output) as write:
        for start, window in windows(lines, args.window):
            for note in source.new_warnings():
                cli.warn(note)
            results = translator.translate(
                window, n_best=args.n_best, on_batch=progress.update,
                on_overlong=lambda indexes, limit, start=start: cli.overlong_lines(
                    source.name, [start + i + 1 for i in indexes], limit, refuse=False))
            if args.n_best:
                results = [n_best_line(row) for row in results]
            write(results)
    progress.close()

