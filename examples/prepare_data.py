"""Tokenizes a corpus once into TFRecord shards for train.py (Apache Beam).

    python examples/prepare_data.py --dataset ding --tokenizer runs/ding \\
        --output data/ding-prepared --shards 8
    python examples/train.py --output runs/ding-2 --dataset prepared:data/ding-prepared

The script form of `keras-transformer prepare-data` (the installed command), with
the same options, messages and exit statuses: `--help` lists them. The work is
done in keras_transformer/commands/prepare_data.py; copy this file to start the
command from a script of your own.
"""

from keras_transformer import cli
from keras_transformer.commands.prepare_data import main

if __name__ == "__main__":
    cli.run(main)
