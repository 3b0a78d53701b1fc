"""A whole training run, from a dataset name to a trained, averaged model in
a run folder (what `keras-transformer train` calls; the folder's layout:
`run_folder`).

Run the same command again on the same folder to resume a stopped run.

The recipe is the same on every Keras backend; the strategies, the trainer
and the checkpoint format are the backend's (`training.backends`), and the
model files are Keras' own, so that a run trained on JAX translates,
evaluates and exports on TensorFlow.

With `init_from` (`keras-transformer train --init-from RUN`) the run
fine-tunes: it starts from the weights, tokenizer and config of an earlier
run or an imported pretrained model (`keras-transformer import`), with the
learning-rate schedule of `fine_tuning_recipe`. A resumed fine-tuning run
continues from its own checkpoints.
"""

import contextlib
import dataclasses
import os
import shutil
import time

import keras
import tensorflow as tf

from keras_transformer import data, run_folder
from keras_transformer.run_folder import RunOptions
from keras_transformer.models import PRESETS, TransformerConfig, transformer
from keras_transformer.vocabularies.sentencepiece_text import MODEL_FILE
from keras_transformer.textfiles import check_output, clean_text
from keras_transformer.training import backends
from keras_transformer.training.checkpoints import (
    average_checkpoints,
    checkpoint_format,
    checkpoint_paths,
    latest_step,
)
from keras_transformer.training.distribution import set_precision
from keras_transformer.training.schedule import (
    LinearDecaySchedule,
    fine_tuning_recipe,
    learning_rate_schedule,
    paper_optimizer,
)
from keras_transformer.training.validation import BleuValidator


class TimeBudget(keras.callbacks.Callback):
    """Stops training after `minutes` of it (the final checkpoint is still
    written by `CheckpointCallback.on_train_end`).

    It also estimates where the time runs out (`expected_end`, None until
    then): after the first `MEASURE_SECONDS` (tracing and the input
    pipeline's start included) and then every `REESTIMATE_EVERY` updates,
    the update the step rate measured so far reaches at the deadline (at
    most `last_step`). With a `LinearDecaySchedule` it sets the schedule's
    `total_steps` there, so that the rate is near zero when training stops,
    on a fast machine or a slow one; `SentencesLast` starts its part there."""

    MEASURE_SECONDS = 60
    REESTIMATE_EVERY = 25

    def __init__(self, minutes, schedule=None, last_step=None):
        super().__init__()
        self.seconds = minutes * 60
        self.schedule = schedule if isinstance(schedule, LinearDecaySchedule) else None
        self.last_step = last_step
        self.expected_end = None

    def on_train_begin(self, logs=None):
        self.started, self.updates = time.monotonic(), 0

    def on_train_batch_end(self, batch, logs=None):
        elapsed = time.monotonic() - self.started
        self.updates += 1
        if elapsed >= self.seconds:
            self.model.stop_training = True
        elif elapsed >= self.MEASURE_SECONDS and self.updates % self.REESTIMATE_EVERY == 0:
            reached = logs["step"] + (self.seconds - elapsed) * self.updates / elapsed
            self.expected_end = min(reached, self.last_step or reached)
            if self.schedule is not None:
                self.schedule.total_steps.assign(
                    max(self.expected_end, self.schedule.warmup_steps + 1.0))


class SentencesLast(keras.callbacks.Callback):
    """Switches the training input to whole sentences alone (sets `phase`,
    `data.switched`'s variable, to 1) at the update where the run's last
    `fraction` begins: of its `last_step` updates, or, with a time budget,
    of those the `TimeBudget` expects once it has measured. A run resumed
    past that update (from `start`) reads whole sentences from its first.
    `switched_at`: the update after which they alone are read (None
    before)."""

    def __init__(self, phase, fraction, last_step, start, budget=None):
        super().__init__()
        self.phase, self.fraction, self.last_step, self.budget = phase, fraction, last_step, budget
        self.switched_at = None
        if budget is None:
            self._switch_if_past(start, last_step)

    def _switch_if_past(self, step, end):
        if self.switched_at is None and end is not None and step >= (1 - self.fraction) * end:
            self.phase.assign(1)
            self.switched_at = int(step)

    def on_train_batch_end(self, batch, logs=None):
        self._switch_if_past(logs["step"], self.last_step if self.budget is None
                             else self.budget.expected_end)


