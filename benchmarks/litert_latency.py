"""LiteRT against the other text-in exports, side by side in one run, on
real sentences: file sizes, batch-1 latency and batch-16 throughput of
- `litert/translate.tflite`, float32 and int8 (`--float16`: also float16),
  run by ai-edge-litert's interpreter with tf-text's kernels;
- the SavedModel's `translate` signature (tf-text, beam search in the graph);
- `onnx/translate.onnx`, float32 and int8 (onnxruntime, without
  spin-waiting: see `common.onnxruntime_options`);
- CTranslate2, float32 and int8 (`CTranslate2Translator`).

    apt-get install trans-de-en          # the Ding dictionary
    pip install ".[litert,onnx-text,ctranslate2]"
    python benchmarks/litert_latency.py [--preset small|base --sentences 16 --repeats 3]

The model: the preset with random weights whose end token never wins before
the length limit (`common.model_running_to_the_limit`), a unigram
SentencePiece model of 8,000 pieces (37,000 for base) trained on Ding (the
tokenizer a LiteRT file can hold), beam 4, alpha 0.6, decode margin 10: a
sentence of n tokens gets min(n + 10, max_length) output tokens in every
runtime (int8 weights may end earlier). Everything is exported by
`keras-transformer export`'s own `export_run` (float32, then int8), checks
included. The sentences: `--sentences` whole German sentences of Ding
(mixed lengths); batch 1 translates them one by one (milliseconds per
sentence, the median of `--repeats` runs of all of them), batch 16
translates 16 at a time (output tokens per second). Every contender is
timed in turns (each once, then again), so that a slow phase of a shared
machine slows all alike; "x onnx" is the ratio to `translate.onnx` float32
(above 1: faster), "same" the share of best translations equal to the
SavedModel's. "cpu ms" is this process's CPU time per sentence at batch 1,
timed the same way: with `--threads 1` it is the latency each contender
would have alone on an idle core, which a machine that others load does not
show on the wall clock (TensorFlow takes its own threads, so the
SavedModel's is its work on all of them). `--threads` (default: every
core) goes to LiteRT, CTranslate2 and onnxruntime.
"""

# Before TensorFlow (see keras_transformer/runtimes/translate_onnx.py).
import onnxruntime_extensions  # noqa: I001

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine, model_running_to_the_limit, onnxruntime_options, timed_interleaved  # noqa: E402,E501
from translate_file import ding_sentences  # noqa: E402

MARGIN, BATCH = 10, 16
OPENNMT_TF_SMALL_MB = 97
"""The size OpenNMT-tf users report for the .tflite of a small model
(DESIGN.md, section 8), for comparison."""


def write_run(folder, preset, vocab):
    """A run folder: the preset running to its limit, and a unigram
    SentencePiece model trained on Ding."""
    from keras_transformer import data
    from keras_transformer.models import PRESETS

    config = PRESETS[preset].replace(decode_margin=MARGIN)
    data.train_corpus_tokenizer(data.corpus("ding"), os.path.join(folder, "tokenizer.model"),
                                vocab, max_sentences=200_000, model_type="unigram")
    model = model_running_to_the_limit(config, vocab)
    model.save(os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "config.json"), "w") as file:
        file.write(config.to_json())


