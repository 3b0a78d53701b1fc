"""The whole job in one command: train, evaluate, export, translate, plot.

    keras-transformer demo                      # Ding German-English, 15 minutes of training
    keras-transformer demo --minutes 5 --output runs/quick
    keras-transformer demo --preset base --dataset wmt14_translate/de-en \\
        --source-language en --target-language de --strategy mirrored --minutes 0

Stages, each reporting its progress:
 1. train the SentencePiece tokenizer and the model (a time budget, or the
    preset's steps with --minutes 0), checkpointing as it goes, and average
    the last checkpoints; with a time budget, the small preset's width is
    chosen by timing updates on this machine (`training.sizing`); on Ding,
    whole sentences are read twice a pass, and alone in the last 35% of the
    updates;
 2. choose the length penalty on the validation whole sentences (4+ words
    ending in . ? or !; `evaluation.choose_length_penalty`) and report BLEU
    and chrF (sacreBLEU, with signatures) on held-out validation and test
    pairs: whole sentences and pairs of all kinds;
 3. export model.keras, the SavedModels and ONNX, each checked;
 4. translate a few German sentences through the SavedModel and through
    onnxruntime, side by side;
 5. draw the loss curves and attention maps (PNG files in OUTPUT/plots).
(`tools/demo.sh` sets up a virtual environment and the data first.)
"""

import argparse
import json
import os
import subprocess
import sys
import time

from keras_transformer import cli, cpu_features, run_folder, textfiles
from keras_transformer.names import LENGTH_PENALTIES, MIN_UPDATES, PRESETS, STRATEGIES, WIDTHS
from keras_transformer.run_folder import RunOptions

cli.use_tensorflow_backend()

# The stages import the TensorFlow side of the package inside their
# functions: --help and a bad option answer before TensorFlow loads.

GERMAN = [
    "Guten Morgen!",
    "Wo ist der Bahnhof?",
    "Ich habe keine Zeit.",
    "Das Wetter ist heute schön.",
    "Er hat seinen Schlüssel verloren.",
    "Kannst du mir bitte helfen?",
]


def stage(number, title):
    print(f"\n=== {number}. {title} ({time.strftime('%H:%M:%S')}) ===", flush=True)


def default_precision():
    """mixed_float16 on GPUs (loss-scaled; every CUDA GPU computes float16),
    mixed_bfloat16 on CPUs that compute bfloat16 natively (AVX-512 BF16 or
    AMX; `cpu_features.native_bfloat16`), else float32."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return "mixed_float16"
    return "mixed_bfloat16" if cpu_features.native_bfloat16() else "float32"


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=cli.HelpFormatter)
    p.add_argument("--output", default="runs/demo", help="the run's folder (resumed if it exists)")
    p.add_argument("--minutes", type=cli.non_negative_float, default=15.0,
                   help="training time budget; 0 trains for the preset's train_steps")
    p.add_argument("--steps", type=cli.positive_int, help="at most this many updates")
    p.add_argument("--preset", choices=PRESETS, default="small")
    p.add_argument("--width", choices=["auto"] + [str(w) for w in WIDTHS], default="auto",
                   help="the model's d_model (d_ff is four times it); auto: for the small "
                        "preset with a time budget, the widest that makes about "
                        f"{MIN_UPDATES:,} updates in it on this machine, else the preset's")
    p.add_argument("--dataset", default="ding")
    p.add_argument("--source-language")
    p.add_argument("--target-language")
    p.add_argument("--data-dir")
    p.add_argument("--vocab-size", type=cli.positive_int, default=8000)
    p.add_argument("--sentence-repeats", type=cli.positive_int,
                   help="read each training pair whose source is a whole sentence this many "
                        "times (default: 2 for Ding, whose sentences are 5%% of its pairs, "
                        "else 1)")
    p.add_argument("--sentences-last", type=cli.fraction, metavar="FRACTION",
                   help="the last FRACTION of the updates read only the pairs whose source is "
                        "a whole sentence (default: 0.35 for Ding, else 0)")
    p.add_argument("--alpha", type=cli.non_negative_float,
                   help="the length penalty (default: the best of "
                        f"{', '.join(map(str, LENGTH_PENALTIES))} on validation sentences)")
    p.add_argument("--strategy", choices=STRATEGIES, default="default")
    p.add_argument("--precision", default="auto",
                   help="float32, mixed_float16, mixed_bfloat16 or auto")
    p.add_argument("--test-sentences", type=cli.positive_int, default=500,
                   help="held-out whole sentences to score (per split)")
    p.add_argument("--test-pairs", type=cli.positive_int, default=1000,
                   help="held-out pairs of all kinds to score (per split)")
    cli.add_verbose_argument(p)
    return p


def width(args, precision):
    """The model's d_model: `--width`; else a resumed run's own; else, for
    the small preset with a time budget, the widest of `sizing.WIDTHS`
    whose measured update time here predicts `sizing.MIN_UPDATES` updates
    in the budget (so a slower CPU trains a narrower model that still makes
    enough updates); else the preset's."""
    from keras_transformer import models
    from keras_transformer.training.sizing import choose_width

    if args.width != "auto":
        return int(args.width)  # a resumed run of another width refuses it in one line
    if run_folder.has_config(args.output):
        return run_folder.load_config(args.output, option="--output").d_model
    if args.preset != "small" or not args.minutes:
        return models.PRESETS[args.preset].d_model
    print("Timing an update of each model width on this machine ...", flush=True)
    chosen, _ = choose_width(models.PRESETS[args.preset], args.vocab_size, args.minutes * 60,
                             precision)
    return chosen


