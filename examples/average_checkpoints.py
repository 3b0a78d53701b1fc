"""Averages the last checkpoints of a training run (the paper averages the

    python examples/average_checkpoints.py runs/ding [--last 5]

The script form of `keras-transformer average` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/average.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.average import main

if __name__ == "__main__":
    cli.run(main)
