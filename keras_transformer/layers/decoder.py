"""One decoder layer (paper section 3.1): causal self-attention, attention over
the encoder output, then feed-forward."""

import keras
from keras import ops

from keras_transformer.layers.residual import TransformerLayerBase, residual_block


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderLayer(TransformerLayerBase):
    """Masked self-attention, encoder-decoder attention and a position-wise
    feed-forward network, each wrapped in residual dropout and LayerNorm.

    Constructor arguments: as `TransformerEncoderLayer`.

    Call arguments:
        decoder_sequence: `(batch, target_length, d_model)`.
        encoder_sequence: `(batch, source_length, d_model)`, the encoder
            output. A layer first called without it has no cross-attention
            (a decoder-only layer).
        decoder_padding_mask, encoder_padding_mask: `(batch, length)`, True for
            real tokens; default to the Keras masks the sequences carry.
        use_causal_mask: position t attends only to positions <= t (default).
        self_attention_cache: `(keys, values)`, each
            `(batch, heads, max_length, head_dim)`, for incremental decoding,
            with `self_attention_cache_update_index`, the position of the first
            row of `decoder_sequence`.
        append_to_self_attention_cache: the self-attention cache grows
            instead (see `MultiHeadAttention`'s `append_to_cache`):
            `self_attention_cache` holds the earlier positions only,
            `(batch, heads, past_length, head_dim)`, this call's keys and
            values are concatenated behind them, and no index is given.
        self_attention_mask: boolean `(batch, target_length, keys)`, False
            where a query may not attend (with a cache, `keys` counts its
            positions): rows of a decoding batch that begin at different
            columns of the cache (`Transformer.decode_step_growing`'s
            `starts`).
        cross_attention_cache: `(keys, values)` from `cross_attention_cache()`,
            so that the encoder output is projected once, not at every step;
            `encoder_sequence` is then not needed, `encoder_padding_mask` is.
            It may have fewer rows than `decoder_sequence`: with B rows here
            (and in `encoder_padding_mask`) and B*k decoder rows, decoder rows
            `i*k ... i*k + k-1` all read row i, as the k hypotheses of one
            sentence do in beam search, without k copies of the keys and
            values.
        return_attention_scores: also return the weights of both attentions.

    Returns:
        `output`, then `(self_attention_weights, cross_attention_weights)` if
        requested, then the updated self-attention cache if one was given.

    Example:

    >>> layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    >>> target, source = keras.ops.ones((2, 4, 8)), keras.ops.ones((2, 6, 8))
    >>> tuple(layer(target, source).shape)
    (2, 4, 8)
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        super().build(decoder_sequence_shape)
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            self.cross_attention = self._attention(decoder_sequence_shape, "cross_attention")
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_norm = self._norm(decoder_sequence_shape, "cross_attention_norm")

    def cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, computed once per sentence."""
        self._require_cross_attention()
        return self.cross_attention.key_value_cache(encoder_sequence)

    def _shared_cache_cross_attention(self, x, cache, padding_mask, return_attention_scores,
                                      training):
        """Cross-attention of B*k rows `x` `(B*k, T, d_model)` over a cache of
        B rows: each group of k consecutive rows becomes one row of k*T
        queries (cross-attention has no causal mask, so queries are
        independent), so that every cached key and value is read once per
        group, not once per row."""
        known_rows, known_groups = x.shape[0], cache[0].shape[0]
        if known_rows is not None and known_groups and known_rows % known_groups:
            raise ValueError(
                f"The cross-attention cache has {known_groups} rows, so the decoder "
                f"sequence's rows must be a multiple of {known_groups} (k hypotheses per "
                f"cache row); got {known_rows}."
            )
        rows, length, width = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        groups = ops.shape(cache[0])[0]
        # k spelled out rather than a -1 in the reshape, so that a row count
        # that is no multiple of the cache's fails there when shapes are
        # only known at run time (max: an empty batch has no groups). Sizes
        # known in advance stay Python ints (JAX's compiled reshapes need
        # them; `ops.maximum` would make an array of them).
        per_group = rows // (max(groups, 1) if isinstance(groups, int) else ops.maximum(groups, 1))
        # The attention hands the cache back last; it is unchanged here.
        output, *weights, _ = self.cross_attention(
            ops.reshape(x, (groups, per_group * length, width)), value_mask=padding_mask,
            cache=cache,
            return_attention_scores=return_attention_scores, training=training,
        )
        output = ops.reshape(output, (rows, length, width))
        if not return_attention_scores:
            return output
        weights = weights[0]  # (B, heads, k*T, S), query j*T + t of hypothesis j
        heads, source_length = weights.shape[1], ops.shape(weights)[-1]
        weights = ops.reshape(weights, (groups, heads, per_group, length, source_length))
        weights = ops.reshape(ops.transpose(weights, (0, 2, 1, 3, 4)),
                              (rows, heads, length, source_length))
        return output, weights

    def _require_cross_attention(self):
        if self.cross_attention is None:
            raise ValueError(
                "This decoder layer was built without an encoder sequence, so it has no "
                "cross-attention (a decoder-only layer); call it without "
                "`encoder_sequence` or `cross_attention_cache`."
            )

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
        append_to_self_attention_cache=False,
        self_attention_mask=None,
    ):
        if append_to_self_attention_cache:
            if self_attention_cache is None or self_attention_cache_update_index is not None:
                raise ValueError(
                    "`append_to_self_attention_cache=True` needs a `self_attention_cache` (the "
                    "earlier positions) and no `self_attention_cache_update_index`."
                )
        elif (self_attention_cache is None) != (self_attention_cache_update_index is None):
            raise ValueError(
                "`self_attention_cache` and `self_attention_cache_update_index` "
                "go together: the index is the position of the first row of "
                "`decoder_sequence` in the cache."
            )
        if encoder_sequence is not None or cross_attention_cache is not None:
            self._require_cross_attention()

        def self_attend(x):
            return self.self_attention(
                x, x, value_mask=decoder_padding_mask, attention_mask=self_attention_mask,
                use_causal_mask=use_causal_mask,
                cache=self_attention_cache, cache_update_index=self_attention_cache_update_index,
                append_to_cache=append_to_self_attention_cache,
                return_attention_scores=return_attention_scores, training=training,
            )

        def cross_attend(x):
            if cross_attention_cache is not None:
                return self._shared_cache_cross_attention(
                    x, cross_attention_cache, encoder_padding_mask,
                    return_attention_scores, training,
                )
            return self.cross_attention(
                x, encoder_sequence, value_mask=encoder_padding_mask,
                return_attention_scores=return_attention_scores, training=training,
            )

        x, self_extras = residual_block(
            decoder_sequence, self_attend, self.self_attention_norm,
            self.residual_dropout, self.norm_first, training,
        )
        cross_weights = None
        if self.cross_attention is not None:
            x, cross_extras = residual_block(
                x, cross_attend, self.cross_attention_norm,
                self.residual_dropout, self.norm_first, training,
            )
            cross_weights = cross_extras[0] if return_attention_scores else None
        x = self._feed_forward_block(x, training)
        results = (x,)
        if return_attention_scores:
            results += ((self_extras[0], cross_weights),)
        if self_attention_cache is not None:
            results += (self_extras[-1],)
        return results[0] if len(results) == 1 else results
