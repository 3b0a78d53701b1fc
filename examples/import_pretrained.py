"""Imports a pretrained translation model into a run folder.

    python examples/import_pretrained.py hf://Helsinki-NLP/opus-mt-de-en --output runs/opus-de-en

The script form of `keras-transformer import` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/import_pretrained.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.import_pretrained import main

if __name__ == "__main__":
    cli.run(main)
