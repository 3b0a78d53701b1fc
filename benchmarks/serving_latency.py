"""Serving speed of the two exported runtimes on the same model and inputs,
side by side in one run: the TensorFlow SavedModel (its core `search_ids`
signature, beam search inside the graph) and the onnxruntime runner (encoder
and decoder-step graphs, beam search in NumPy).

    python benchmarks/serving_latency.py [--preset small --beam-size 4]

Reports per-sentence latency (batch 1) and throughput (batch 16), in target
tokens per second, for sources of 24 tokens and 40 output tokens each.
"""

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine, model_running_to_the_limit, timed  # noqa: E402

SOURCE_LENGTH, OUTPUT_TOKENS = 24, 40


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import tensorflow as tf

    from keras_transformer.export import OnnxSearch, onnx_graphs, saved_model
    from keras_transformer.export.exporter import onnx_config
    from keras_transformer.export.onnx_runner import CONFIG_FILE
    from keras_transformer.models import PRESETS

    config = PRESETS[args.preset].replace(decode_margin=OUTPUT_TOKENS - (SOURCE_LENGTH - 1),
                                          max_length=max(64, OUTPUT_TOKENS))
    model = model_running_to_the_limit(config, args.vocab)
    folder = tempfile.mkdtemp()
    core = tf.saved_model.load(saved_model.save(model, os.path.join(folder, "core")))
    onnx_dir = os.path.join(folder, "onnx")
    onnx_graphs.export(model, onnx_dir)
    with open(os.path.join(onnx_dir, CONFIG_FILE), "w") as file:
        json.dump(onnx_config(model), file)
    runner = OnnxSearch(onnx_dir)

    rng = np.random.default_rng(0)
    print(f"Machine: {machine()}. Preset {args.preset}, vocabulary {args.vocab}, beam "
          f"{args.beam_size}, {SOURCE_LENGTH} source and {OUTPUT_TOKENS} output tokens.\n")
    print(f"{'':34s} {'batch 1 ms/sentence':>20s} {'batch 16 tok/s':>15s}")
    for name in ("SavedModel (search_ids)", "onnxruntime runner"):
        row = []
        for batch in (1, 16):
            source = rng.integers(4, args.vocab, (batch, SOURCE_LENGTH)).astype("int32")
            source[:, -1] = 3
            if name.startswith("SavedModel"):
                run = lambda s=source: core.signatures["search_ids"](  # noqa: E731
                    source_ids=tf.constant(s), beam_size=tf.constant(args.beam_size),
                    alpha=tf.constant(0.6), decode_margin=tf.constant(config.decode_margin))
            else:
                run = lambda s=source: runner.beam(s, beam_size=args.beam_size)  # noqa: E731
            row.append(timed(run, warmup=1, repeats=args.repeats))
        print(f"{name:34s} {row[0] * 1000:20.0f} {16 * OUTPUT_TOKENS / row[1]:15.0f}")


if __name__ == "__main__":
    main()
