"""Translates sentences, one a line, from standard input or a file.

    echo "Guten Morgen!" | python examples/translate.py runs/ding

The script form of `keras-transformer translate` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/translate.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.translate import main

if __name__ == "__main__":
    cli.run(main)
