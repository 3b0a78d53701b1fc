"""Averages the last checkpoints of a training run (the paper averages the
last 5 for base models, the last 20 for big ones) into averaged.keras.

    keras-transformer average runs/ding [--last 5]

Replacing the run's averaged.keras is what this command is for: the new
file is written beside it and moved into place only when it is complete,
so Ctrl-C or an error keeps the one that was there.
"""

import argparse
import os

from keras_transformer import cli, run_folder

cli.use_tensorflow_backend()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--last", type=cli.positive_int,
                        help="default: the run's average_checkpoints")
    parser.add_argument("--output-file", default=run_folder.AVERAGED_FILE,
                        help="a .keras file name inside the run folder")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    if not args.output_file.endswith(".keras"):
        parser.error(f"--output-file must end in .keras, not {args.output_file!r}")
    if not os.path.isdir(args.run_dir):
        raise ValueError(f"{args.run_dir} is not a folder; give a training run's output folder.")

    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.training.run import average_run

    average_run(args.run_dir, last=args.last, output_file=args.output_file)

