"""What reduced precision and quantization do to translations: BLEU and
chrF (sacreBLEU) on a training run's held-out test sentences, for our
Translator in float32 and bfloat16, the run's exported CTranslate2 model in
float32 and int8, and its ONNX graphs (`OnnxTranslator`) in float32 and
int8, each compared with the float32 result of the same runtime.

    python examples/demo.py --output runs/demo            # a trained run
    python export/export_model.py runs/demo --output exports/demo --formats onnx ctranslate2
    python export/export_model.py runs/demo --output exports/demo-int8 --formats onnx \
        --quantization int8
    python benchmarks/translation_quality.py runs/demo --export exports/demo \
        --int8-export exports/demo-int8

Sentences: the first `--limit` whole sentences (4+ words ending in . ? or !)
of the run's test split, the demo's "test, whole sentences" row; beam 4
and alpha 0.6 (the model's defaults). CTranslate2 ranks finished
hypotheses by its own length penalty; see docs/export.md (CTranslate2).
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def keras_runs(run_dir):
    from keras_transformer.decoding import Translator

    for precision in ("float32", "bfloat16"):
        translator = Translator.from_directory(run_dir, precision=precision)
        yield f"Translator {precision}", translator.translate


def ctranslate2_runs(export_dir):
    from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator

    folder = os.path.join(export_dir, "ctranslate2")
    for compute_type in ("float32", "int8"):
        translator = CTranslate2Translator(folder, compute_type=compute_type)
        yield f"CTranslate2 {compute_type}", translator.translate


def onnx_runs(export_dir, int8_export_dir):
    from keras_transformer.runtimes.onnx_runner import OnnxTranslator

    for weights, folder in (("float32", export_dir), ("int8", int8_export_dir)):
        translator = OnnxTranslator(os.path.join(folder, "onnx"))
        yield f"ONNX runner {weights}", translator.translate


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a trained run (examples/demo.py or train.py output)")
    parser.add_argument("--export", help="its export folder (export/export_model.py), for "
                                         "CTranslate2 and float32 ONNX")
    parser.add_argument("--int8-export", help="an export with --quantization int8, for int8 "
                                              "ONNX (with --export)")
    parser.add_argument("--limit", type=int, default=500)
    args = parser.parse_args()

    from keras_transformer.evaluation import run_corpus, score, select_pairs

    pairs = select_pairs(run_corpus(args.run_dir).pairs("test").as_numpy_iterator(),
                         limit=args.limit, only_sentences=True)
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    print(f"{len(pairs)} held-out test sentences of {args.run_dir}\n")
    runs = list(keras_runs(args.run_dir))
    if args.export and os.path.isdir(os.path.join(args.export, "ctranslate2")):
        runs += list(ctranslate2_runs(args.export))
    if args.export and args.int8_export:
        runs += list(onnx_runs(args.export, args.int8_export))
    print(f"{'':24s} {'BLEU':>6s} {'chrF':>6s} {'dBLEU':>6s} {'dchrF':>6s} "
          f"{'same output':>12s} {'seconds':>8s}")
    baseline = {}
    for name, translate in runs:
        start = time.perf_counter()
        hypotheses = translate(sources)
        seconds = time.perf_counter() - start
        scores = score(hypotheses, references)
        runtime = name.rsplit(" ", 1)[0]
        base_scores, base_hypotheses = baseline.setdefault(runtime, (scores, hypotheses))
        same = sum(a == b for a, b in zip(hypotheses, base_hypotheses)) / len(hypotheses)
        print(f"{name:24s} {scores.bleu:6.2f} {scores.chrf:6.2f} "
              f"{scores.bleu - base_scores.bleu:+6.2f} {scores.chrf - base_scores.chrf:+6.2f} "
              f"{same:12.1%} {seconds:8.1f}")


if __name__ == "__main__":
    main()
