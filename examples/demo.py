"""The whole job in one command: train, evaluate, export, translate, plot.

    python examples/demo.py                      # Ding German-English, 15 minutes of training

The script form of `keras-transformer demo` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/demo.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.demo import INTERRUPTED, main

if __name__ == "__main__":
    cli.run(main, INTERRUPTED)
