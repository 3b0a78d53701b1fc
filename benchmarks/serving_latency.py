"""Serving speed of the exported runtimes on the same model and inputs, side
by side in one run:
- the TensorFlow SavedModel: text in (`translate`: SentencePiece and beam
  search in the graph, tf-text) and ids in (`search_ids`, core TF ops);
- `translate.onnx`: text in, SentencePiece (onnxruntime-extensions) and
  onnxruntime's BeamSearch operator in one ONNX file, with float32 and with
  int8 weights (`--int8-schemes` adds the int8 schemes the export does not
  use, for comparison: onnxruntime's dynamic quantization as it comes, and
  MatMulNBits with 8-bit weights, which needs `pip install onnx-ir`);
- the onnxruntime runner: encoder and decoder-step graphs, beam search in
  NumPy, ids in, float32 and int8;
- CTranslate2 (float32 and int8 weights), text in through our
  `CTranslate2Translator` (sentencepiece, then `ctranslate2.Translator`).

    python benchmarks/serving_latency.py [--preset small|base --beam-size 4 --repeats 5 --int8-schemes]

Reports per-sentence latency (batch 1) and throughput (batch 16), in target
tokens per second, for sources of 24 tokens (23 words and the end token)
and 40 output tokens each (39 words and the end token), and each runtime's
ratio to the SavedModel with the same input (text or ids): above 1 is
faster. The model has random weights whose end token never wins before the
limit, and the tokenizer is a SentencePiece word model of random words, so
that every runtime reads and writes exactly these numbers of tokens. All
run in turns (one call of each, then again); onnxruntime without
spin-waiting (see `common.onnxruntime_options`).
"""

# Before TensorFlow (see keras_transformer/runtimes/translate_onnx.py).
import onnxruntime_extensions  # noqa: I001

import argparse
import functools
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import (in_fresh_process, machine, model_running_to_the_limit,  # noqa: E402
                    onnxruntime_options, timed_interleaved, word_tokenizer)

SOURCE_LENGTH, OUTPUT_TOKENS, BATCHES = 24, 40, (1, 16)


INT8_SCHEMES = {
    "int8": "per-row activations (the export's)",
    "int8-per-tensor": "onnxruntime's dynamic quantization: one scale per batch",
    "int8-matmulnbits": "MatMulNBits, 8-bit weights, int8 compute (accuracy_level 4)",
}


def write_onnx(folder, schemes):
    """Writes the runner's graphs in float32 (onnx/) and int8 (onnx_int8/),
    and translate.onnx in float32 and each int8 scheme of `schemes`, for the
    model and tokenizer saved in `folder` (in a process of its own: see
    `common.in_fresh_process`). The other schemes are built here only to be
    compared: each translate.onnx file says which it is."""
    import shutil

    import keras
    import onnx

    import keras_transformer.models  # noqa: F401  (registers the model class)
    from keras_transformer.data import Tokenizer
    from keras_transformer.export.onnx import graphs as onnx_graphs
    from keras_transformer.export.onnx import int8 as onnx_int8
    from keras_transformer.export.onnx import text as onnx_text
    from keras_transformer.export.onnx.format import runner_config
    from keras_transformer.runtimes.onnx_runner import CONFIG_FILE

    model = keras.models.load_model(os.path.join(folder, "model.keras"), safe_mode=True)
    tokenizer = Tokenizer(os.path.join(folder, "tokenizer.model"))
    onnx_graphs.export(model, os.path.join(folder, "onnx"))
    with open(os.path.join(folder, "onnx", CONFIG_FILE), "w") as file:
        json.dump(runner_config(model), file)
    shutil.copytree(os.path.join(folder, "onnx"), os.path.join(folder, "onnx_int8"))
    for name in ("encoder", "decoder_step"):
        path = os.path.join(folder, "onnx_int8", f"{name}.onnx")
        onnx.save(onnx_int8.quantize(onnx.load(path)), path)
    quantizers = {"float32": lambda proto: proto, "int8": onnx_int8.quantize,
                  "int8-per-tensor": _per_tensor, "int8-matmulnbits": _matmulnbits}
    subgraphs = tuple(onnx.load(os.path.join(folder, "onnx", f"{name}.onnx"))
                      for name in ("encoder", "decoder_step"))
    for weights in ("float32", *schemes):
        graphs = tuple(quantizers[weights](graph) for graph in subgraphs)
        onnx.save(onnx_text.translate_model(model, tokenizer, graphs),
                  os.path.join(folder, f"translate_{weights}.onnx"))


def _per_tensor(proto):
    """onnxruntime's dynamic quantization as it comes (batch-dependent)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as scratch:
        onnx.save(proto, os.path.join(scratch, "float32.onnx"))
        quantize_dynamic(os.path.join(scratch, "float32.onnx"), os.path.join(scratch, "int8.onnx"),
                         weight_type=QuantType.QInt8, extra_options={"EnableSubgraph": True})
        return onnx.load(os.path.join(scratch, "int8.onnx"))


def _matmulnbits(proto):
    """onnxruntime's MatMulNBits with 8-bit weights in blocks of 32 and int8
    compute (activations quantized per row and block): batch-independent
    too. Needs `pip install onnx-ir`."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    quantizer = MatMulNBitsQuantizer(proto, algo_config=DefaultWeightOnlyQuantConfig(
        block_size=32, is_symmetric=True, bits=8, accuracy_level=4))
    quantizer.process()
    return quantizer.model.model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "base"), default="small")
    parser.add_argument("--vocab", type=int, help="default: 8,000 (small), 37,000 (base)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--int8-schemes", action="store_true",
                        help="also time the int8 schemes the export does not use: "
                             + "; ".join(f"{k}: {v}" for k, v in INT8_SCHEMES.items()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        benchmark(args, folder)


def benchmark(args, folder):
    vocab = args.vocab or {"small": 8000, "base": 37000}[args.preset]

    import onnxruntime
    import tensorflow as tf

    from keras_transformer.export import saved_model
    from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
    from keras_transformer.runtimes.onnx_runner import OnnxSearch
    from keras_transformer.export.ctranslate2_model import save as save_ctranslate2
    from keras_transformer.models import PRESETS

    config = PRESETS[args.preset].replace(decode_margin=OUTPUT_TOKENS - (SOURCE_LENGTH - 1),
                                          max_length=max(64, OUTPUT_TOKENS))
    model = model_running_to_the_limit(config, vocab)
    tokenizer, words = word_tokenizer(vocab, folder)
    text_model = tf.saved_model.load(saved_model.save(model, os.path.join(folder, "text"), tokenizer))
    core = tf.saved_model.load(saved_model.save(model, os.path.join(folder, "core")))
    model.save(os.path.join(folder, "model.keras"))
    schemes = list(INT8_SCHEMES) if args.int8_schemes else ["int8"]
    in_fresh_process(write_onnx, folder, schemes)
    runners = {weights: OnnxSearch(os.path.join(folder, directory), options=onnxruntime_options())
               for weights, directory in (("float32", "onnx"), ("int8", "onnx_int8"))}
    sessions = {}
    for weights in ("float32", *schemes):
        options = onnxruntime_options()
        options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        sessions[weights] = onnxruntime.InferenceSession(
            os.path.join(folder, f"translate_{weights}.onnx"), options)

    translators = {}
    for weights in ("float32", "int8"):  # CTranslate2's
        directory = save_ctranslate2(model, tokenizer, os.path.join(folder, f"ct2_{weights}"),
                                     weights)
        translators[weights] = CTranslate2Translator(directory, threads=os.cpu_count())

    rng = np.random.default_rng(0)
    beam, alpha, margin = args.beam_size, 0.6, config.decode_margin

    # Each returns the number of tokens it wrote per sentence, the end token
    # included (the words of a text, + 1).
    def text_saved_model(texts, source):
        out = text_model.signatures["translate"](
            text=tf.constant(texts), beam_size=tf.constant(beam), alpha=tf.constant(alpha),
            decode_margin=tf.constant(margin))
        return [len(t.split()) + 1 for t in out["translations"].numpy()[:, 0]]

    def translate_onnx(session, texts, source):
        translations, _ = session.run(None, {"text": np.array(texts, dtype=object),
                                             "beam_size": np.array(beam, np.int32),
                                             "alpha": np.array(alpha, np.float32)})
        return [len(t.split()) + 1 for t in translations[:, 0]]

    def ctranslate2(translator, texts, source):
        translations = translator.translate(texts, beam_size=beam, alpha=alpha)
        return [len(t.split()) + 1 for t in translations]

    def ids_saved_model(texts, source):
        out = core.signatures["search_ids"](
            source_ids=tf.constant(source), beam_size=tf.constant(beam), alpha=tf.constant(alpha),
            decode_margin=tf.constant(margin))
        return list(np.count_nonzero(out["target_ids"].numpy()[:, 0], axis=1))

    def runner_search(runner, texts, source):
        tokens, _ = runner.beam(source, beam_size=beam, alpha=alpha)
        return list(np.count_nonzero(tokens[:, 0], axis=1))

    contenders = {
        "SavedModel, text in (translate)": ("text", text_saved_model),
        **{f"translate.onnx, {weights}": ("text", functools.partial(translate_onnx, session))
           for weights, session in sessions.items()},
        "CTranslate2, float32": ("text", functools.partial(ctranslate2, translators["float32"])),
        "CTranslate2, int8": ("text", functools.partial(ctranslate2, translators["int8"])),
        "SavedModel, ids in (search_ids)": ("ids", ids_saved_model),
        **{f"onnxruntime runner, {weights}, ids in": ("ids", functools.partial(runner_search, runner))
           for weights, runner in runners.items()},
    }
    runs = {batch: {} for batch in BATCHES}
    for batch in BATCHES:
        texts = [" ".join(rng.choice(words, SOURCE_LENGTH - 1)) for _ in range(batch)]
        source = tokenizer.tokenize(tf.constant(texts)).to_tensor().numpy()
        source = np.concatenate([source, np.full((batch, 1), 3, source.dtype)], axis=1)
        for name, (_, run) in contenders.items():
            runs[batch][name] = functools.partial(run, texts, source)
            counts = runs[batch][name]()
            # The same work for every runtime (int8 weights may let the end
            # token win early: not required of them).
            assert counts == [OUTPUT_TOKENS] * batch or "int8" in name, (name, counts)

    times = {batch: timed_interleaved(runs[batch], warmup=1, repeats=args.repeats)
             for batch in BATCHES}
    reference = {"text": "SavedModel, text in (translate)", "ids": "SavedModel, ids in (search_ids)"}
    print(f"Machine: {machine()}. Preset {args.preset}, vocabulary {vocab}, beam {beam}, "
          f"{SOURCE_LENGTH} source and {OUTPUT_TOKENS} output tokens; median of {args.repeats}.\n")
    print(f"{'':34s} {'batch 1 ms/sentence':>20s} {'x SavedModel':>12s} "
          f"{'batch 16 tok/s':>15s} {'x SavedModel':>12s}")
    for name, (kind, _) in contenders.items():
        base = reference[kind]
        latency, reference_latency = times[1][name], times[1][base]
        throughput = 16 * OUTPUT_TOKENS / times[16][name]
        print(f"{name:34s} {latency * 1000:20.0f} {reference_latency / latency:12.2f} "
              f"{throughput:15.0f} {times[16][base] / times[16][name]:12.2f}")


if __name__ == "__main__":
    main()
