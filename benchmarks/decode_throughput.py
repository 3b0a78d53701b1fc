"""Decoding throughput of the base model: our cached beam and greedy search
in float32 and bfloat16, CTranslate2 (float32 and int8) built from the same
Keras weights, the search of `translate.onnx` (onnxruntime's BeamSearch
operator, float32, ids in: the file's graph without its SentencePiece ops),
and Hugging Face `transformers`' `MarianMTModel.generate` on PyTorch CPU with
the same dimensions, side by side in one run.

    pip install ctranslate2 torch==2.13.0 transformers   # only for this benchmark
    python benchmarks/decode_throughput.py [--uncached] [--repeats 7]

Setting: base preset (6+6 layers, d_model 512, d_ff 2048, 8 heads), a
37,000-token vocabulary, random weights, a batch of 16 sentences of 24
tokens, exactly 40 output tokens per sentence (the end token is kept from
winning before then), beam 4 and greedy. Reported: target tokens per second
(16 x 40 / seconds per batch), the median of `--repeats` runs taken in turns
(ours, CTranslate2, Marian, ours, ...), so that the ratios compare runs made
at the same time on a machine whose speed drifts. `--uncached` adds our
search re-running the decoder over the whole prefix at every step.

`--slots` adds our continuous batching (`decoding.SlotSearch`, float32)
with as many slots as the batch has sentences, all of them joining at the
first step: the same steps over the same rows as the batch's search, so
that the ratio is what the slots' bookkeeping costs (each row's own
position, cache start and mask; the returns to Python). `--ours-only`
leaves out CTranslate2, onnxruntime and Marian.
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
    from keras_transformer.models import BASE

    # Output limit = source length (23 without its end token) + margin = 40.
    config = BASE.replace(decode_margin=OUTPUT_TOKENS - (SOURCE_LENGTH - 1))
    return model_running_to_the_limit(config, VOCAB)


def ours(model, uncached=False, slots=False):
    """Our searches, each a callable that decodes the batch once."""
    import tensorflow as tf

    from keras_transformer.decoding import SlotSearch, beam_search, greedy_search
    from keras_transformer.decoding.slots import search_all
    from keras_transformer.models import in_precision

    source = tf.constant(sources())
    contenders = [("beam 4", beam_search, dict(beam_size=4)), ("greedy", greedy_search, {})]
    if uncached:
        contenders += [("beam 4, uncached", beam_search, dict(beam_size=4, use_cache=False)),
                       ("greedy, uncached", greedy_search, dict(use_cache=False))]
    runs = {}
    for precision in ("float32", "bfloat16"):
        copy = in_precision(model, precision)
        for name, search, kwargs in contenders:
            if "uncached" in name and precision != "float32":
                continue
            function = tf.function(lambda s, m=copy, search=search, kwargs=kwargs:
                                   search(m, s, **kwargs).tokens)
            lengths = np.count_nonzero(function(source).numpy()[:, 0], axis=1)
            assert (lengths == OUTPUT_TOKENS).all(), lengths
            runs[f"ours {precision}, {name}"] = lambda function=function: function(source).numpy()
    for name, beam in (("beam 4", 4), ("greedy", 1)) if slots else ():
        search = SlotSearch(model, BATCH, beam_size=beam)
        rows = list(sources())
        lengths = [np.count_nonzero(tokens[0]) for tokens, *_ in search_all(search, rows)]
        assert lengths == [OUTPUT_TOKENS] * BATCH, lengths
        runs[f"ours float32, {name}, slots"] = lambda search=search, rows=rows: search_all(
            search, rows)
    return runs


def ctranslate2_runs(model):
    """CTranslate2 float32 and int8 models written from `model`'s weights by
    our exporter, with beam 4 and greedy, as callables on token strings."""
    import ctranslate2

    from keras_transformer.export.ctranslate2_model import transformer_spec

    tokens = [f"t{i}" for i in range(VOCAB)]
    config = model.config
    folder = tempfile.mkdtemp()
    spec = transformer_spec(model, tokens, tokens)
    spec.save(folder)
    # CTranslate2 appends the end token itself; the searches ban padding
    # and the start token, as ours do.
    batch = [[tokens[i] for i in row[:-1]] for row in sources()]
    banned = [[tokens[config.pad_id]], [tokens[config.decoder_start_id]]]
    runs = {}
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(folder, compute_type=compute_type,
                                            intra_threads=os.cpu_count())
        for name, beams in (("beam 4", 4), ("greedy", 1)):
            def run(translator=translator, beams=beams):
                return translator.translate_batch(
                    batch, beam_size=beams, max_decoding_length=OUTPUT_TOKENS,
                    min_decoding_length=OUTPUT_TOKENS, suppress_sequences=banned)
            lengths = {len(result.hypotheses[0]) for result in run()}
            assert lengths <= {OUTPUT_TOKENS - 1, OUTPUT_TOKENS}, lengths
            runs[f"CTranslate2 {compute_type}, {name}"] = run
    return runs


def write_search(folder):
    """Writes search.onnx (translate.onnx's search, ids in) of the model saved
    in `folder` (in a process of its own: see `common.in_fresh_process`)."""
    import keras
    import onnx

    import keras_transformer.models  # noqa: F401  (registers the model class)
    from keras_transformer.export.onnx import beam_search as onnx_beam_search

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
    parser.add_argument("--uncached", action="store_true",
                        help="also time our search without the key/value cache")
    parser.add_argument("--slots", action="store_true",
                        help="also time our continuous batching at full slots")
    parser.add_argument("--ours-only", action="store_true",
                        help="leave out CTranslate2, onnxruntime and Marian")
    args = parser.parse_args()
    print(f"Machine: {machine()}. Batch {BATCH} x {SOURCE_LENGTH} source tokens, "
          f"{OUTPUT_TOKENS} output tokens each, base model, vocabulary {VOCAB}.\n")
    model = base_model()
    with tempfile.TemporaryDirectory() as folder:
        runs = ours(model, args.uncached, args.slots)
        if not args.ours_only:
            runs |= ctranslate2_runs(model) | onnx_search(model, folder) | marian()
        results = timed_interleaved(runs, warmup=1, repeats=args.repeats)
    tokens = BATCH * OUTPUT_TOKENS
    print(f"{'':34s} {'s/batch':>8s} {'target tok/s':>13s}")
    for name, seconds in results.items():
        print(f"{name:34s} {seconds:8.2f} {tokens / seconds:13.0f}")

    def ratio(a, b):  # how many times faster a is than b
        return results[b] / results[a]

    print()
    for search in ("beam 4", "greedy"):
        if args.slots:
            print(f"{search}: slots / batch, float32, in time a batch "
                  f"{results[f'ours float32, {search}, slots'] / results[f'ours float32, {search}']:.3f}x")
        if args.ours_only:
            continue
        marian_name = f"Marian generate, {search}"
        print(f"{search}: ours float32 / CTranslate2 float32 "
              f"{ratio(f'ours float32, {search}', f'CTranslate2 float32, {search}'):.2f}x; "
              f"ours bfloat16 / CTranslate2 int8 "
              f"{ratio(f'ours bfloat16, {search}', f'CTranslate2 int8, {search}'):.2f}x; "
              f"ours float32 / Marian {ratio(f'ours float32, {search}', marian_name):.2f}x; "
              f"translate.onnx / ours float32 "
              f"{ratio(f'translate.onnx, {search}', f'ours float32, {search}'):.2f}x")
        if args.uncached:
            print(f"{search}: cached / uncached "
                  f"{ratio(f'ours float32, {search}', f'ours float32, {search}, uncached'):.2f}x")


if __name__ == "__main__":
    main()
