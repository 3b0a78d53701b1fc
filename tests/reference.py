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


def sublayer_connection(x, sublayer, norm, norm_first, epsilon):
    """Post-norm LayerNorm(x + Sublayer(x)), or pre-norm x + Sublayer(LayerNorm(x))."""
    if norm_first:
        return x + sublayer(layer_norm(x, norm, epsilon))
    return layer_norm(x + sublayer(x), norm, epsilon)


def encoder_layer(layer, x, padding):
    """Self-attention over the real positions (`padding` True), then the
    feed-forward network, each in its sub-layer connection."""
    mask = np.broadcast_to(padding[:, None, :], (x.shape[0], x.shape[1], x.shape[1]))
    eps = layer.layer_norm_epsilon
    x = sublayer_connection(x, lambda h: multi_head_attention(layer.self_attention, h, h, mask)[0],
                            layer.self_attention_norm, layer.norm_first, eps)
    return sublayer_connection(x, lambda h: feed_forward(layer.feed_forward, h),
                               layer.feed_forward_norm, layer.norm_first, eps)


def decoder_layer(layer, x, memory, memory_padding):
    """Causal self-attention, attention over the real positions of the
    encoder output `memory`, then the feed-forward network."""
    batch, length, source_length = x.shape[0], x.shape[1], memory.shape[1]
    causal = np.broadcast_to(np.tril(np.ones((length, length), bool)), (batch, length, length))
    cross = np.broadcast_to(memory_padding[:, None, :], (batch, length, source_length))
    eps = layer.layer_norm_epsilon
    x = sublayer_connection(x, lambda h: multi_head_attention(layer.self_attention, h, h, causal)[0],
                            layer.self_attention_norm, layer.norm_first, eps)
    x = sublayer_connection(x, lambda h: multi_head_attention(layer.cross_attention, h, memory, cross)[0],
                            layer.cross_attention_norm, layer.norm_first, eps)
    return sublayer_connection(x, lambda h: feed_forward(layer.feed_forward, h),
                               layer.feed_forward_norm, layer.norm_first, eps)


def transformer_logits(model, source, target):
    """The whole encoder-decoder (Figure 1) in NumPy, from the weights of a
    `Transformer` with the paper's (or Marian's) sinusoids or learned
    positions: embeddings times sqrt(d_model) plus positions, N encoder and N
    decoder layers (with a final LayerNorm each in a pre-norm model), logits
    tied to the target embedding (plus Marian's bias)."""
    config = model.config
    pad = config.pad_id

    def embed(ids, embedding, positions):
        x = np.asarray(embedding.embeddings)[ids]
        if config.scale_embedding:
            x = x * np.sqrt(config.d_model)
        if config.positional_encoding == "learned":
            return x + np.asarray(positions.position_embeddings)[:ids.shape[1]]
        table = sinusoid_table(ids.shape[1], config.d_model)
        if config.sinusoid == "marian":  # the same sines and cosines, not interleaved
            return x + np.concatenate([table[:, 0::2], table[:, 1::2]], axis=-1)
        assert config.sinusoid == "paper", config.sinusoid
        return x + table

    def final_norm(x, norm):
        return x if norm is None else layer_norm(x, norm, config.layer_norm_epsilon)

    memory = embed(source, model.source_embedding, model.source_positions)
    for layer in model.encoder_layers:
        memory = encoder_layer(layer, memory, source != pad)
    memory = final_norm(memory, model.encoder_norm)
    x = embed(target, model.target_embedding, model.target_positions)
    for layer in model.decoder_layers:
        x = decoder_layer(layer, x, memory, source != pad)
    x = final_norm(x, model.decoder_norm)
    logits = x @ np.asarray(model.target_embedding.embeddings).T
    return logits if not config.logits_bias else logits + np.asarray(model.target_embedding.bias)
