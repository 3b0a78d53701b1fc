"""Draws the attention weights of a trained model for a sentence, as in the

    python examples/visualize_attention.py runs/ding "Ich habe keine Zeit."

The script form of `keras-transformer visualize` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/visualize.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.visualize import main

if __name__ == "__main__":
    cli.run(main)
