"""Trains a Transformer translation model.

    python examples/train.py --output runs/ding --preset small --dataset ding

The script form of `keras-transformer train` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/train.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.train import INTERRUPTED, main

if __name__ == "__main__":
    cli.run(main, INTERRUPTED)
