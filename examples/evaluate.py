"""Scores a trained model with sacreBLEU (BLEU and chrF, with signatures) on a

    python examples/evaluate.py runs/ding --split test --limit 1000

The script form of `keras-transformer evaluate` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/evaluate.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.evaluate import main

if __name__ == "__main__":
    cli.run(main)
