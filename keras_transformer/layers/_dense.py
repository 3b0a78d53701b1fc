"""Dense projections applied to every position of a sequence."""

from keras import ops

from keras_transformer.layers._shapes import size


def over_positions(dense, x):
    """`dense(x)` for `x` `(batch, length, features)`, as one 2-D product
    over the `batch * length` positions.

    The same numbers as `dense(x)`, with fewer operations at run time: on
    TensorFlow, Keras' Dense on 3-D input goes through `tf.tensordot`, which
    computes the shapes of its reshapes with about eight operations per
    call when the batch is not known in advance. In a decoding step, whose
    matrices are small, such shape arithmetic was most of the operations
    TensorFlow ran (about 400 a step), each with its scheduling cost. Here a
    length known when the graph is built (1 in a decoding step) costs no
    operation at all. (Sizes unknown when the graph is built, as inside a
    loop whose shapes are left free, are read at run time.)
    """
    if len(x.shape) != 3:
        return dense(x)
    y = dense(ops.reshape(x, (-1, size(x, -1))))
    return ops.reshape(y, (-1, size(x, 1), size(y, -1)))
