"""Multi-head scaled dot-product attention (paper section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Mask convention, everywhere in this package: True (or 1) means "may attend",
False (or 0) means "masked out". This is Keras' convention; PyTorch's
`nn.MultiheadAttention` uses the opposite one.
"""

import math

import keras
from keras import ops

from keras_transformer.layers import _validation
from keras_transformer.layers._dense import over_positions
from keras_transformer.layers._shapes import size
from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with padding, causal and explicit masks, and a cache.

    Args:
        num_heads: number of heads h.
        key_dim: size of each head's queries and keys, d_k.
        value_dim: size of each head's values, d_v. Defaults to `key_dim`.
            Table 3 rows (A) and (B) change these independently of d_model.
        dropout: dropout rate on the attention weights (0 in the paper).
        output_dim: size of the output projection W^O. Defaults to the last
            dimension of the query.
        use_bias: whether the query, value and output projections have biases
            (the key projection never has one: the softmax cancels it).
        kernel_initializer: for the four projections.
        bias_initializer: for the four projections.

    Call arguments:
        query: `(batch, target_length, dim)`.
        value: `(batch, source_length, dim)`; `query` again for self-attention.
            May be `None` when `cache` holds precomputed keys and values.
        key: defaults to `value`.
        attention_mask: boolean, broadcastable to
            `(batch, target_length, source_length)`; True means attend.
        use_causal_mask: forbid attending to later positions. With a
            self-attention cache, query row r sits at position
            `cache_update_index + r`.
        cache: `(keys, values)`, each heads-first:
            `(batch, heads, cache_length, dim)`.
            With `cache_update_index` this is a self-attention cache: the keys
            and values of `value` are written at that index and attention runs
            over the whole cache (slots not yet written must be masked out,
            which the causal mask does). Without `cache_update_index` it holds
            keys and values precomputed by `key_value_cache` (cross-attention)
            and `key`/`value` are ignored.
        cache_update_index: integer scalar, position of the first query row.
        append_to_cache: a self-attention cache that grows instead: `cache`
            holds the keys and values of the positions before `query` only,
            `(batch, heads, past_length, dim)` (past_length may be 0), and
            this call's keys and values are concatenated behind them, so the
            returned cache is `past_length + target_length` long and query
            row r sits at position `past_length + r`. No
            `cache_update_index`. This is the form onnxruntime's BeamSearch
            operator passes between decoder calls; the fixed-shape form above
            is the one for `tf.while_loop` and XLA.
        return_attention_scores: also return the attention weights,
            `(batch, heads, target_length, source_length)`.
        value_mask, key_mask: Keras masks of `value` and `key`, filled in
            automatically when those inputs carry one (for example from an
            `Embedding(mask_zero=True)`), combined with `attention_mask`.

    Returns:
        `output`, then the attention weights if requested, then the updated
        cache if a cache was given (a tuple whenever there is more than one).

    Example:

    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.random.normal((3, 5, 8))
    >>> tuple(layer(x, x, use_causal_mask=True).shape)
    (3, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        output_dim=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        _validation.check_positive_int("num_heads", num_heads)
        _validation.check_positive_int("key_dim", key_dim)
        if value_dim is not None:
            _validation.check_positive_int("value_dim", value_dim)
        _validation.check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.output_dim = output_dim
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self._dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None, key_shape=None):
        def dense(units, name, use_bias=self.use_bias):
            return keras.layers.Dense(
                units,
                use_bias=use_bias,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name=name,
            )

        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_dense = dense(self.num_heads * self.key_dim, "query")
        self.query_dense.build(query_shape)
        # No key bias: it adds q.b_k to every logit of a query row, which the
        # softmax cancels, so its gradient is exactly zero and Adam would only
        # amplify rounding noise into it.
        self.key_dense = dense(self.num_heads * self.key_dim, "key", use_bias=False)
        self.key_dense.build(key_shape)
        self.value_dense = dense(self.num_heads * self.value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = dense(self.output_dim or query_shape[-1], "attention_output")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.value_dim,))

    def _project(self, dense, x, head_dim):
        """`dense(x)` split into heads: `(batch, length, heads, head_dim)`.

        The length is read from `x`, not from the projection: tf2onnx
        converts a reshape that reads the shape of a Dense output on 3-D
        input wrongly (onnx/tensorflow-onnx#2085).
        """
        return ops.reshape(over_positions(dense, x), (-1, size(x, 1), self.num_heads, head_dim))

    def key_value_cache(self, key, value=None):
        """Projects encoder output once into the `(keys, values)` cache that
        cross-attention reads at every decoding step, each heads-first:
        `(batch, heads, source_length, dim)`."""
        value = key if value is None else value
        return (
            _heads_first(self._project(self.key_dense, key, self.key_dim)),
            _heads_first(self._project(self.value_dense, value, self.value_dim)),
        )

    @staticmethod
    def _write_cache(cache, update, index):
        """Writes `update` `(batch, steps, heads, dim)` into the heads-first
        `cache` `(batch, heads, length, dim)` at positions
        `index ... index + steps - 1`.

        A scatter, which tf2onnx converts to ScatterND (TensorFlow copies
        the cache before writing; in a decoding loop it did not reuse the
        buffer in place when measured). Not `ops.slice_update`: on
        TensorFlow that lowers to the XLA op XlaDynamicUpdateSlice, which
        tf2onnx cannot convert.
        """
        batch, steps, heads = ops.shape(update)[0], ops.shape(update)[1], update.shape[2]
        # One (row, head, position) index per written vector, in the order
        # of `update` flattened over its first three axes.
        rows = ops.repeat(ops.arange(batch), steps * heads)
        positions = ops.tile(ops.repeat(ops.arange(steps), heads), [batch]) + index
        head_ids = ops.tile(ops.arange(heads), [batch * steps])
        updates = ops.reshape(update, (batch * steps * heads, update.shape[3]))
        return ops.scatter_update(cache, ops.stack([rows, head_ids, positions], axis=1),
                                  ops.cast(updates, cache.dtype))

    def _mask(self, query_length, key_length, attention_mask, use_causal_mask,
              position_offset, value_mask, key_mask, appending=False):
        """Combines all masks into one boolean `(batch|1, 1, Tq, Tk)` or None."""
        mask = None

        def combine(mask, extra):
            extra = ops.cast(extra, "bool")
            return extra if mask is None else ops.logical_and(mask, extra)

        for padding in (value_mask, key_mask):
            if padding is not None:
                # expand_dims, not `[:, None, :]`: LiteRT has no builtin for
                # a strided slice that adds an axis (it would need Flex).
                mask = combine(mask, ops.expand_dims(padding, 1))
        if attention_mask is not None:
            mask = combine(mask, attention_mask)
        if use_causal_mask and not (appending and isinstance(query_length, int)
                                    and query_length == 1):
            # (One query appended to a growing cache sits after every key:
            # its causal mask would allow all of them.)
            rows = ops.arange(query_length)[:, None] + position_offset
            cols = ops.arange(key_length)[None, :]
            mask = combine(mask, (cols <= rows)[None])
        if mask is not None and len(mask.shape) == 3:
            mask = mask[:, None]
        return mask

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        value_mask=None,
        key_mask=None,
        append_to_cache=False,
    ):
        if append_to_cache and (cache is None or cache_update_index is not None):
            raise ValueError(
                "`append_to_cache=True` needs a `cache` (the keys and values of the earlier "
                "positions) and no `cache_update_index` (the queries follow the cache)."
            )
        updating = cache is not None and (cache_update_index is not None or append_to_cache)
        if value is None and (cache is None or updating):
            value = query  # self-attention (a cache being updated is one)
        key = value if key is None else key
        queries = self._project(self.query_dense, query, self.key_dim)
        position_offset = 0 if cache_update_index is None else cache_update_index
        if cache is not None and not updating:
            keys, values = cache  # a `value_mask` here must cover the cached keys
        else:
            keys = self._project(self.key_dense, key, self.key_dim)
            values = self._project(self.value_dense, value, self.value_dim)
            if append_to_cache:
                position_offset = ops.shape(cache[0])[2]
                keys = ops.concatenate(
                    [cache[0], ops.cast(_heads_first(keys), cache[0].dtype)], axis=2)
                values = ops.concatenate(
                    [cache[1], ops.cast(_heads_first(values), cache[1].dtype)], axis=2)
            elif cache is not None:
                keys = self._write_cache(cache[0], keys, cache_update_index)
                values = self._write_cache(cache[1], values, cache_update_index)
            if cache is not None:
                cache = (keys, values)
                # Masks of `value` cover only the rows just written, not the
                # cache; slots not yet written are hidden by the causal mask.
                value_mask = key_mask = None
        # Attention runs heads-first, `(batch, heads, length, dim)`: the two
        # matmuls then are plain batched matmuls over (batch, heads). Einsums
        # over `(batch, length, heads, dim)` (what `ops.dot_product_attention`
        # does on TensorFlow, which has no fused attention kernel) copy their
        # operands into that order inside every call, forward and backward;
        # the explicit transposes here are cheaper (base model on CPU, per
        # attention block, forward and backward). Cached keys and values are
        # stored heads-first so that a decoding step reads them in place
        # (copying the whole cache each step was a large part of a cached
        # beam-search step).
        if cache is None:
            keys, values = _heads_first(keys), _heads_first(values)
        mask = self._mask(
            size(queries, 1),
            ops.shape(keys)[2],
            attention_mask,
            use_causal_mask,
            position_offset,
            value_mask,
            key_mask,
            appending=append_to_cache,
        )
        scale = ops.cast(1.0 / math.sqrt(self.key_dim), queries.dtype)
        logits = ops.einsum("bhqd,bhkd->bhqk", _heads_first(queries), keys) * scale
        logits = ops.cast(logits, "float32")
        if mask is not None:
            logits = ops.where(mask, logits, -1e9)
        if logits.shape[-1] == 1:
            # One key (the first step of a growing cache): its weight is 1,
            # which is what the softmax gives; Keras warns about a softmax
            # over one element.
            weights = ops.ones_like(logits, dtype=queries.dtype)
        else:
            weights = ops.cast(ops.softmax(logits, axis=-1), queries.dtype)
        dropped = self._dropout_layer(weights, training=training)
        attended = _heads_first(ops.einsum("bhqk,bhkd->bhqd", dropped, values))
        output = over_positions(
            self.output_dense,
            ops.reshape(attended, (-1, size(query, 1), self.num_heads * self.value_dim)),
        )
        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        return super().get_config() | {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "output_dim": self.output_dim,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }


def _heads_first(x):
    """`(batch, length, heads, dim)` -> `(batch, heads, length, dim)`, and
    back (the permutation is its own inverse).

    With one position (a decoding step's query, key and value) the two
    orders hold the same numbers in the same memory order, so a reshape,
    which copies nothing, does it instead of a transpose.
    """
    if x.shape[1] == 1 or x.shape[2] == 1:
        return ops.reshape(x, (-1, size(x, 2), size(x, 1), size(x, 3)))
    return ops.transpose(x, (0, 2, 1, 3))