def size_mb(path):
    """Megabytes of a file, or of a folder's files."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names) / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "base"), default="small")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--float16", action="store_true", help="also time float16 LiteRT weights")
    parser.add_argument("--work", help="a folder to keep the run and exports in (default: a "
                                       "temporary one)")
    args = parser.parse_args()
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        benchmark(args, args.work)
    else:
        with tempfile.TemporaryDirectory() as folder:
            benchmark(args, folder)


def benchmark(args, folder):
    import onnxruntime
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's SentencePiece ops)

    from keras_transformer.export import export_run
    from keras_transformer.runtimes import translate_litert
    from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
    from keras_transformer.runtimes.translate_onnx import translate as translate_onnx

    vocab = {"small": 8000, "base": 37000}[args.preset]
    run = os.path.join(folder, "run")
    if not os.path.exists(os.path.join(run, "model.keras")):
        os.makedirs(run, exist_ok=True)
        write_run(run, args.preset, vocab)
    exports = {}
    for weights in ("float32", "int8") + (("float16",) if args.float16 else ()):
        exports[weights] = os.path.join(folder, f"export-{weights}")
        formats = {"float32": ["saved_model", "onnx", "ctranslate2", "litert"],
                   "int8": ["onnx", "ctranslate2", "litert"], "float16": ["litert"]}[weights]
        if not os.path.exists(exports[weights]):
            print(f"Exporting {weights} ...", flush=True)
            export_run(run, exports[weights], formats=formats, quantization=weights)

    sentences = ding_sentences(args.sentences)
    batches = {1: [[s] for s in sentences], BATCH: [sentences[i:i + BATCH]
                                                    for i in range(0, len(sentences), BATCH)]}
    saved = tf.saved_model.load(os.path.join(exports["float32"], "saved_model"))

    def saved_model(texts):
        out = saved.signatures["translate"](
            text=tf.constant(texts), beam_size=tf.constant(4), alpha=tf.constant(0.6),
            decode_margin=tf.constant(MARGIN))
        return [t.decode() for t in out["translations"].numpy()[:, 0]]

    contenders, sizes = {"SavedModel, translate": saved_model}, {
        "SavedModel, translate": size_mb(os.path.join(exports["float32"], "saved_model"))}
    for weights, export in exports.items():
        path = os.path.join(export, "litert", "translate.tflite")
        runner = translate_litert.open_file(path, args.threads)
        name = f"translate.tflite, {weights}"
        contenders[name] = lambda texts, runner=runner: [
            row[0] for row in translate_litert.translate(runner, texts)[0]]
        sizes[name] = size_mb(path)
    for weights, export in list(exports.items())[:2]:
        options = onnxruntime_options(args.threads)
        options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        path = os.path.join(export, "onnx", "translate.onnx")
        session = onnxruntime.InferenceSession(path, options)
        name = f"translate.onnx, {weights}"
        contenders[name] = lambda texts, session=session: [
            row[0] for row in translate_onnx(session, texts)[0]]
        sizes[name] = size_mb(path)
        translator = CTranslate2Translator(os.path.join(export, "ctranslate2"),
                                           threads=args.threads)
        name = f"CTranslate2, {weights}"
        contenders[name] = lambda texts, translator=translator: translator.translate(
            texts, beam_size=4, alpha=0.6, decode_margin=MARGIN)
        sizes[name] = size_mb(os.path.join(export, "ctranslate2", "model.bin"))

    expected = saved_model(sentences)
    same = {name: float(np.mean([a == b for a, b in zip(run(sentences), expected)]))
            for name, run in contenders.items()}
    runs = {batch: {name: lambda run=run, batch=batch: [run(texts) for texts in batches[batch]]
                    for name, run in contenders.items()} for batch in batches}
    times = {batch: timed_interleaved(runs[batch], warmup=1, repeats=args.repeats)
             for batch in batches}
    cpu = timed_interleaved(runs[1], warmup=0, repeats=args.repeats, clock=time.process_time)
    tokenizer = tensorflow_text.SentencepieceTokenizer(
        open(os.path.join(run, "tokenizer.model"), "rb").read())
    lengths = tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy()
    tokens = int(np.minimum(lengths + 1 + MARGIN, 64 if args.preset == "small" else 256).sum())
    print(f"\nMachine: {machine()}; {args.threads} threads for LiteRT, onnxruntime and "
          f"CTranslate2. Preset {args.preset}, unigram vocabulary {vocab}, beam 4; "
          f"{len(sentences)} Ding sentences of {lengths.min()}-{lengths.max()} tokens "
          f"({tokens} output tokens); median of {args.repeats}.\n")
    reference = "translate.onnx, float32"
    print(f"{'':28s} {'MB':>7s} {'batch 1 ms':>11s} {'x onnx':>7s} {'cpu ms':>7s} {'x onnx':>7s} "
          f"{'batch 16 tok/s':>15s} {'x onnx':>7s} {'same':>5s}")
    for name in contenders:
        latency, work = times[1][name] / len(sentences), cpu[name] / len(sentences)
        print(f"{name:28s} {sizes[name]:7.1f} {latency * 1000:11.0f} "
              f"{times[1][reference] / times[1][name]:7.2f} {work * 1000:7.0f} "
              f"{cpu[reference] / cpu[name]:7.2f} {tokens / times[BATCH][name]:15.0f} "
              f"{times[BATCH][reference] / times[BATCH][name]:7.2f} {same[name]:5.2f}")
    print(f"\nOpenNMT-tf's users report {OPENNMT_TF_SMALL_MB} MB .tflite files for small models; "
          f"a tenth is {OPENNMT_TF_SMALL_MB / 10:.1f} MB.")


if __name__ == "__main__":
    main()
