"""Sizes of tensors whose shapes may be only partly known when a graph is
built."""

from keras import ops


def size(x, axis):
    """The size of `x` along `axis`: a Python int when it is known when the
    graph is built (it then costs no operation at run time, and shapes made
    from it stay known), else read at run time."""
    return x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]
