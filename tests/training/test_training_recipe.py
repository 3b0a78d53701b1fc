"""The paper's schedule, optimiser and label-smoothed loss against their
formulas, gradient accumulation against one large batch, and the parts of
a run's recipe around them: the time budget and whole sentences last."""

import dataclasses
import os
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.files import ding_file
from helpers.marian_files import sentence_pairs
from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer import textfiles
from keras_transformer.models import BASE, SMALL, transformer
from keras_transformer.run_folder import RunOptions
from keras_transformer.training import (
    FusedAdam,
    LabelSmoothedCrossEntropy,
    LinearDecaySchedule,
    Trainer,
    TransformerSchedule,
    learning_rate_schedule,
    make_strategy,
    paper_optimizer,
    token_statistics,
)
from keras_transformer.training.run import SentencesLast, TimeBudget, run_training


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 10_000, 100_000])
def test_schedule_matches_the_formula(step):
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    # The optimizer's counter starts at 0 for the first update (paper step 1).
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6)


def test_schedule_peaks_at_warmup_and_serialises():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, scale=2.0)
    rates = [float(schedule(s)) for s in range(300)]
    assert int(np.argmax(rates)) == 99
    assert rates[99] == pytest.approx(2.0 * 256**-0.5 * 100**-0.5, rel=1e-6)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert float(clone(1234)) == float(schedule(1234))
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(restored(50)) == float(schedule(50))


def test_linear_decay_keeps_the_papers_warmup_and_reaches_zero_at_its_end():
    paper = TransformerSchedule(d_model=256, warmup_steps=100, scale=0.5)
    linear = learning_rate_schedule(SMALL.replace(warmup_steps=100, learning_rate_decay="linear"),
                                    total_steps=400)
    assert isinstance(linear, LinearDecaySchedule)
    peak = 0.5 * 256**-0.5 * 100**-0.5
    for step in (1, 50, 100):  # the same warmup and peak
        assert float(linear(step - 1)) == pytest.approx(float(paper(step - 1)), rel=1e-6)
    for step in (101, 250, 399, 400, 500):  # then a straight line to zero at 400
        assert float(linear(step - 1)) == pytest.approx(
            max(0.0, peak * (400 - step) / 300), rel=1e-6, abs=1e-12)
    linear.total_steps.assign(1000.0)  # what TimeBudget moves
    assert float(linear(549)) == pytest.approx(peak * 450 / 900, rel=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(linear))
    assert float(restored(549)) == float(linear(549))
    with pytest.raises(ValueError, match="total_steps > warmup_steps"):
        LinearDecaySchedule(256, 100, 1.0, total_steps=100)


def test_time_budget_ends_the_linear_decay_where_the_measured_rate_runs_out(monkeypatch):
    schedule = LinearDecaySchedule(64, 10, 1.0, total_steps=10_000)
    budget = TimeBudget(minutes=10, schedule=schedule, last_step=10_000)
    budget.set_model(keras.Sequential())
    clock = iter(range(0, 10_000, 2))  # one update every 2 seconds
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    budget.on_train_begin()
    for step in range(1, 101):
        budget.on_train_batch_end(step - 1, {"step": step})
    # At update 100, 200 s in: 400 s left at 100 updates per 200 s.
    assert float(schedule.total_steps) == pytest.approx(100 + 400 * 100 / 200)
    for step in range(101, 301):
        budget.on_train_batch_end(step - 1, {"step": step})
    assert budget.model.stop_training and float(schedule.total_steps) == pytest.approx(300, abs=3)


def test_the_last_fraction_of_a_run_reads_whole_sentences_alone(monkeypatch):
    """`SentencesLast` sets its variable after update 80 of 100 (the last
    20%), from the start of a run resumed past it, and under a time budget
    at 80% of the updates the budget expects once it has measured (with the
    paper's schedule too, which the budget does not move)."""
    callback = SentencesLast(tf.Variable(0), 0.2, 100, start=0)
    phases = []
    for step in range(1, 101):
        callback.on_train_batch_end(step - 1, {"step": step})
        phases.append(int(callback.phase.numpy()))
    assert phases == [0] * 79 + [1] * 21 and callback.switched_at == 80
    resumed = SentencesLast(tf.Variable(0), 0.2, 100, start=85)
    assert int(resumed.phase.numpy()) == 1 and resumed.switched_at == 85
    budget = TimeBudget(minutes=10, schedule=TransformerSchedule(64, 10), last_step=10_000)
    budget.set_model(keras.Sequential())
    clock = iter(range(0, 10_000, 2))  # one update every 2 seconds: 300 in the budget
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    budget.on_train_begin()
    timed = SentencesLast(tf.Variable(0), 0.2, 10_000, start=0, budget=budget)
    assert int(timed.phase.numpy()) == 0
    for step in range(1, 301):
        budget.on_train_batch_end(step - 1, {"step": step})
        timed.on_train_batch_end(step - 1, {"step": step})
        if timed.switched_at:
            break
    assert budget.expected_end == pytest.approx(300, abs=3)
    assert timed.switched_at == pytest.approx(240, abs=3) and int(timed.phase.numpy()) == 1