def resolve_config(options):
    """The run's `TransformerConfig`: the one saved in the folder when
    resuming (new overrides must agree with it), else preset + overrides, or
    with `init_from` that run's config with the fine-tuning schedule +
    overrides."""
    resuming = run_folder.has_config(options.output_dir)
    if options.init_from and resuming:
        # Resuming: the initial run is not needed.
        config = run_folder.load_config(options.output_dir)
    elif options.init_from:
        config = fine_tuning_recipe(run_folder.load_config(options.init_from))
    elif options.preset not in PRESETS:
        raise ValueError(f"Unknown preset {options.preset!r}; expected one of {sorted(PRESETS)}.")
    else:
        config = PRESETS[options.preset]
    config = config.replace(**options.overrides)
    if options.batch_tokens:
        config = config.replace(batch_tokens=options.batch_tokens)
    if resuming:
        existing = run_folder.load_config(options.output_dir)
        if existing != config:
            changed = sorted(k for k, v in config.to_dict().items() if existing.to_dict()[k] != v)
            raise ValueError(
                f"{options.output_dir!r} holds a run with another configuration "
                f"(differs in {changed}); use a new output folder or the same options."
            )
    return config


def prepare_tokenizer(options, corpus, chief):
    """Trains the shared SentencePiece model on the training split, or loads
    the run's (or, fine-tuning, the initial run's, copied into this one; or,
    training on prepared data, the data's). Training is seeded, so every
    worker of a multi-machine run builds the same model; only the chief
    keeps it in the output folder. Prepared data refuses a run or initial
    run with another tokenizer."""
    prepared = isinstance(corpus, data.PreparedCorpus)
    if run_folder.has_tokenizer(options.output_dir):
        tokenizer = run_folder.load_tokenizer(options.output_dir)
        if prepared:
            corpus.check_tokenizer(tokenizer, options.output_dir)
        return tokenizer
    if options.init_from or prepared:
        tokenizer = (run_folder.load_tokenizer(options.init_from) if options.init_from
                     else corpus.load_tokenizer())
        if prepared:
            corpus.check_tokenizer(tokenizer, options.init_from or corpus.directory)
        if chief:
            tokenizer.save(options.output_dir)
        return tokenizer
    path = os.path.join(options.output_dir, MODEL_FILE) if chief else None
    return data.train_corpus_tokenizer(corpus, path, options.vocab_size,
                                       options.tokenizer_sentences, options.seed,
                                       model_type=options.tokenizer_type)


def run_training(options):
    """Trains, saves and averages; returns a summary dict (also in run.json).

    The run's precision applies while it trains; Keras' global dtype policy
    is restored afterwards, so that models loaded later in the same process
    (to evaluate or export) are float32 like the saved weights."""
    backends.check(options.strategy, options.xla, precision=options.precision)
    if not 0 <= options.sentences_last < 1:
        raise ValueError(f"sentences_last must be >= 0 and < 1, got {options.sentences_last}.")
    previous_policy = keras.config.dtype_policy()
    set_precision(options.precision)
    try:
        return _train(options)
    finally:
        keras.config.set_dtype_policy(previous_policy)


