"""What the backend tests (`tests/backends/`) share."""

import keras
import numpy as np

from keras_transformer.models import BASE, transformer
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID

BACKENDS = ("tensorflow", "jax", "torch")
"""The Keras backends the layers and the model are tested on."""


def numpy(x):
    """A backend tensor (or anything array-like) as a NumPy array. PyTorch
    tensors that require gradients refuse `np.asarray`; this takes any."""
    return keras.ops.convert_to_numpy(x)


def partner():
    """The backend that loads the files this process's backend saves in
    tests/backends' exchange: the next in `BACKENDS`, round. Over the three
    runs every backend loads the files natively saved on the backend before
    it, and its own files as its partner saved them again, so each pair is
    crossed in both directions with three processes, not six."""
    index = BACKENDS.index(keras.backend.backend())
    return BACKENDS[(index + 1) % len(BACKENDS)]


VOCAB = 40
"""Source vocabulary of the small models (the target's too where shared)."""


def small_models():
    """`{name: (config, target_vocab_size)}`: small models in the variants
    whose code paths differ."""
    config = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=16, d_ff=32,
                          num_heads=4, max_length=64)
    return {
        "paper": (config, None),
        "pre_norm_learned_separate": (
            config.replace(norm_first=True, positional_encoding="learned",
                           shared_vocabulary=False),
            VOCAB + 3,
        ),
        # Marian's conventions: its sinusoid table, a logits bias, and
        # padding that is the last id, not 0.
        "marian_ids": (
            config.replace(sinusoid="marian", logits_bias=True, pad_id=VOCAB - 1,
                           decoder_start_id=VOCAB - 1, eos_id=0),
            None,
        ),
    }


def small_model(name, seed=0):
    """The variant `name` of `small_models()`, its weights drawn with `seed`
    (and a logits bias that is not all zeros)."""
    config, target_vocab_size = small_models()[name]
    keras.utils.set_random_seed(seed)
    model = transformer(config, VOCAB, target_vocab_size)
    if config.logits_bias:
        bias = model.target_embedding.bias
        bias.assign(np.linspace(-1, 1, bias.shape[0]).astype("float32"))
    return model


def batch(config, seed=0, rows=3):
    """Source `(rows, 7)` and target `(rows, 6)` ids; sentence 1 is shorter
    on both sides, padded with the config's padding id."""
    rng = np.random.default_rng(seed)
    real = [i for i in range(VOCAB) if i != config.pad_id]
    source = rng.choice(real, size=(rows, 7)).astype("int32")
    target = rng.choice(real, size=(rows, 6)).astype("int32")
    source[1, 4:] = config.pad_id
    target[1, 3:] = config.pad_id
    return source, target


REVERSE_VOCAB = 24
"""Ids 4 ... 23 are the reverse task's symbols; 0 to 3 pad, unknown, start, end."""


def reverse_arrays(seed, count, min_length=4, max_length=8):
    """The reverse task (as `keras_transformer.data.synthetic`, in NumPy
    for `fit`): `({"source_ids", "target_ids"}, labels)`, each `(count,
    max_length + 1)` int32, padded with 0. The source is `min_length` to
    `max_length` symbols and the end id; the labels are the symbols reversed
    and the end id; the target (the decoder input) is the start id and the
    reversed symbols."""
    rng = np.random.default_rng(seed)
    shape = (count, max_length + 1)
    source, target, labels = (np.zeros(shape, "int32") for _ in range(3))
    for row, length in enumerate(rng.integers(min_length, max_length + 1, count)):
        symbols = rng.integers(EOS_ID + 1, REVERSE_VOCAB, length)
        source[row, :length + 1] = np.append(symbols, EOS_ID)
        target[row, :length + 1] = np.insert(symbols[::-1], 0, BOS_ID)
        labels[row, :length + 1] = np.append(symbols[::-1], EOS_ID)
    return {"source_ids": source, "target_ids": target}, labels


def exact_match(model, inputs, labels):
    """Fraction of rows whose every label (the end included) is the argmax
    of the teacher-forced logits."""
    predicted = np.argmax(numpy(model(inputs, training=False)), axis=-1)
    return float(np.mean(np.all((predicted == labels) | (labels == PAD_ID), axis=1)))
