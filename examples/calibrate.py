"""Fits how far to trust a run's translations: the calibrator that turns the

    python examples/calibrate.py runs/ding

The script form of `keras-transformer calibrate` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/calibrate.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.calibrate import main

if __name__ == "__main__":
    cli.run(main)