@pytest.mark.slow
def test_a_run_reads_whole_sentences_alone_in_its_last_part_or_refuses_in_one_line(tmp_path):
    """`sentences_last=0.5` on a Ding file of words and sentences: the run's
    summary (run.json) says its input switched after update 3 of 6, and
    resumed to 8 updates it reads them from its first; on a Ding file of
    words alone the run is refused in one line before its folder is made."""
    words = ding_file(tmp_path / "words")
    mixed = tmp_path / "mixed"
    mixed.write_text(words.read_text(encoding="utf-8") + "".join(
        f"{de} :: {en}\n" for de, en in sentence_pairs(200)), encoding="utf-8")
    options = RunOptions(
        output_dir=str(tmp_path / "run"), dataset="ding", ding_path=str(mixed),
        data_dir=str(tmp_path / "tfds"), vocab_size=150, overrides=dict(
            d_model=32, d_ff=64, max_length=24), batch_tokens=512, steps=6, sentences_last=0.5,
        checkpoint_every_steps=2, eval_every_steps=2, bleu_sentences=0, calibrate_sentences=0,
        verbose=0)
    assert run_training(options)["sentences_only_after"] == 3
    assert textfiles.read_json(str(tmp_path / "run" / "run.json"))["sentences_only_after"] == 3
    resumed = run_training(dataclasses.replace(options, steps=8))
    assert (resumed["start_step"], resumed["sentences_only_after"]) == (6, 6)
    alone = dataclasses.replace(options, output_dir=str(tmp_path / "words-run"),
                                ding_path=str(words), data_dir=str(tmp_path / "tfds-words"))
    with pytest.raises(ValueError, match="hold no whole sentence") as error:
        run_training(alone)
    assert "\n" not in str(error.value) and not os.path.exists(alone.output_dir)
    with pytest.raises(ValueError, match="sentences_last must be >= 0 and < 1"):
        run_training(dataclasses.replace(options, sentences_last=1.0))


def test_paper_optimizer_uses_the_papers_adam():
    optimizer = paper_optimizer(BASE)
    assert isinstance(optimizer, FusedAdam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    assert rate == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-6)  # step 1


def _numpy_adam(weights, gradients, rates, beta_1, beta_2, epsilon):
    """Adam as Keras and TensorFlow define it: the bias corrections fold
    into the step size, epsilon is added to sqrt(v) uncorrected."""
    m, v = np.zeros_like(weights), np.zeros_like(weights)
    for t, (g, rate) in enumerate(zip(gradients, rates), start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        weights = weights - rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t) * m / (np.sqrt(v) + epsilon)
    return weights, m, v


@pytest.mark.parametrize("mode", ["eager", "graph", "xla", "loss_scale"])
def test_fused_adam_matches_the_adam_formula(mode):
    rng = np.random.default_rng(0)
    initial = rng.normal(size=(6, 5))
    gradients = [rng.normal(size=(6, 5)) for _ in range(4)]
    schedule = TransformerSchedule(d_model=16, warmup_steps=3)
    rates = [float(schedule(step)) for step in range(4)]
    variable = keras.Variable(initial.astype("float32"))
    # epsilon large enough for its place in the formula to show
    optimizer = FusedAdam(schedule, beta_1=0.8, beta_2=0.9, epsilon=0.05)
    if mode == "loss_scale":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=8.0)
    scale = 8.0 if mode == "loss_scale" else 1.0

    def apply(gradient):
        optimizer.apply([gradient * scale], [variable])

    if mode != "eager":
        apply = tf.function(apply, jit_compile=mode == "xla")
    for gradient in gradients:
        apply(tf.constant(gradient, tf.float32))
    inner = optimizer.inner_optimizer if mode == "loss_scale" else optimizer
    expected, m, v = _numpy_adam(initial, gradients, rates, 0.8, 0.9, 0.05)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inner._momentums[0].numpy(), m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inner._velocities[0].numpy(), v, rtol=1e-5, atol=1e-6)
    assert int(inner.iterations.numpy()) == 4


