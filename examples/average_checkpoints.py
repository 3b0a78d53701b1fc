"""Averages the last checkpoints of a training run (the paper averages the
last 5 for base models, the last 20 for big ones) into averaged.keras.

    python examples/average_checkpoints.py runs/ding [--last 5]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer.training.run import average_run  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a training output folder")
    parser.add_argument("--last", type=int, help="default: the run's average_checkpoints")
    parser.add_argument("--output-file", default="averaged.keras")
    args = parser.parse_args()
    average_run(args.run_dir, last=args.last, output_file=args.output_file)
