"""The layers inside models a user builds with plain Keras: they train, and
Keras masks flow through them."""

import keras
import numpy as np
import pytest

from keras_transformer import layers

VOCAB, LENGTH = 20, 8


def _parity_task(seed=0, count=256):
    """Label: does token 1 occur in the (padded) sequence? Needs attention."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, VOCAB, size=(count, LENGTH))
    lengths = rng.integers(3, LENGTH + 1, size=count)
    ids[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    has_one = rng.random(count) < 0.5
    ids[has_one, 0] = 1
    order = rng.permuted(np.tile(np.arange(LENGTH), (count, 1)), axis=1)
    for row in range(count):  # move the 1 to a random real position
        position = order[row][order[row] < lengths[row]][0]
        ids[row, 0], ids[row, position] = ids[row, position], ids[row, 0]
    return ids.astype("int32"), has_one.astype("float32")


def _fit_and_check_it_learns(model, seed):
    ids, labels = _parity_task(seed)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(ids, labels, epochs=12, batch_size=32, verbose=0)
    print(f"accuracy after 12 epochs: {history.history['accuracy'][-1]:.3f}")
    assert history.history["accuracy"][-1] > 0.9, history.history


@pytest.mark.slow
def test_functional_model_learns(learning_seed):
    keras.utils.set_random_seed(1234 + learning_seed)
    ids = keras.Input((None,), dtype="int32")
    x = layers.SharedEmbedding(VOCAB, 16)(ids)
    x = layers.SinusoidalPositionalEncoding()(x)
    x = layers.TransformerEncoderLayer(num_heads=2, d_ff=32, dropout=0.0)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    _fit_and_check_it_learns(keras.Model(ids, keras.layers.Dense(1, activation="sigmoid")(x)),
                             learning_seed)


@pytest.mark.slow
def test_sequential_model_learns_and_propagates_the_padding_mask(learning_seed):
    keras.utils.set_random_seed(1234 + learning_seed)
    model = keras.Sequential([
        keras.Input((None,), dtype="int32"),
        layers.SharedEmbedding(VOCAB, 16),
        layers.LearnedPositionalEmbedding(2 * LENGTH),
        layers.TransformerEncoderLayer(num_heads=2, d_ff=32, dropout=0.0, norm_first=True),
        keras.layers.GlobalAveragePooling1D(),  # averages only unmasked positions
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    ids, _ = _parity_task()
    # With the mask flowing, extra padding does not change the prediction.
    padded = np.pad(ids[:4], ((0, 0), (0, 5)))
    np.testing.assert_allclose(model(ids[:4]), model(padded), atol=1e-5)
    _fit_and_check_it_learns(model, learning_seed)


class TinyTranslator(keras.Model):
    """A subclassed encoder-decoder built from the package's layers."""

    def __init__(self):
        super().__init__()
        self.embedding = layers.SharedEmbedding(VOCAB, 16)
        self.positions = layers.SinusoidalPositionalEncoding()
        self.encoder = layers.TransformerEncoderLayer(2, 32, dropout=0.0)
        self.decoder = layers.TransformerDecoderLayer(2, 32, dropout=0.0)

    def call(self, inputs):
        source, target = inputs
        memory = self.encoder(self.positions(self.embedding(source)))
        hidden = self.decoder(self.positions(self.embedding(target)), memory)
        return self.embedding(hidden, reverse=True)


@pytest.mark.slow
def test_subclassed_encoder_decoder_learns_to_copy(learning_seed):
    keras.utils.set_random_seed(1234 + learning_seed)
    rng = np.random.default_rng(learning_seed)
    source = rng.integers(2, VOCAB, size=(512, 6)).astype("int32")
    target_in = np.concatenate([np.ones((512, 1), "int32"), source[:, :-1]], axis=1)
    model = TinyTranslator()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit((source, target_in), source, epochs=15, batch_size=32, verbose=0)
    print(f"accuracy after 15 epochs: {history.history['accuracy'][-1]:.3f}")
    assert history.history["accuracy"][-1] > 0.9, history.history
