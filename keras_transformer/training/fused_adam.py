"""Keras' Adam with TensorFlow's fused update kernel.

Keras 3's Adam updates a variable with about ten element-wise TensorFlow
ops (two moment updates, a square root, a division, three assignments),
each a full pass over memory. TensorFlow's `ResourceApplyAdam` kernel does
the same update in one pass (and has GPU, TPU and XLA kernels), which
makes a training step faster (docs/benchmarks-log.md, "Training").
Its formula is Keras' (Kingma and Ba's, with the bias corrections folded
into the step size), and the slots are Keras' own, so checkpoints are
interchangeable with `keras.optimizers.Adam`.
"""

import keras
import tensorflow as tf
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam`, same arguments and results, updating dense
    gradients with one fused kernel per variable. Sparse gradients
    (`tf.IndexedSlices`) and `amsgrad` take Keras' own update."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        step = ops.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=ops.power(beta_1, step),
            beta2_power=ops.power(beta_2, step),
            lr=ops.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=ops.cast(self.epsilon, dtype),
            grad=ops.cast(gradient, dtype),
        )


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable; for a
    `tf.distribute` variable inside `Strategy.extended.update` (where Keras
    calls `update_step`), that of the current device's copy."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle
