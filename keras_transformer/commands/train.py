"""Trains a Transformer translation model.

    keras-transformer train --output runs/ding --preset small --dataset ding \\
        --time-budget-minutes 15

    keras-transformer train --output runs/wmt-base --preset base \\
        --dataset wmt14_translate/de-en --source-language en --target-language de \\
        --strategy mirrored --precision mixed_float16

    keras-transformer train --output runs/opus-finetuned --init-from runs/opus-de-en \\
        --dataset ding --steps 2000 --batch-tokens 4096

    KERAS_BACKEND=jax keras-transformer train --output runs/wmt-base --preset base \\
        --dataset wmt14_translate/de-en --source-language en --target-language de \\
        --strategy data-parallel --precision mixed_bfloat16

Writes the tokenizer, checkpoints, TensorBoard logs, model.keras and
averaged.keras to --output (see keras_transformer/run_folder.py). Run the
same command again to resume a stopped run. --init-from fine-tunes an earlier
run or an imported pretrained model (keras-transformer import): its
weights, tokenizer and config, with a short warmup to a low peak learning
rate (keras_transformer.training.fine_tuning_recipe). The Keras backend
(KERAS_BACKEND, else ~/.keras/keras.json) trains: TensorFlow, JAX or PyTorch
(keras_transformer/training/backends.py says what each offers).
"""

import argparse

import dataclasses

from keras_transformer import cli
from keras_transformer.names import ALL_STRATEGIES, PRESETS, TOKENIZER_TYPES, TRAINING_PRECISIONS
from keras_transformer.run_folder import RunOptions

DEFAULTS = {field.name: field.default for field in dataclasses.fields(RunOptions)}


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=cli.HelpFormatter)
    p.add_argument("--output", required=True, help="output folder (resumed if it exists)")
    data = p.add_argument_group("data")
    data.add_argument("--dataset", default=DEFAULTS["dataset"],
                      help="'ding', a TFDS translation dataset, or a folder of local files")
    data.add_argument("--source-language")
    data.add_argument("--target-language")
    data.add_argument("--data-dir", help="TFDS data folder")
    data.add_argument("--ding-path", default=DEFAULTS["ding_path"])
    data.add_argument("--vocab-size", type=cli.positive_int, default=DEFAULTS["vocab_size"],
                      help="SentencePiece vocabulary (the paper: about 37000 for EN-DE)")
    data.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES,
                      default=DEFAULTS["tokenizer_type"],
                      help="SentencePiece algorithm: bpe (the paper's), or unigram, which an "
                           "export's LiteRT file can tokenize inside (docs/on-device.md)")
    data.add_argument("--sentence-repeats", type=cli.positive_int,
                      default=DEFAULTS["sentence_repeats"],
                      help="read each pair whose source is a whole sentence (4+ words ending "
                           "in . ? or !) this many times per pass")
    data.add_argument("--sentences-last", type=cli.fraction, metavar="FRACTION",
                      default=DEFAULTS["sentences_last"],
                      help="the last FRACTION of the updates (of those expected in "
                           "--time-budget-minutes) read only the pairs whose source is a whole "
                           "sentence")
    model = p.add_argument_group("model and recipe")
    model.add_argument("--preset", choices=PRESETS, default=DEFAULTS["preset"])
    model.add_argument("--init-from", metavar="RUN",
                       help="fine-tune the model of this run or imported folder (replaces "
                            "--preset and --vocab-size)")
    model.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="FIELD=VALUE", help="override a TransformerConfig field (repeatable)")
    model.add_argument("--steps", type=cli.positive_int,
                       help="updates (default: the preset's train_steps)")
    model.add_argument("--time-budget-minutes", type=cli.positive_float,
                       help="stop training after this long")
    model.add_argument("--batch-tokens", type=cli.positive_int,
                       help="tokens per update and side (default: the preset's)")
    model.add_argument("--accumulate", type=cli.positive_int, default=1,
                       help="micro-batches per update (gradient accumulation)")
    hardware = p.add_argument_group("hardware")
    hardware.add_argument("--strategy", choices=ALL_STRATEGIES, default=DEFAULTS["strategy"],
                          help="mirrored, multi_worker, tpu: TensorFlow's tf.distribute; "
                               "data-parallel: keras.distribution on JAX (every local device, "
                               "or every host's with KERAS_DISTRIBUTION_* set)")
    hardware.add_argument("--precision", choices=TRAINING_PRECISIONS,
                          default=DEFAULTS["precision"])
    hardware.add_argument("--xla", action="store_true",
                          help="compile the training step with XLA (TensorFlow; JAX always does)")
    logging = p.add_argument_group("checkpoints and logs")
    logging.add_argument("--checkpoint-every-steps", type=cli.non_negative_int,
                         default=DEFAULTS["checkpoint_every_steps"], help="0: none by steps")
    logging.add_argument("--checkpoint-every-minutes", type=cli.positive_float)
    logging.add_argument("--keep-checkpoints", type=cli.positive_int,
                         help="default: the preset's average_checkpoints")
    logging.add_argument("--eval-every-steps", type=cli.positive_int,
                         default=DEFAULTS["eval_every_steps"],
                         help="validation loss and BLEU interval")
    logging.add_argument("--bleu-sentences", type=cli.non_negative_int,
                         default=DEFAULTS["bleu_sentences"])
    logging.add_argument("--calibrate-sentences", type=cli.non_negative_int,
                         default=DEFAULTS["calibrate_sentences"],
                         help="validation sentences the run's calibrator (the confidence of "
                              "its translations: docs/trust.md) is fitted on at the end; 0: "
                              "none")
    logging.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    cli.add_verbose_argument(p)
    return p


