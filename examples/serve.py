"""Serves a model over HTTP: LibreTranslate's API, a page to try it.

    python examples/serve.py runs/ding              # http://127.0.0.1:5000/

The script form of `keras-transformer serve` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/serve.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.serve import INTERRUPTED, main

if __name__ == "__main__":
    cli.run(main, INTERRUPTED)