def _train(options):
    backend = backends.current()
    strategy = backend.strategy(options.strategy)  # first: it sets what TensorFlow sees
    found = checkpoint_format(run_folder.checkpoints_dir(options.output_dir))
    if found and found != backend.checkpoint_format:
        raise ValueError(
            f"{options.output_dir} holds {found} checkpoints, which the Keras backend "
            f"{backend.name} does not resume ("
            + ("TensorFlow's" if found == "tensorflow" else "JAX's or PyTorch's")
            + " wrote them): resume it on that backend (KERAS_BACKEND), or train into a new "
            "--output (--init-from the run to start from its weights).")
    chief = backend.chief(strategy)
    keras.utils.set_random_seed(options.seed)
    config = resolve_config(options)
    corpus = data.corpus(options.dataset, options.source_language, options.target_language,
                         data_dir=options.data_dir, ding_path=options.ding_path)
    if (options.sentence_repeats != 1 or options.sentences_last) and isinstance(
            corpus, data.PreparedCorpus):
        raise ValueError(f"{options.dataset} holds token ids, in which whole sentences cannot be "
                         "told apart; train on the raw corpus to repeat them or read them last, "
                         "or drop --sentence-repeats and --sentences-last.")
    if options.sentences_last and next(iter(data.full_sentences(corpus.pairs("train"))),
                                       None) is None:
        raise ValueError(f"{options.dataset}'s training pairs hold no whole sentence (4+ words "
                         "ending in . ? or !) for the last part of the run to read; drop "
                         "--sentences-last.")
    with _removed_if_setup_fails(options.output_dir, chief):
        tokenizer = prepare_tokenizer(options, corpus, chief)
        start = latest_step(run_folder.checkpoints_dir(options.output_dir))
        # Fine-tuning starts from the initial run's weights; a resumed run
        # restores its own checkpoint instead (and needs no initial run).
        initial_weights = (run_folder.load_model(options.init_from).get_weights()
                           if options.init_from and not start else None)
        if chief:
            run_folder.write_config(options.output_dir, config)
    return _train_from(options, _Setup(backend, strategy, chief, config, corpus, tokenizer, start,
                                       initial_weights))


