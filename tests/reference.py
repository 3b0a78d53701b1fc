"""Plain NumPy versions of the paper's formulas, written independently of the
layers, for the tests to compare against."""

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def dense(x, layer):
    bias = 0.0 if layer.bias is None else np.asarray(layer.bias)
    return x @ np.asarray(layer.kernel) + bias


def layer_norm(x, layer, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * np.asarray(layer.gamma) + np.asarray(layer.beta)


def multi_head_attention(layer, query, value, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V per head, heads concatenated, then W^O.

    `mask` is boolean `(batch, Tq, Tk)`, True = attend. Returns the output and
    the attention weights `(batch, heads, Tq, Tk)`.
    """
    h, dk, dv = layer.num_heads, layer.key_dim, layer.value_dim
    q = dense(query, layer.query_dense)
    k = dense(value, layer.key_dense)
    v = dense(value, layer.value_dense)
    batch, tq, tk = query.shape[0], query.shape[1], value.shape[1]
    outputs, weights = [], []
    for head in range(h):
        qh = q[..., head * dk:(head + 1) * dk]
        kh = k[..., head * dk:(head + 1) * dk]
        vh = v[..., head * dv:(head + 1) * dv]
        scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(dk)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        w = softmax(scores)
        weights.append(w)
        outputs.append(w @ vh)
    concatenated = np.concatenate(outputs, axis=-1)
    assert concatenated.shape == (batch, tq, h * dv)
    return dense(concatenated, layer.output_dense), np.stack(weights, axis=1)


def feed_forward(layer, x):
    """max(0, x W1 + b1) W2 + b2."""
    return dense(np.maximum(dense(x, layer.inner_dense), 0.0), layer.output_dense)


def sinusoid_table(length, d_model, start=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same), by loops."""
    table = np.zeros((length, d_model))
    for row, pos in enumerate(range(start, start + length)):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[row, 2 * i] = np.sin(angle)
            table[row, 2 * i + 1] = np.cos(angle)
    return table
