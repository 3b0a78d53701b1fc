"""Scores a trained model with sacreBLEU (BLEU and chrF, with signatures) on a
dataset split or on a pair of files.

    keras-transformer evaluate runs/ding --split test --limit 1000
    keras-transformer evaluate runs/ding --split test --only-sentences
    keras-transformer evaluate runs/ding --source-file src.de --reference-file ref.en

Decodes with the model's settings by default (averaged checkpoints; the
paper's beam 4, alpha 0.6 unless the run chose another, as the demo does,
and input length + 50). The two files must have the same number of
lines (line i of one translates line i of the other): otherwise it stops
before translating. They are read like translate.py's input, with the same
warnings, and source lines longer than the model accepts are cut with a
warning naming them (--overlong error refuses them).
"""

import argparse
import itertools
import warnings

from keras_transformer import cli, textfiles
from keras_transformer.batch_defaults import decoding_kernels, share_cores
from keras_transformer.names import OVERLONG

cli.use_tensorflow_backend()


def read_parallel_files(source_file, reference_file):
    """The pairs of two parallel files, refused before any work when their
    line counts differ or they are empty."""
    sources, references = textfiles.read_lines(source_file), textfiles.read_lines(reference_file)
    for note in sources.warnings() + references.warnings():
        cli.warn(note)
    if len(sources) != len(references):
        raise ValueError(
            f"{source_file} has {len(sources)} lines but {reference_file} has {len(references)}; "
            "line i of the references must translate line i of the sources: give files of "
            "equal length.")
    if not sources.lines:
        raise ValueError(f"{source_file} and {reference_file} are empty; nothing to score.")
    return sources, list(zip(sources.lines, references.lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--split", default="test", help="train, validation or test")
    parser.add_argument("--dataset", help="default: the run's")
    parser.add_argument("--source-file")
    parser.add_argument("--reference-file")
    parser.add_argument("--limit", type=cli.positive_int, help="score the first N pairs")
    parser.add_argument("--only-sentences", action="store_true",
                        help="keep sources of 4+ words ending in . ? or !")
    parser.add_argument("--model-file")
    parser.add_argument("--beam-size", type=cli.positive_int)
    parser.add_argument("--alpha", type=cli.non_negative_float)
    parser.add_argument("--batch-tokens", type=cli.positive_int,
                        help="source tokens per batch, padding included (default: 2048 for "
                             "beam search, 4096 for greedy)")
    cli.add_precision_argument(parser)
    parser.add_argument("--overlong", choices=OVERLONG, default="truncate",
                        help="source lines longer than the model accepts (files only)")
    parser.add_argument("--show", type=cli.non_negative_int, default=5,
                        help="print this many sample translations")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()

    sources = lines = None
    if args.source_file or args.reference_file:
        if not (args.source_file and args.reference_file):
            parser.error("--source-file and --reference-file go together")
        sources, pairs = read_parallel_files(args.source_file, args.reference_file)

    share_cores()
    decoding_kernels(args.precision)
    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer import data
    from keras_transformer.decoding import Translator
    from keras_transformer.evaluation import evaluate_pairs, run_corpus

    if args.split not in data.corpora.SPLITS:
        parser.error(f"--split must be one of {', '.join(data.corpora.SPLITS)}, not {args.split!r}")

    if sources is not None:  # the line numbers of the pairs to score, for warnings
        lines = [number for number, (source, _) in enumerate(pairs, start=1)
                 if not args.only_sentences or data.is_full_sentence(source)][:args.limit]
        pairs = [pairs[number - 1] for number in lines]

    translator = Translator.from_directory(args.run_dir, model_file=args.model_file,
                                           beam_size=args.beam_size, alpha=args.alpha,
                                           batch_tokens=args.batch_tokens,
                                           precision=args.precision)
    with warnings.catch_warnings():
        if sources is not None:
            too_long = translator.too_long([source for source, _ in pairs])
            cli.overlong_lines(sources.name, [lines[i] for i in too_long],
                               translator.model.config.max_source_tokens, args.overlong == "error")
            warnings.simplefilter("ignore", textfiles.TruncationWarning)  # named by line
            scores, rows = evaluate_pairs(translator, pairs, progress=True)
        else:
            corpus = run_corpus(args.run_dir, args.dataset)
            pairs = corpus.pairs(args.split).as_numpy_iterator()
            scores, rows = evaluate_pairs(translator, pairs, limit=args.limit,
                                          only_sentences=args.only_sentences, progress=True)
    print(scores)
    for source, reference, hypothesis in itertools.islice(rows, args.show):
        print(f"\n  source:     {source}\n  reference:  {reference}\n  hypothesis: {hypothesis}")

