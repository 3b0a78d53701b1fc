"""Decoding throughput of the base model: our cached beam and greedy search,
our uncached search (the decoder re-run over the whole prefix at every step),
the search of `translate.onnx` (onnxruntime's BeamSearch operator, float32,
ids in: the file's graph without its SentencePiece ops, as this benchmark
feeds ids), and Hugging Face `transformers`' `MarianMTModel.generate` on
PyTorch CPU with the same dimensions, side by side in one run.

    pip install torch==2.13.0 transformers   # only for this benchmark
    python benchmarks/decode_throughput.py

Setting: base preset (6+6 layers, d_model 512, d_ff 2048, 8 heads), a
37,000-token vocabulary, random weights, a batch of 16 sentences of 24
tokens, exactly 40 output tokens per sentence (the end token is kept from
winning before then), beam 4 and greedy. Reported: target tokens per second
(16 x 40 / seconds per batch), the median of `--repeats` runs taken in turns
(ours, Marian, ours, ...), so that the ratios compare runs made at the same
time on a machine whose speed drifts.
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import (in_fresh_process, machine, model_running_to_the_limit,  # noqa: E402
                    onnxruntime_options, timed_interleaved)

BATCH, SOURCE_LENGTH, OUTPUT_TOKENS, VOCAB = 16, 24, 40, 37000


def sources(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, VOCAB, (BATCH, SOURCE_LENGTH)).astype("int32")
    ids[:, -1] = 3  # end token
    return ids


def base_model():
    """The base model, random weights, the end token kept from winning."""
    from keras_transformer.models import BASE

    # Output limit = source length (23 without its end token) + margin = 40.
    config = BASE.replace(decode_margin=OUTPUT_TOKENS - (SOURCE_LENGTH - 1))
    return model_running_to_the_limit(config, VOCAB)


def ours(model):
    """Our four searches, each a callable that decodes the batch once."""
    import tensorflow as tf

    from keras_transformer.decoding import beam_search, greedy_search

    source = tf.constant(sources())
    runs = {}
    for name, search, kwargs in [
        ("ours, beam 4, cached", beam_search, dict(beam_size=4)),
        ("ours, greedy, cached", greedy_search, {}),
        ("ours, beam 4, uncached", beam_search, dict(beam_size=4, use_cache=False)),
        ("ours, greedy, uncached", greedy_search, dict(use_cache=False)),
    ]:
        function = tf.function(lambda s, search=search, kwargs=kwargs: search(model, s, **kwargs).tokens)
        lengths = np.count_nonzero(function(source).numpy()[:, 0], axis=1)
        assert (lengths == OUTPUT_TOKENS).all(), lengths
        runs[name] = lambda function=function: function(source).numpy()
    return runs


def write_search(folder):
    """Writes search.onnx (translate.onnx's search, ids in) of the model saved
    in `folder` (in a process of its own: see `common.in_fresh_process`)."""
    import keras
    import onnx

    import keras_transformer.models  # noqa: F401  (registers the model class)
    from keras_transformer.export import onnx_beam_search

    model = keras.models.load_model(os.path.join(folder, "model.keras"), safe_mode=True)
    onnx.save(onnx_beam_search.search_model(model), os.path.join(folder, "search.onnx"))


def onnx_search(model, folder):
    """translate.onnx's search (ids in) with beam 4 and greedy, as callables."""
    import onnxruntime

    model.save(os.path.join(folder, "model.keras"))
    in_fresh_process(write_search, folder)
    session = onnxruntime.InferenceSession(os.path.join(folder, "search.onnx"),
                                           onnxruntime_options())
    source = sources()
    runs = {}
    for name, beams in [("translate.onnx, beam 4", 4), ("translate.onnx, greedy", 1)]:
        def run(beams=beams):
            return session.run(None, {"source_ids": source,
                                      "beam_size": np.array(beams, np.int32)})[0]

        lengths = np.count_nonzero(run()[:, 0], axis=1)
        assert (lengths == OUTPUT_TOKENS).all(), lengths
        runs[name] = run
    return runs


def marian():
    """`MarianMTModel.generate` with beam 4 and greedy, as callables."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.set_num_threads(os.cpu_count())
    config = MarianConfig(
        vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
        decoder_ffn_dim=2048, max_position_embeddings=256, pad_token_id=0, eos_token_id=3,
        decoder_start_token_id=2, forced_eos_token_id=None)
    model = MarianMTModel(config).eval()
    source = torch.from_numpy(sources().astype("int64"))
    runs = {}
    for name, beams in [("Marian generate, beam 4", 4), ("Marian generate, greedy", 1)]:
        def run(beams=beams):
            with torch.inference_mode():
                return model.generate(source, num_beams=beams, do_sample=False,
                                      min_new_tokens=OUTPUT_TOKENS, max_new_tokens=OUTPUT_TOKENS,
                                      early_stopping=True)
        runs[name] = run
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"Machine: {machine()}. Batch {BATCH} x {SOURCE_LENGTH} source tokens, "
          f"{OUTPUT_TOKENS} output tokens each, base model, vocabulary {VOCAB}.\n")
    model = base_model()
    with tempfile.TemporaryDirectory() as folder:
        runs = ours(model) | onnx_search(model, folder) | marian()
    results = timed_interleaved(runs, warmup=1, repeats=args.repeats)
    tokens = BATCH * OUTPUT_TOKENS
    print(f"{'':28s} {'s/batch':>8s} {'target tok/s':>13s}")
    for name, seconds in results.items():
        print(f"{name:28s} {seconds:8.2f} {tokens / seconds:13.0f}")
    ratio = lambda a, b: results[b] / results[a]  # noqa: E731
    print(f"\nbeam 4: ours / Marian {ratio('ours, beam 4, cached', 'Marian generate, beam 4'):.2f}x; "
          f"greedy: ours / Marian {ratio('ours, greedy, cached', 'Marian generate, greedy'):.2f}x")
    print(f"cached / uncached: beam 4 {ratio('ours, beam 4, cached', 'ours, beam 4, uncached'):.2f}x, "
          f"greedy {ratio('ours, greedy, cached', 'ours, greedy, uncached'):.2f}x")
    print(f"translate.onnx / ours: beam 4 "
          f"{ratio('translate.onnx, beam 4', 'ours, beam 4, cached'):.2f}x, "
          f"greedy {ratio('translate.onnx, greedy', 'ours, greedy, cached'):.2f}x")


if __name__ == "__main__":
    main()
