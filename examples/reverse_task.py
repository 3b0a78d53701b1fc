"""Checks that the model and the training loop learn: trains a small

    python examples/reverse_task.py [--steps 2000]

The script form of `keras-transformer reverse-task` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/reverse_task.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.reverse_task import main

if __name__ == "__main__":
    cli.run(main)
