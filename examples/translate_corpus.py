"""Translates many text files with an export, on Apache Beam (back-translation).

    python export/export_model.py runs/en-de --output exports/en-de
    python examples/translate_corpus.py exports/en-de --input 'mono/news.*.en' \\
        --output bt/news --parallel-corpus

The script form of `keras-transformer translate-corpus` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/translate_corpus.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.translate_corpus import main

if __name__ == "__main__":
    cli.run(main)
