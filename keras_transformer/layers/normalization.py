"""Layer normalisation (paper section 3.1, after each residual sum), with a
hand-written gradient on the JAX backend."""

import functools

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """Keras' `LayerNormalization`; on JAX, over the last axis with its scale
    and offset, its gradient is written out (`_jax_layer_norm`).

    Differentiating Keras' formulation, XLA kept float32 intermediates of
    the whole input for the backward pass; the written-out gradient keeps
    the input as it came (bfloat16 in mixed precision) and one mean and one
    inverse deviation a row, and takes the input's gradient from two row
    means: XLA's analysis of the base model's training update gives 10-14%
    fewer temporary bytes (docs/benchmarks-log.md). The same weights,
    arguments and forward values as Keras' layer; other backends and other
    settings use Keras' own.
    """

    def call(self, inputs):
        last = len(inputs.shape) - 1
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        if (keras.backend.backend() != "jax" or axes not in ([-1], [last])
                or not (self.center and self.scale) or self.rms_scaling):
            return super().call(inputs)
        return _jax_layer_norm()(inputs, keras.ops.convert_to_tensor(self.gamma),
                                 keras.ops.convert_to_tensor(self.beta), self.epsilon)


@functools.cache
def _jax_layer_norm():
    """`layer_norm(x, gamma, beta, epsilon)`: (x - mean) / sqrt(variance +
    epsilon) * gamma + beta over the last axis, computed in float32 and
    returned in `x`'s dtype, a `jax.custom_vjp` with the gradient written
    out (made on first use: JAX is imported only on its backend)."""
    import jax
    import jax.numpy as jnp

    def forward(x, gamma, beta, epsilon):
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        centered = x32 - mean
        inverse = jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=-1, keepdims=True) + epsilon)
        normed = centered * inverse
        output = normed * gamma.astype(jnp.float32) + beta.astype(jnp.float32)
        return output.astype(x.dtype), (x, mean, inverse, gamma, beta)

    def backward(epsilon, saved, output_gradient):
        x, mean, inverse, gamma, beta = saved
        normed = (x.astype(jnp.float32) - mean) * inverse
        dy = output_gradient.astype(jnp.float32)
        rows = tuple(range(x.ndim - 1))
        scaled = dy * gamma.astype(jnp.float32)
        x_gradient = inverse * (scaled - jnp.mean(scaled, axis=-1, keepdims=True)
                                - normed * jnp.mean(scaled * normed, axis=-1, keepdims=True))
        return (x_gradient.astype(x.dtype), jnp.sum(dy * normed, axis=rows).astype(gamma.dtype),
                jnp.sum(dy, axis=rows).astype(beta.dtype))

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
    def layer_norm(x, gamma, beta, epsilon):
        return forward(x, gamma, beta, epsilon)[0]

    layer_norm.defvjp(forward, backward)
    return layer_norm
