"""Fits how far to trust a run's translations: the calibrator that turns the
model's own signals of each translation into its confidence (the
probability that its sentence chrF is at least 45; docs/trust.md), on
held-out pairs, saved in the run folder as calibration.json.

    keras-transformer calibrate runs/ding                 # the run's validation sentences
    keras-transformer calibrate runs/opus-mt-de-en --source-file dev.de --reference-file dev.en

`train` and `demo` fit one at their end; run this for a run trained before,
an imported model (with files of held-out pairs), or after the weights
changed (`average`, `--model-file`). The sources are translated with the
run's settings (its beam, length penalty and guard), as `translate` does.
"""

import argparse
import os

from keras_transformer import cli

cli.use_tensorflow_backend()

LIMIT = 2000
"""Pairs fitted on, at most, by default."""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder, an imported model's or an "
                                        "export's")
    parser.add_argument("--split", default="validation", help="the run's held-out split")
    parser.add_argument("--all-pairs", action="store_true",
                        help="fit on every pair of the split, not only its whole sentences "
                             "(sources of 4+ words ending in . ? or !)")
    parser.add_argument("--source-file", help="held-out sources, one a line (an imported "
                                              "model's, or your own)")
    parser.add_argument("--reference-file", help="their reference translations, line by line")
    parser.add_argument("--limit", type=cli.positive_int, default=LIMIT,
                        help="fit on at most this many pairs")
    parser.add_argument("--model-file", help="the weights in the folder (default: averaged.keras, "
                                             "else model.keras)")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    if bool(args.source_file) != bool(args.reference_file):
        parser.error("--source-file and --reference-file go together")
    if not os.path.isdir(args.run_dir):
        raise ValueError(f"{args.run_dir} is not a folder; give a run, import or export folder.")
    pairs = None
    if args.source_file:
        from keras_transformer.commands.evaluate import read_parallel_files

        _, pairs = read_parallel_files(args.source_file, args.reference_file)
        pairs = pairs[:args.limit]

    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer import data, trust
    from keras_transformer.evaluation import calibrate_run, run_corpus, select_pairs

    if pairs is None:
        if args.split not in data.corpora.SPLITS:
            parser.error(f"--split must be one of {', '.join(data.corpora.SPLITS)}")
        pairs = select_pairs(run_corpus(args.run_dir).pairs(args.split).as_numpy_iterator(),
                             limit=args.limit, only_sentences=not args.all_pairs)
    print(f"Translating {len(pairs)} held-out pairs and reading the model's signals ...",
          flush=True)
    calibrator = calibrate_run(args.run_dir, pairs, args.model_file)
    report = calibrator.report
    print(f"{report['good']:.1%} of the {report['sentences']} translations are good (sentence "
          f"chrF >= {trust.TARGET:g}). Confidence predicted for each fifth by a calibrator fitted "
          f"on the rest: AUROC {report['auroc']:.3f}, expected calibration error "
          f"{report['calibration_error']:.3f}.\nWrote "
          f"{os.path.join(args.run_dir, trust.CALIBRATION_FILE)}.")
