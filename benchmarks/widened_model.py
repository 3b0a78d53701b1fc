"""A base-size model that translates exactly as a smaller trained one, for
timing searches on real text where no trained base-size model is at hand.

    python benchmarks/widened_model.py runs/small runs/small-as-base

A base-size model (6+6 layers, d_model 512, d_ff 2048, 8 heads) trained
briefly on 2 CPU cores ends every output after a token or two, so its
searches cost nothing like a real model's. This widens a trained model with
64-dimensional heads (the small preset: 2+2 layers, d_model 256, 4 heads)
to the base preset's shapes so that it computes the same function: every
vector of width d becomes two copies of it (width 2d), whose layer
normalisation is the copies of the original's; each kernel becomes the 2x2
tiling of it, halved, so that it maps copies to copies; the extra heads are
copies of the original heads; the positions table is the original's,
copied (a learned table, since the base sinusoid of width 512 is not two
copies of width 256's); the embedding is divided by sqrt(2) and the last
decoder normalisation too, so that the input scale sqrt(d_model) and the
tied output projection give the original's values. The extra layers
(layer 2 onwards) add zero: their output kernels are zero, the rest of them
random, so each costs what a trained layer costs. The vocabulary stays the
original's. The folder written has the original's tokenizer and the model
as `averaged.keras`, so translate.py and the exporter read it as a run.
"""

import math
import os
import shutil
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def widened(small):
    """The base-size Transformer computing what `small` computes."""
    import keras

    from keras_transformer.models import BASE, transformer

    config = small.config
    if config.d_model // config.num_heads != 64 or config.key_dim or config.value_dim:
        raise ValueError("widened() needs 64-dimensional heads, as the base preset's.")
    wide = transformer(config.replace(
        d_model=2 * config.d_model, d_ff=2 * config.d_ff, num_heads=2 * config.num_heads,
        num_encoder_layers=BASE.num_encoder_layers, num_decoder_layers=BASE.num_decoder_layers,
        positional_encoding="learned"), small.target_vocab_size)
    source = {w.path: w.numpy() for w in small.weights}
    table = {}
    for name in ("source_positions", "target_positions"):
        layer = getattr(small, name)
        table[name] = keras.ops.convert_to_numpy(
            layer(keras.ops.zeros((1, config.max_length, config.d_model))))[0]
    for weight in wide.weights:
        path = weight.path
        layer = path.split("/")[0]
        if layer in table:
            value = np.tile(table[layer], (1, 2))
        elif path not in source:  # a layer the small model lacks: adds zero
            if "attention_output" in path or "feed_forward/output" in path:
                weight.assign(np.zeros(weight.shape, "float32"))
            continue
        else:
            value = source[path]
            if "embeddings" in path:
                value = np.tile(value, (1, 2)) / math.sqrt(2)
            elif value.ndim == 2:
                value = np.tile(value, (2, 2)) / 2
            else:
                value = np.tile(value, 2) / (math.sqrt(2) if layer == "decoder_norm" else 1)
        if tuple(value.shape) != tuple(weight.shape):
            raise ValueError(f"{path}: {value.shape} does not fit {weight.shape}")
        weight.assign(value.astype("float32"))
    return wide


def main(run_dir, output_dir):
    from keras_transformer import run_folder

    small = run_folder.load_model(run_dir)
    os.makedirs(output_dir, exist_ok=True)
    for name in os.listdir(run_dir):
        if name.startswith("tokenizer."):
            shutil.copy(os.path.join(run_dir, name), output_dir)
    model = widened(small)
    with open(os.path.join(output_dir, "config.json"), "w", encoding="utf-8") as file:
        file.write(model.config.to_json())
    model.save(os.path.join(output_dir, "averaged.keras"))
    print(f"Wrote {output_dir}: {model.count_params():,} parameters "
          f"(the original {small.count_params():,}).")


if __name__ == "__main__":
    main(*sys.argv[1:])