def options_from(args):
    from keras_transformer.models import TransformerConfig  # after parsing: Keras

    return RunOptions(
        output_dir=args.output, init_from=args.init_from, dataset=args.dataset, source_language=args.source_language,
        target_language=args.target_language, data_dir=args.data_dir, ding_path=args.ding_path,
        preset=args.preset, overrides=TransformerConfig.parse_overrides(args.overrides),
        vocab_size=args.vocab_size, tokenizer_type=args.tokenizer_type, strategy=args.strategy,
        precision=args.precision,
        xla=args.xla, steps=args.steps, time_budget_minutes=args.time_budget_minutes,
        batch_tokens=args.batch_tokens, accumulation_steps=args.accumulate,
        checkpoint_every_steps=args.checkpoint_every_steps,
        checkpoint_every_minutes=args.checkpoint_every_minutes,
        keep_checkpoints=args.keep_checkpoints, eval_every_steps=args.eval_every_steps,
        bleu_sentences=args.bleu_sentences, sentence_repeats=args.sentence_repeats,
        sentences_last=args.sentences_last,
        calibrate_sentences=args.calibrate_sentences, seed=args.seed,
    )


def parse(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.init_from and (args.preset != DEFAULTS["preset"]
                           or args.vocab_size != DEFAULTS["vocab_size"]
                           or args.tokenizer_type != DEFAULTS["tokenizer_type"]):
        p.error("--init-from takes the model and tokenizer of that run; drop --preset, "
                "--vocab-size and --tokenizer-type (change fields with --set FIELD=VALUE).")
    if (args.dataset.startswith("prepared:")
            and args.tokenizer_type != DEFAULTS["tokenizer_type"]):
        p.error("--dataset prepared:DIR trains with the shards' tokenizer; give "
                "--tokenizer-type to prepare-data instead.")
    if args.checkpoint_every_steps == 0 and not args.checkpoint_every_minutes:
        p.error("--checkpoint-every-steps 0 needs --checkpoint-every-minutes (a run must "
                "save checkpoints to be resumed and averaged).")
    from keras_transformer.training import backends

    backends.check(args.strategy, args.xla, precision=args.precision)
    return args


INTERRUPTED = cli.RESUMABLE


def main():
    """Trains, resumes or fine-tunes the run the command line describes."""
    args = parse()
    from keras_transformer.training.run import run_training

    run_training(options_from(args))
