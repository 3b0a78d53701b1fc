"""Training with plain Keras on this process's backend: the paper's loss and
schedule against their formulas, `compile` and `fit` with them, a small
model that learns the reverse task, and the backend's own trainer reading a
schedule moved while it trains."""

import itertools

import keras
import numpy as np
import pytest

from helpers.backends import REVERSE_VOCAB, exact_match, numpy, reverse_arrays
from keras_transformer.models import BASE, transformer
from keras_transformer.training import (
    LabelSmoothedCrossEntropy,
    LinearDecaySchedule,
    TransformerSchedule,
    backends,
    paper_optimizer,
    token_statistics,
)

BACKEND = keras.backend.backend()
CONFIG = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=32, d_ff=64,
                      num_heads=4, max_length=16, warmup_steps=200)


def _numpy_loss(labels, logits, eps, pad_id):
    """Cross-entropy against q = (1 - eps) onehot(y) + eps / V, summed over
    the real tokens; and their count."""
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps / logits.shape[-1])
    np.put_along_axis(q, labels[..., None], 1 - eps + eps / logits.shape[-1], axis=-1)
    real = labels != pad_id
    return float((-(q * log_probs).sum(-1) * real).sum()), float(real.sum())


@pytest.mark.parametrize("pad_id", [0, 5])
def test_label_smoothed_loss_matches_its_formula(pad_id):
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(3, 5, 11)) * 3).astype("float32")
    labels = rng.integers(0, 11, size=(3, 5)).astype("int32")
    labels[labels == pad_id] = (pad_id + 1) % 11
    labels[0, 3:] = labels[2, 1:] = pad_id
    total, tokens = _numpy_loss(labels, logits.astype("float64"), 0.1, pad_id)
    loss = LabelSmoothedCrossEntropy(0.1, pad_id=pad_id)(labels, logits)
    assert float(numpy(loss)) == pytest.approx(total / tokens, rel=1e-5)
    statistics = token_statistics(labels, logits, 0.1, pad_id=pad_id)
    assert float(numpy(statistics["loss"])) == pytest.approx(total, rel=1e-5)
    assert float(numpy(statistics["tokens"])) == tokens


def _value_and_gradient(function, logits):
    """`function(logits)` (a scalar) and its gradient, with this backend's
    own automatic differentiation."""
    if BACKEND == "jax":
        import jax

        value, gradient = jax.value_and_grad(function)(logits)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        logits = tf.constant(logits)
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = function(logits)
        gradient = tape.gradient(value, logits)
    else:
        import torch

        logits = torch.tensor(logits, requires_grad=True)
        value = function(logits)
        value.backward()
        gradient = logits.grad
    return float(numpy(value)), numpy(gradient)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_pass_statistics_and_gradients_match_numpy(dtype):
    """The loss's statistics and its hand-written gradient (p - q for the
    smoothed loss, p - onehot for the NLL, in the logits' dtype) against
    NumPy in float64, as the loss of the previous release computed them
    (log-softmax, argmax): same values, same gradients, same accuracy."""
    rng = np.random.default_rng(1)
    eps, pad_id, vocab = 0.1, 0, 37
    logits = (rng.normal(size=(4, 6, vocab)) * 4).astype("float32")
    labels = rng.integers(1, vocab, size=(4, 6)).astype("int32")
    labels[1, 2:] = labels[3, 4:] = pad_id
    predicted = logits.argmax(-1)
    labels[0, :3] = predicted[0, :3]  # some hits
    logits = keras.ops.convert_to_numpy(keras.ops.cast(logits, dtype)) if dtype != "float32" \
        else logits
    exact = np.asarray(logits, "float64")
    real = labels != pad_id
    log_probs = exact - np.log(np.exp(exact).sum(-1, keepdims=True))
    q = np.full(exact.shape, eps / vocab)
    np.put_along_axis(q, labels[..., None], 1 - eps + eps / vocab, axis=-1)
    onehot = np.zeros(exact.shape)
    np.put_along_axis(onehot, labels[..., None], 1.0, axis=-1)
    smoothed, nll = -(q * log_probs).sum(-1), -(onehot * log_probs).sum(-1)
    probs = np.exp(log_probs)
    # d/dz of sum(smoothed) / tokens + 0.5 sum(nll), over the real tokens:
    expected_gradient = real[..., None] * ((probs - q) / real.sum() + 0.5 * (probs - onehot))

    def objective(z):
        statistics = token_statistics(labels, z, eps, pad_id=pad_id)
        return statistics["loss"] / statistics["tokens"] + 0.5 * statistics["nll"]

    value, gradient = _value_and_gradient(objective, keras.ops.convert_to_tensor(logits))
    expected = (smoothed * real).sum() / real.sum() + 0.5 * (nll * real).sum()
    assert value == pytest.approx(expected, rel=1e-5)
    assert str(gradient.dtype) == dtype  # no float32 copy of the logits' gradient
    # bfloat16 keeps 8 significant bits: a rounding of the result, 2^-9 relative.
    rtol, atol = (1e-5, 1e-7) if dtype == "float32" else (2**-8, 1e-4)
    np.testing.assert_allclose(np.asarray(gradient, "float64"), expected_gradient, rtol=rtol,
                               atol=atol * np.abs(expected_gradient).max())
    statistics = token_statistics(labels, keras.ops.convert_to_tensor(logits), eps, pad_id)
    hits = (exact.argmax(-1) == labels) & real
    assert float(numpy(statistics["correct"])) == hits.sum() >= 3
    assert float(numpy(statistics["nll"])) == pytest.approx((nll * real).sum(), rel=1e-5)