def train(args):
    from keras_transformer import models
    from keras_transformer.training.run import run_training

    precision = default_precision() if args.precision == "auto" else args.precision
    d_model = width(args, precision)
    preset = models.PRESETS[args.preset]
    options = RunOptions(
        output_dir=args.output, dataset=args.dataset, source_language=args.source_language,
        target_language=args.target_language, data_dir=args.data_dir, preset=args.preset,
        overrides={} if d_model == preset.d_model else dict(d_model=d_model, d_ff=4 * d_model),
        vocab_size=args.vocab_size, strategy=args.strategy, precision=precision,
        sentence_repeats=args.sentence_repeats or (2 if args.dataset == "ding" else 1),
        sentences_last=(args.sentences_last if args.sentences_last is not None
                        else 0.35 if args.dataset == "ding" else 0.0),
        steps=args.steps, time_budget_minutes=args.minutes or None,
        # The small preset makes 2,000-4,000 updates in 15 minutes: average
        # the last 5 of checkpoints 100 updates apart, validate every 500.
        checkpoint_every_steps=100 if args.preset == "small" else 1000,
        eval_every_steps=500 if args.preset == "small" else 5000, bleu_sentences=100,
        calibrate_sentences=0,  # once the length penalty is chosen: `evaluate`
    )
    print(f"Preset {args.preset}, d_model {d_model}, dataset {args.dataset}, "
          f"strategy {args.strategy}, precision {precision}, "
          + (f"{args.minutes:g} minutes of training." if args.minutes else "the preset's steps."))
    return run_training(options)


def length_penalty(args, corpus):
    """`--alpha`, else the best on the validation whole sentences (those the
    scores use too), made the run's for every later stage; returns it and
    the validation chrF of each tried (None with --alpha)."""
    from keras_transformer.decoding import Translator
    from keras_transformer.evaluation import choose_length_penalty, select_pairs

    if args.alpha is not None:
        run_folder.set_length_penalty(args.output, args.alpha)
        return args.alpha, None
    print("Choosing the length penalty on validation sentences ...", flush=True)
    pairs = select_pairs(corpus.pairs("validation").as_numpy_iterator(),
                         limit=args.test_sentences, only_sentences=True)
    alpha, scores = choose_length_penalty(Translator.from_directory(args.output), pairs)
    chrf = {a: round(s.chrf, 2) for a, s in scores.items()}
    print(f"Validation chrF by length penalty: {chrf}; the run decodes with {alpha}.")
    run_folder.set_length_penalty(args.output, alpha)
    return alpha, chrf


