"""Exports a trained run to serving formats and checks them.

    python export/export_model.py runs/ding --output exports/ding

The script form of `keras-transformer export` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/export.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.export import main

if __name__ == "__main__":
    cli.run(main)