def test_schedule_matches_the_formula():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    for step in (1, 3999, 4000, 4001, 100_000):  # the optimizer counts from 0
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert float(numpy(schedule(step - 1))) == pytest.approx(expected, rel=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(numpy(restored(10))) == float(numpy(schedule(10)))


@pytest.mark.slow
def test_fit_with_the_papers_loss_and_schedule_saves_and_loads(tmp_path, learning_seed):
    keras.utils.set_random_seed(learning_seed)
    config = CONFIG.replace(warmup_steps=10)
    model = transformer(config, REVERSE_VOCAB)
    optimizer = paper_optimizer(config)
    expected_kind = "FusedAdam" if BACKEND == "tensorflow" else "Adam"
    assert type(optimizer).__name__ == expected_kind
    model.compile(optimizer=optimizer,
                  loss=LabelSmoothedCrossEntropy(config.label_smoothing, pad_id=config.pad_id))
    inputs, labels = reverse_arrays(learning_seed, 32)
    before = model.evaluate(inputs, labels, batch_size=32, verbose=0)
    model.fit(inputs, labels, batch_size=32, epochs=20, verbose=0)
    after = model.evaluate(inputs, labels, batch_size=32, verbose=0)
    print(f"{BACKEND}: loss after 20 updates: {after / before:.3f} of the first")
    assert after < 0.9 * before, (before, after)
    total, tokens = _numpy_loss(labels, numpy(model(inputs)).astype("float64"), 0.1, config.pad_id)
    assert after == pytest.approx(total / tokens, rel=1e-4)
    assert int(numpy(optimizer.iterations)) == 20
    assert float(numpy(optimizer.learning_rate)) == pytest.approx(
        float(numpy(TransformerSchedule(32, 10)(20))), rel=1e-6)
    # The compiled model saves with its loss and optimizer, and loads safely.
    model.save(tmp_path / "trained.keras")
    loaded = keras.models.load_model(tmp_path / "trained.keras", safe_mode=True)
    assert isinstance(loaded.loss, LabelSmoothedCrossEntropy)
    assert int(numpy(loaded.optimizer.iterations)) == 20
    assert loaded.evaluate(inputs, labels, batch_size=32, verbose=0) == pytest.approx(after, rel=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "jax",
    reason="shown on JAX, to keep the suite's time: fit is checked on every backend by the "
           "test above, and TensorFlow's learning test is tests/test_learning.py (Trainer)",
)
def test_a_small_model_learns_the_reverse_task_with_fit(learning_seed):
    keras.utils.set_random_seed(learning_seed)
    config = CONFIG.replace(dropout=0.0)
    model = transformer(config, REVERSE_VOCAB)
    model.compile(optimizer=paper_optimizer(config),
                  loss=LabelSmoothedCrossEntropy(config.label_smoothing, pad_id=config.pad_id))
    held_out = reverse_arrays(99, 500)
    before = exact_match(model, *held_out)
    # Updates of 64 pairs, fit on 100 at a time (on JAX fit keeps the
    # weights in its own state until it returns) and scored after each
    # hundred; it stops at the first score of 0.95 or more, 1,000 updates
    # the cap. Seeds 0-3 reached it after 400 to 600 updates (0.95-1.0).
    # Trained on to 1,000, the same runs spiked down and back (seed 3: 0.27
    # at 900, seed 0: 0.932 at 1,000) at this learning rate, which does
    # not decay: the bar is that the model learns the task, not where it
    # is at one fixed update.
    inputs, labels = reverse_arrays(learning_seed, 64_000)
    for start in range(0, len(labels), 6_400):
        part = slice(start, start + 6_400)
        model.fit({name: value[part] for name, value in inputs.items()}, labels[part],
                  batch_size=64, epochs=1, verbose=0)
        after = exact_match(model, *held_out)
        if after >= 0.95:
            break
    print(f"{BACKEND}: exact match on 500 held-out sequences: {before:.3f} before, "
          f"{after:.3f} after {(start + 6_400) // 64} updates with fit")
    assert before < 0.01 and after >= 0.95


def _scheduled_trainer():
    """`(config, schedule, trainer)`: this backend's trainer of a small
    model whose linear-decay schedule (2 warm-up steps, 100 in all) a test
    may move. (The same program for both tests that use it: JAX compiles
    it once.)"""
    backend = backends.current()
    strategy = backend.strategy("default")
    config = CONFIG.replace(warmup_steps=2)
    with backend.scope(strategy):
        model = transformer(config, REVERSE_VOCAB)
        schedule = LinearDecaySchedule(config.d_model, 2, 1.0, total_steps=100)
        trainer = backend.trainer(model, paper_optimizer(config, schedule), strategy, 0.1, 1,
                                  False)
    return config, schedule, trainer


@pytest.mark.slow
def test_the_learning_rate_follows_a_schedule_moved_while_training():
    # `TimeBudget` moves `LinearDecaySchedule.total_steps` between updates;
    # this backend's compiled update must read its value of the moment (on
    # JAX a variable read inside `jax.jit` would be compiled in as a constant).
    # One update an epoch: the logs at an epoch's end are those of its last
    # update on every backend (within an epoch, JAX's run one update behind).
    config, schedule, trainer = _scheduled_trainer()
    totals, seen = [100.0, 50.0, 9.0, 7.0], []

    class Move(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((logs["step"], logs["learning_rate"]))
            schedule.total_steps.assign(totals[int(logs["step"])])

    inputs, labels = reverse_arrays(0, 8)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        batches = tf.data.Dataset.from_tensors((inputs, labels)).repeat()
    else:
        batches = itertools.repeat((inputs, labels))
    trainer.train(batches, steps=3, steps_per_epoch=1, callbacks=[Move()], verbose=0)
    assert [step for step, _ in seen] == [1, 2, 3]
    for (step, rate), total in zip(seen, totals):
        expected = LinearDecaySchedule(config.d_model, 2, 1.0, total_steps=total)(step)
        assert rate == pytest.approx(float(numpy(expected)), rel=1e-5), (step, total)


def test_each_updates_statistics_come_back_once_and_in_order():
    # `train_step` returns the statistics of the updates finished since its
    # last call (on JAX the one before, read after the next is dispatched)
    # and `pending_sums` the rest: over four updates of batches with
    # different numbers of real tokens, each update's come back once, in
    # order, whatever the backend's lag; and the epoch's logs count all four.
    _, _, trainer = _scheduled_trainer()
    batches = [reverse_arrays(seed, 8) for seed in range(4)]
    tokens = [float(np.count_nonzero(labels)) for _, labels in batches]
    assert len(set(tokens)) > 1

    def dataset():
        if BACKEND == "tensorflow":
            import tensorflow as tf

            return tf.data.Dataset.from_generator(
                lambda: iter(batches),
                output_signature=({name: tf.TensorSpec((8, 9), tf.int32)
                                   for name in ("source_ids", "target_ids")},
                                  tf.TensorSpec((8, 9), tf.int32))).repeat()
        return itertools.cycle(batches)

    iterator = trainer._training_iterator(dataset())
    returned = [trainer.train_step(iterator) for _ in range(4)] + [trainer.pending_sums()]
    assert [sums["tokens"] for sums in returned if sums] == tokens
    assert trainer.pending_sums() == {}

    recorded = []
    for name in ("train_step", "pending_sums"):
        def recording(*arguments, method=getattr(trainer, name)):
            recorded.append(method(*arguments))
            return recorded[-1]

        setattr(trainer, name, recording)
    history = trainer.train(dataset(), steps=8, steps_per_epoch=4, verbose=0)
    assert [logs["step"] for logs in history] == [8]
    assert sum(sums.get("tokens", 0.0) for sums in recorded) == sum(tokens)
    assert history[0]["loss"] == pytest.approx(
        sum(sums.get("loss", 0.0) for sums in recorded) / sum(tokens), rel=1e-6)
