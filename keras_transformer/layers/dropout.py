"""Dropout (paper section 5.4: rate 0.1 on each sub-layer's output and on
the embedding sums; optionally on the attention weights), with the mask of
the JAX backend drawn from fewer random bits."""

import math

import keras

# An element is dropped when its 16-bit draw is below round(rate * _DRAWS).
_DRAWS = 2**16


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """Keras' `Dropout`, whose mask on JAX takes 16 random bits an element.

    Keras on JAX draws each element with `jax.random.bernoulli`: one call of
    the threefry-2x32 generator an element, whose 64 output bits it folds
    into one 32-bit uniform. Here one call gives four elements their 16-bit
    draws, a quarter of the generator's work: on an H100 the base model's
    dropout bits took 1.44 ms of a 45 ms update (docs/benchmarks-log.md).
    An element is dropped when its draw is below round(rate * 65,536), so
    rate 0.1 drops with probability 6,554 / 65,536 = 0.100006, and the kept
    ones are scaled, in float32, by the inverse of the exact keep
    probability: the expectation is kept exactly.

    The same arguments, seed and state as Keras' layer (a model's
    checkpoints do not change); other backends, `noise_shape` and a rate
    within 1 / 65,536 of 1 use Keras' own.
    """

    def call(self, inputs, training=False):
        threshold = round(self.rate * _DRAWS)
        if (not training or self.rate == 0 or self.noise_shape is not None
                or threshold >= _DRAWS or keras.backend.backend() != "jax"):
            return super().call(inputs, training=training)
        return _sixteen_bit_dropout(inputs, threshold, self.seed_generator.next())


def _sixteen_bit_dropout(inputs, threshold, key):
    """`inputs` with the elements whose 16-bit draw is below `threshold`
    zeroed and the others scaled by 65,536 / (65,536 - threshold); the
    draws from the threefry-2x32 generator under `key` (uint32 `(2,)`, a
    Keras seed generator's), counting 0, 1, ..., four draws a count."""
    import jax
    import jax.numpy as jnp
    from jax.extend.random import threefry2x32_p

    size = math.prod(inputs.shape)
    counts = jax.lax.iota(jnp.uint32, -(-size // 4))
    key = jnp.asarray(key, jnp.uint32)
    words = threefry2x32_p.bind(key[0], key[1], jnp.zeros_like(counts), counts)
    draws = jax.lax.bitcast_convert_type(jnp.stack(words, axis=-1), jnp.uint16)
    keep = jnp.reshape(jnp.reshape(draws, (-1,))[:size], inputs.shape) >= threshold
    scale = _DRAWS / (_DRAWS - threshold)
    return jnp.where(keep, (inputs.astype(jnp.float32) * scale).astype(inputs.dtype),
                     jnp.zeros_like(inputs))