def evaluate(args):
    from keras_transformer.decoding import Translator
    from keras_transformer.evaluation import evaluate_pairs, run_corpus
    from keras_transformer.training.run import calibrate

    corpus = run_corpus(args.output)
    alpha, alpha_chrf = length_penalty(args, corpus)
    print("Fitting the calibrator of the translations' confidence on validation sentences ...",
          flush=True)
    calibrate(args.output, corpus, backend="tensorflow")
    translator = Translator.from_directory(args.output)
    results, samples = {}, []
    for split in ("validation", "test"):
        for kind, only_sentences, limit in (("sentences", True, args.test_sentences),
                                            ("all pairs", False, args.test_pairs)):
            print(f"Translating {split} {kind} (beam {translator.beam_size}, alpha "
                  f"{translator.alpha}) ...", flush=True)
            scores, rows = evaluate_pairs(translator, corpus.pairs(split).as_numpy_iterator(),
                                          limit=limit, only_sentences=only_sentences,
                                          progress=True)
            results[f"{split} {kind}"] = scores
            if split == "test" and only_sentences:
                samples = rows[:8]
    print()
    for name, scores in results.items():
        print(f"{name:26s} {scores}")
    print("\nSample held-out test sentences:")
    for source, reference, hypothesis in samples:
        print(f"  source:     {source}\n  reference:  {reference}\n  hypothesis: {hypothesis}\n")
    return results, samples, {"alpha": alpha, "validation_sentences_chrf": alpha_chrf}


SAVED_MODEL_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # the SentencePiece ops of the graph
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))
print(json.dumps([t.decode() for t in out["translations"].numpy()]))
"""


def translate_exports(export_dir):
    from keras_transformer.runtimes.onnx_runner import OnnxTranslator

    # The SavedModel in a separate process that imports only TensorFlow and
    # TF Text, as a server would.
    served = subprocess.run(
        [sys.executable, "-c", SAVED_MODEL_PROCESS,
         run_folder.export_part(export_dir, "saved_model"), json.dumps(GERMAN)],
        capture_output=True, text=True, check=True)
    saved_model = json.loads(served.stdout.strip().splitlines()[-1])
    onnx = OnnxTranslator(run_folder.export_part(export_dir, "onnx")).translate(GERMAN)
    width = max(len(s) for s in GERMAN)
    print(f"{'German':{width}s} | {'SavedModel':30s} | onnxruntime")
    for german, a, b in zip(GERMAN, saved_model, onnx):
        print(f"{german:{width}s} | {a:30s} | {b}")
    return list(zip(GERMAN, saved_model, onnx))


def plot(args):
    from keras_transformer.decoding import Translator
    from keras_transformer.plots import plot_attention, plot_training_curves
    from keras_transformer.training.loop import METRICS_FILE

    folder = os.path.join(args.output, "plots")
    os.makedirs(folder, exist_ok=True)
    paths = [plot_training_curves(os.path.join(run_folder.logs_dir(args.output), METRICS_FILE),
                                  os.path.join(folder, "training_curves.png"))]
    translator = Translator.from_directory(args.output)
    sentence = "Ich habe keine Zeit."
    translation = translator.translate([sentence])[0]
    model = translator.model
    for layer in (0, model.config.num_decoder_layers - 1):
        paths.append(plot_attention(model, translator.tokenizer, sentence, translation,
                                    os.path.join(folder, f"attention_layer{layer + 1}.png"),
                                    layer=layer))
    for path in paths:
        print(f"Wrote {path}")
    return paths


def main():
    args = parser().parse_args()
    started = time.monotonic()
    stage(1, "Tokenizer and training")
    summary = train(args)
    stage(2, "BLEU and chrF on held-out pairs")
    results, samples, length_penalty_choice = evaluate(args)
    stage(3, "Export")
    from keras_transformer.export import export_run

    export_dir = os.path.join(args.output, "export")
    export_run(args.output, export_dir, overwrite=True)
    print(f"Exported to {export_dir}: model.keras, saved_model/, saved_model_core/, onnx/ "
          "(each loaded back and checked).")
    stage(4, "Translating through the exported SavedModel and ONNX")
    side_by_side = translate_exports(export_dir)
    stage(5, "Plots")
    plot(args)
    report = {
        "training": {k: summary[k] for k in ("start_step", "final_step", "training_seconds")},
        "scores": {name: {"bleu": s.bleu, "chrf": s.chrf, "bleu_signature": s.bleu_signature,
                          "chrf_signature": s.chrf_signature, "sentences": s.sentences}
                   for name, s in results.items()},
        "length_penalty": length_penalty_choice,
        "samples": samples, "exported_translations": side_by_side,
        "total_minutes": (time.monotonic() - started) / 60,
    }
    textfiles.write_json(os.path.join(args.output, "demo.json"), report)
    print(f"\nDone in {report['total_minutes']:.1f} minutes; results in "
          f"{os.path.join(args.output, 'demo.json')}.")


INTERRUPTED = cli.RESUMABLE