def test_fused_adam_takes_sparse_gradients_and_keras_adam_checkpoints(tmp_path):
    rng = np.random.default_rng(1)
    initial = rng.normal(size=(8, 3)).astype("float32")
    rows = tf.constant([1, 5, 1])
    values = [tf.constant(rng.normal(size=(3, 3)), tf.float32) for _ in range(3)]
    results = {}
    for name in ("keras", "fused"):
        variable = keras.Variable(initial)
        kind = keras.optimizers.Adam if name == "keras" else FusedAdam
        optimizer = kind(0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        for value in values:
            optimizer.apply([tf.IndexedSlices(value, rows, tf.constant([8, 3]))], [variable])
        results[name] = (variable, optimizer)
    np.testing.assert_allclose(results["fused"][0].numpy(), results["keras"][0].numpy(), rtol=1e-6)
    # A Keras Adam checkpoint resumes in FusedAdam: the slots are Keras' own.
    keras_variable, keras_adam = results["keras"]
    path = tf.train.Checkpoint(weights=keras_variable, optimizer=keras_adam).write(str(tmp_path / "adam"))
    variable = keras.Variable(np.zeros_like(initial))
    fused = FusedAdam(0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    fused.build([variable])
    tf.train.Checkpoint(weights=variable, optimizer=fused).read(path).assert_consumed()
    dense = tf.constant(rng.normal(size=(8, 3)), tf.float32)
    keras_adam.apply([dense], [keras_variable])
    fused.apply([dense], [variable])
    assert int(fused.iterations.numpy()) == 4
    np.testing.assert_allclose(variable.numpy(), keras_variable.numpy(), rtol=1e-6, atol=1e-7)


def _numpy_statistics(labels, logits, eps):
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    totals = dict(loss=0.0, nll=0.0, correct=0.0, tokens=0.0)
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = labels[b, t]
            if y == 0:
                continue
            q = np.full(vocab, eps / vocab)
            q[y] += 1 - eps
            totals["loss"] += -(q * log_probs[b, t]).sum()
            totals["nll"] += -log_probs[b, t, y]
            totals["correct"] += float(np.argmax(logits[b, t]) == y)
            totals["tokens"] += 1
    return totals


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_label_smoothed_loss_matches_its_formula_and_ignores_padding(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
    labels = rng.integers(1, 11, size=(3, 5)).astype("int32")
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    stats = {k: float(v) for k, v in token_statistics(labels, logits, eps).items()}
    expected = _numpy_statistics(labels, logits, eps)
    for key in expected:
        assert stats[key] == pytest.approx(expected[key], rel=1e-5), key
    # Whatever the padding rows hold does not matter.
    changed = logits.copy()
    changed[2, 1:] = 100.0
    assert float(token_statistics(labels, changed, eps)["loss"]) == pytest.approx(stats["loss"], rel=1e-6)


def test_keras_loss_is_the_mean_over_real_tokens():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 6, 9)).astype("float32")
    labels = rng.integers(1, 9, size=(2, 6)).astype("int32")
    labels[1, 2:] = 0
    expected = _numpy_statistics(labels, logits, 0.1)
    loss = LabelSmoothedCrossEntropy(0.1)(labels, logits)
    assert float(loss) == pytest.approx(expected["loss"] / expected["tokens"], rel=1e-5)
    with pytest.raises(ValueError, match="label_smoothing"):
        LabelSmoothedCrossEntropy(1.0)


@pytest.mark.slow
def test_gradient_accumulation_equals_one_large_batch():
    config = BASE.replace(num_encoder_layers=1, num_decoder_layers=1, d_model=16, d_ff=32,
                          num_heads=2, dropout=0.0, warmup_steps=5)
    examples = list(reverse_dataset(3, 8).as_numpy_iterator())

    def batch(rows):
        pad = lambda arrays: keras.utils.pad_sequences(arrays, padding="post")  # noqa: E731
        source, target, labels = (pad([examples[r][i] for r in rows]) for i in range(3))
        return {"source_ids": source, "target_ids": target}, labels

    def train(batches, accumulation_steps):
        keras.utils.set_random_seed(0)
        strategy = make_strategy("default")
        model = transformer(config, VOCAB)
        trainer = Trainer(model, paper_optimizer(config), strategy, accumulation_steps=accumulation_steps)
        dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=(
            {"source_ids": tf.TensorSpec([None, None], tf.int32),
             "target_ids": tf.TensorSpec([None, None], tf.int32)},
            tf.TensorSpec([None, None], tf.int32)))
        initial = model.get_weights()
        trainer.train(dataset.repeat(), steps=3, steps_per_epoch=3, verbose=0)
        return initial, model.get_weights()

    # Two micro-batches of unequal token counts, accumulated, versus one batch.
    initial_a, accumulated = train([batch(range(0, 3)), batch(range(3, 8))], accumulation_steps=2)
    initial_b, whole = train([batch(range(0, 8))], accumulation_steps=1)
    for a, b in zip(initial_a, initial_b):
        np.testing.assert_array_equal(a, b)
    moved = max(np.abs(w - i).max() for w, i in zip(whole, initial_b))
    difference = max(np.abs(a - b).max() for a, b in zip(accumulated, whole))
    assert moved > 1e-2 and difference < 1e-4, (moved, difference)
