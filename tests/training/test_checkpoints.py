"""Checkpoint averaging (paper section 6.1): the average is the element-wise
mean of the checkpoints, and a run keeps it as averaged.keras only where it
validates better than the final weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer.models import BASE, transformer
from keras_transformer.training import (
    CheckpointCallback,
    Trainer,
    average_checkpoints,
    checkpoint_paths,
    make_strategy,
    paper_optimizer,
)
from keras_transformer.training.run import _average_if_better

CONFIG = BASE.replace(num_encoder_layers=1, num_decoder_layers=1, d_model=16, d_ff=32,
                      num_heads=2, dropout=0.0, warmup_steps=10)


def _trainer(seed=0):
    keras.utils.set_random_seed(seed)
    strategy = make_strategy("default")
    model = transformer(CONFIG, VOCAB)
    return Trainer(model, paper_optimizer(CONFIG), strategy), strategy


def _batches():
    """One batch of the reverse task, as `data.token_batches` gives them."""
    examples = list(reverse_dataset(5, 32).as_numpy_iterator())
    pad = lambda arrays: keras.utils.pad_sequences(arrays, padding="post")  # noqa: E731
    source, target, labels = (pad([example[i] for example in examples]) for i in range(3))
    return tf.data.Dataset.from_tensors(({"source_ids": source, "target_ids": target}, labels))


def _save(trainer, strategy, folder, weights):
    """A checkpoint of `weights` in `folder`."""
    trainer.model.set_weights(weights)
    CheckpointCallback(folder, trainer.model, trainer.optimizer, strategy, keep=10,
                       every_steps=1).save()
    trainer.optimizer.iterations.assign_add(1)  # the next one gets its own number


def test_average_checkpoints_is_the_elementwise_mean(tmp_path):
    trainer, strategy = _trainer()
    rng = np.random.default_rng(0)
    sets = [[rng.normal(size=w.shape).astype(w.dtype) for w in trainer.model.get_weights()]
            for _ in range(3)]
    for weights in sets:
        _save(trainer, strategy, tmp_path, weights)
    paths = [str(tmp_path / f"ckpt-{i}") for i in range(3)]
    average_checkpoints(trainer.model, paths[1:])
    for averaged, second, third in zip(trainer.model.get_weights(), sets[1], sets[2]):
        np.testing.assert_allclose(averaged, (second + third) / 2, rtol=1e-6)


def test_safetensors_checkpoints_average_to_the_elementwise_mean(tmp_path):
    # The format of runs trained on JAX and PyTorch (SafetensorsCheckpoints:
    # the model's weights as weights/0, weights/1, ...), read here on TensorFlow.
    from safetensors.numpy import save_file

    trainer, _ = _trainer()
    rng = np.random.default_rng(1)
    sets = [[rng.normal(size=w.shape).astype(w.dtype) for w in trainer.model.get_weights()]
            for _ in range(2)]
    for step, weights in enumerate(sets, start=1):
        save_file({f"weights/{i}": w for i, w in enumerate(weights)},
                  str(tmp_path / f"ckpt-{step * 10}.safetensors"))
    paths = checkpoint_paths(tmp_path)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["ckpt-10.safetensors", "ckpt-20.safetensors"]
    average_checkpoints(trainer.model, paths)
    for averaged, first, second in zip(trainer.model.get_weights(), *sets):
        np.testing.assert_allclose(averaged, (first + second) / 2, rtol=1e-6)
    save_file({"weights/0": sets[0][0]}, str(tmp_path / "ckpt-30.safetensors"))
    before = trainer.model.get_weights()
    with pytest.raises(ValueError, match="ckpt-30.safetensors.* other shapes or another count"):
        average_checkpoints(trainer.model, checkpoint_paths(tmp_path))
    for kept, original in zip(trainer.model.get_weights(), before):  # left unchanged
        np.testing.assert_array_equal(kept, original)


@pytest.mark.slow
def test_a_run_keeps_the_average_only_where_it_validates_better(tmp_path, learning_seed):
    trainer, strategy = _trainer(learning_seed)
    data = _batches()
    untrained = trainer.model.get_weights()
    trainer.train(data.repeat(), steps=60, steps_per_epoch=60, verbose=0)
    trained, trained_perplexity = trainer.model.get_weights(), trainer.evaluate(data)["perplexity"]
    trainer.model.set_weights(untrained)
    untrained_perplexity = trainer.evaluate(data)["perplexity"]
    print(f"perplexity after 60 updates: {trained_perplexity / untrained_perplexity:.3f} of "
          "the untrained model's")
    assert trained_perplexity < 0.5 * untrained_perplexity

    # Checkpoints of the trained weights, the run ending on untrained ones:
    # the average validates better and is kept.
    _save(trainer, strategy, tmp_path / "a" / "checkpoints", trained)
    trainer.model.set_weights(untrained)
    report = _average_if_better(str(tmp_path / "a"), 1, trainer.model, trainer, data, save=True)
    assert report["kept"] == "average"
    assert report["val_perplexity_averaged"] < report["val_perplexity_final"]
    _assert_weights(tmp_path / "a" / "averaged.keras", trained)

    # The other way round: the final weights are kept.
    _save(trainer, strategy, tmp_path / "b" / "checkpoints", untrained)
    trainer.model.set_weights(trained)
    report = _average_if_better(str(tmp_path / "b"), 1, trainer.model, trainer, data, save=True)
    assert report["kept"] == "final weights"
    _assert_weights(tmp_path / "b" / "averaged.keras", trained)
    for now, expected in zip(trainer.model.get_weights(), trained):
        np.testing.assert_array_equal(now, expected)


def _assert_weights(path, expected):
    saved = keras.models.load_model(path, safe_mode=True).get_weights()
    for ours, theirs in zip(saved, expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