@contextlib.contextmanager
def _removed_if_setup_fails(output_dir, chief):
    """Creates the run's folder; if the block fails or is interrupted and
    the folder was new, removes it again, so that a bad dataset or option
    leaves no empty or half-prepared run behind (an existing run folder,
    being resumed, is left as it was)."""
    check_output(output_dir, overwrite=True, folder=True)
    created = not os.path.exists(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    try:
        yield
    except BaseException:
        if created and chief:
            shutil.rmtree(output_dir, ignore_errors=True)
        raise


@dataclasses.dataclass
class _Setup:
    """What `_train` prepares and `_train_from` trains with."""

    backend: backends.TensorFlowPieces  # or a subclass: the Keras backend's pieces
    strategy: object
    chief: bool
    config: TransformerConfig
    corpus: object
    tokenizer: object
    start: int
    initial_weights: list | None


def _training_input(options, setup, micro_batch_tokens, replicas, fixed_shapes, phase=None):
    """The training batches, and the length report of the training pairs;
    with `phase` (`SentencesLast`'s variable), the batches of the whole
    sentences alone once it is 1."""
    config, corpus, start = setup.config, setup.corpus, setup.start
    if isinstance(corpus, data.PreparedCorpus):
        # Token ids from shards, each worker reading its own files, resumed
        # where the checkpoint left the data (see data.prepared).
        report = corpus.length_report(config.max_length)
        return report, setup.backend.training_input(corpus.training_input(
            micro_batch_tokens, config.max_length, options.shuffle_buffer, options.seed,
            pad_id=config.pad_id, start_step=start, accumulation_steps=options.accumulation_steps,
            batch_multiple=1 if setup.backend.name == "tensorflow" else replicas,
            fixed_shapes=fixed_shapes), replicas)
    # The first pass (the length report's) tokenizes and fills the cache;
    # training reads the cache, tf.data autotuned again (no tokenizing, so no
    # Python: see data.encode_pairs). Blocks of pairs: see data.encode_blocks.
    def batches(pairs):
        encoded = data.encode_blocks(pairs, setup.tokenizer).cache()
        return encoded, data.block_token_batches(
            encoded.repeat(), micro_batch_tokens, config.max_length, batch_multiple=replicas,
            shuffle_buffer=options.shuffle_buffer, seed=options.seed + start,
            pad_id=config.pad_id, fixed_shapes=fixed_shapes)

    encoded, train = batches(data.repeat_full_sentences(corpus.pairs("train"),
                                                        options.sentence_repeats))
    report = data.length_report(encoded, config.max_length)
    if phase is not None:
        train = data.switched(phase, train, batches(data.full_sentences(corpus.pairs("train")))[1])
    return report, data.autotuned(train.prefetch(tf.data.AUTOTUNE))


def _train_from(options, setup):
    backend, strategy, config, tokenizer = setup.backend, setup.strategy, setup.config, \
        setup.tokenizer
    steps = options.steps or config.train_steps
    replicas = backend.replicas(strategy)
    fixed_shapes = backend.fixed_shapes(options.xla)
    micro_batch_tokens = config.batch_tokens // options.accumulation_steps
    phase = tf.Variable(0, trainable=False) if options.sentences_last else None
    report, train_batches = _training_input(options, setup, micro_batch_tokens, replicas,
                                            fixed_shapes, phase)
    print(f"Training data: {report}.")
    if options.sentence_repeats > 1:
        print(f"(Pairs whose source is a whole sentence are read {options.sentence_repeats} "
              "times a pass, and counted so.)")
    if options.sentences_last:
        print(f"(The last {options.sentences_last:.0%} of the updates read only the pairs whose "
              "source is a whole sentence.)")
    validation_pairs = setup.corpus.pairs("validation")
    validation_batches = data.token_batches(
        data.encode_pairs(validation_pairs, tokenizer), micro_batch_tokens, config.max_length,
        batch_multiple=replicas, pad_id=config.pad_id, fixed_shapes=fixed_shapes,
    ).cache()
    sample = list(validation_pairs.take(options.bleu_sentences).as_numpy_iterator())
    validators = [BleuValidator(tokenizer, [clean_text(s) for s, _ in sample],
                                [clean_text(t) for _, t in sample])] if sample else []

    with backend.scope(strategy):
        model = transformer(config, tokenizer.vocab_size, tokenizer.target_vocab_size)
        if setup.initial_weights is not None:
            model.set_weights(setup.initial_weights)
        schedule = learning_rate_schedule(config, total_steps=steps)
        optimizer = paper_optimizer(config, schedule)
        trainer = backend.trainer(model, optimizer, strategy, config.label_smoothing,
                                  options.accumulation_steps, options.xla)
    keep = options.keep_checkpoints or config.average_checkpoints
    callbacks = [backend.checkpoints(run_folder.checkpoints_dir(options.output_dir), trainer,
                                     strategy, keep=keep,
                                     every_steps=options.checkpoint_every_steps,
                                     every_minutes=options.checkpoint_every_minutes)]
    budget = TimeBudget(options.time_budget_minutes, schedule, steps) \
        if options.time_budget_minutes else None
    sentences_last = SentencesLast(phase, options.sentences_last, steps, setup.start, budget) \
        if phase is not None else None
    callbacks += [callback for callback in (budget, sentences_last) if callback is not None]
    print(f"Training {model.count_params() / 1e6:.1f}M parameters on {backend.name}, "
          f"{replicas} replica(s), from step {setup.start} to {steps}, {config.batch_tokens} "
          "tokens per update.")
    started = time.monotonic()
    history = trainer.train(
        train_batches, steps, callbacks=callbacks, steps_per_epoch=options.eval_every_steps,
        validation_data=validation_batches, validators=validators,
        log_dir=run_folder.logs_dir(options.output_dir), verbose=options.verbose,
    )
    summary = {
        "options": dataclasses.asdict(options),
        "data": dataclasses.asdict(report),
        "replicas": replicas,
        "start_step": setup.start,
        "backend": backend.name,
        "final_step": trainer.step,
        "training_seconds": time.monotonic() - started,
        "last_logs": history[-1] if history else None,
        "sentences_only_after": sentences_last and sentences_last.switched_at,
    }
    if getattr(trainer, "first_updates", None):
        summary["compiled_shapes"] = _compilation_report(trainer.first_updates)
    if setup.chief:
        run_folder.save_model(options.output_dir, model)
    # Every worker evaluates (the evaluation is collective); the chief saves.
    summary["averaging"] = _average_if_better(options.output_dir, keep, model, trainer,
                                              validation_batches, save=setup.chief)
    if setup.chief:
        run_folder.write_report(options.output_dir, summary)
        print(f"Saved model.keras and averaged.keras in {options.output_dir}.")
        if options.calibrate_sentences:
            calibrate(options.output_dir, setup.corpus, backend.name, options.calibrate_sentences)
    return summary


def calibrate(output_dir, corpus, backend, sentences=RunOptions.calibrate_sentences):
    """Fits the calibrator of the run in `output_dir` on `sentences` whole
    sentences of its `corpus`'s validation split
    (`evaluation.calibrate_run`), or says in one line why it has none."""
    from keras_transformer.evaluation import calibrate_run, select_pairs  # needs TensorFlow

    if backend != "tensorflow":
        print(f"No calibrator: translating runs on TensorFlow; run keras-transformer calibrate "
              f"{output_dir} there.")
        return
    try:
        pairs = select_pairs(corpus.pairs("validation").as_numpy_iterator(), limit=sentences,
                             only_sentences=True)
        report = calibrate_run(output_dir, pairs).report
    except (ValueError, OSError, tf.errors.OpError) as error:
        reason = str(error).splitlines()[0]
        print(f"No calibrator: {reason[:1].lower()}{reason[1:]}")
        return
    print(f"Fitted the run's calibrator on {report['sentences']} validation sentences "
          f"(cross-validated AUROC {report['auroc']:.3f}).")


def _compilation_report(first_updates):
    """What the first update of each batch shape cost (its compilation,
    mostly), printed and kept in run.json."""
    seconds = sorted(first_updates.values())
    print(f"Compiled the update for {len(seconds)} batch shapes: {sum(seconds):.0f} s in all "
          f"(first updates of {seconds[0]:.1f} to {seconds[-1]:.1f} s).")
    return {"count": len(seconds), "seconds": sum(seconds),
            "shapes": {"x".join(map(str, shape)): round(value, 2)
                       for shape, value in sorted(first_updates.items())}}


def _average_if_better(output_dir, last, model, trainer, validation_batches, save):
    """Averages the last `last` checkpoints (the paper's checkpoint
    averaging) and keeps the average as averaged.keras unless the final
    weights have the lower validation perplexity; then averaged.keras holds
    the final weights. A run stopped while it still
    improves fast (a short time budget) has checkpoints far behind its end,
    whose average is worse than the end. Returns what was compared and
    kept."""
    final_weights = model.get_weights()
    final = trainer.evaluate(validation_batches)["perplexity"]
    paths = checkpoint_paths(run_folder.checkpoints_dir(output_dir))[-last:]
    average_checkpoints(model, paths)
    averaged = trainer.evaluate(validation_batches)["perplexity"]
    kept = "final weights" if final < averaged else "average"
    if kept != "average":
        model.set_weights(final_weights)
    if save:
        run_folder.save_model(output_dir, model, averaged=True)
        print(f"Validation perplexity {averaged:.2f} for the average of {len(paths)} checkpoints "
              f"({', '.join(os.path.basename(p) for p in paths)}), {final:.2f} for the final "
              f"weights: averaged.keras holds the {kept}.")
    return {"checkpoints": paths, "val_perplexity_averaged": averaged,
            "val_perplexity_final": final, "kept": kept}


def average_run(output_dir, last=None, model=None, output_file=None):
    """Averages the last `last` checkpoints of a run (default: its config's
    `average_checkpoints`) and saves the model as `output_file` in the run
    (default: averaged.keras).

    `model` defaults to the run's `model.keras`. Returns the checkpoint paths
    averaged. The file is written to a temporary name and moved into place.
    """
    if model is None:
        model = run_folder.load_transformer(run_folder.model_path(output_dir))
    last = last or model.config.average_checkpoints
    paths = checkpoint_paths(run_folder.checkpoints_dir(output_dir))[-last:]
    average_checkpoints(model, paths)
    target = run_folder.save_model(output_dir, model, averaged=True, model_file=output_file)
    print(f"Averaged {len(paths)} checkpoints ({', '.join(os.path.basename(p) for p in paths)}) "
          f"into {target}.")
    return paths
