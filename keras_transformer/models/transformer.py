"""The encoder-decoder Transformer (paper section 3, Figure 1) as a functional
Keras model, with the encoder, the decoder and a cached decoding step built
from the same layers."""

import keras
from keras import ops

from keras_transformer.cpu_features import check_precision
from keras_transformer.layers import (
    Dropout,
    LayerNormalization,
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from keras_transformer.layers import _validation
from keras_transformer.models.config import BASE, BIG, TransformerConfig
from keras_transformer.names import DECODING_PRECISIONS
from keras_transformer.special_ids import PAD_ID  # the default of config.pad_id


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer: `{"source_ids", "target_ids"}` -> logits.

    A functional model whose inputs are int32 `source_ids` `(batch, S)` and
    `target_ids` `(batch, T)` (the decoder input: the target shifted right
    behind a start token), and whose output is float32
    logits `(batch, T, target_vocab_size)`: row t predicts target token t + 1.
    Padding is `config.pad_id` in both (0 unless the model was imported from a
    pretrained checkpoint with other special ids).

    Build it with `transformer()`, `transformer_base()` or `transformer_big()`.
    It saves to `.keras` and loads with `safe_mode=True`; `get_config()` holds
    the `TransformerConfig`, available again as `model.config`.

    Beyond the functional graph it offers, on the same weights:
        `encode(source_ids)` and `decode(target_ids, encoder_output, source_ids)`,
        `encoder_model()` and `decoder_model()`: the two halves as functional
            models (to run, serve or export separately),
        `initial_cache(...)` and `decode_step(...)`: incremental decoding with
            fixed-shape key/value caches, for greedy and beam search;
        `decode_step_growing(...)`: the same with self-attention caches that
            grow by one position per step (onnxruntime's BeamSearch operator
            passes its caches between steps in that form).
    """

    def __init__(self, config, source_vocab_size, target_vocab_size=None, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        _validation.check_positive_int("source_vocab_size", source_vocab_size)
        target_vocab_size = source_vocab_size if target_vocab_size is None else target_vocab_size
        _validation.check_positive_int("target_vocab_size", target_vocab_size)
        if config.shared_vocabulary and target_vocab_size != source_vocab_size:
            raise ValueError(
                f"shared_vocabulary=True needs one vocabulary, but source_vocab_size="
                f"{source_vocab_size} and target_vocab_size={target_vocab_size}; "
                "use config.replace(shared_vocabulary=False) for separate vocabularies."
            )
        _check_special_ids(config, source_vocab_size, target_vocab_size)
        self._pad_id = config.pad_id
        layers = self._create_layers(config, source_vocab_size, target_vocab_size)
        # `encode` and `decode` trace the functional graph from these
        # attributes before `keras.Model.__init__`, which takes the graph's
        # outputs. On the PyTorch backend a Keras layer is a `torch.nn.Module`,
        # which refuses sub-modules as attributes until its own `__init__` has
        # run; so here the layers pass Keras' tracking only (the tracker that
        # setting `_pad_id` created; as `Layer.__setattr__` would, in this
        # order, which is the order of `model.weights` and so of the
        # optimizer's slots in training checkpoints), and are set again the
        # ordinary way once the model is initialised, for PyTorch to register
        # them too.
        for name, layer in layers.items():
            object.__setattr__(self, name, self._tracker.track(layer))
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        logits = self.decode(target_ids, self.encode(source_ids), source_ids)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )
        for name, layer in layers.items():
            setattr(self, name, layer)
        self.config = config
        self.source_vocab_size = source_vocab_size
        self.target_vocab_size = target_vocab_size

    @staticmethod
    def _create_layers(config, source_vocab_size, target_vocab_size):
        """The model's layers by attribute name (the final norms are None in
        a post-norm model)."""

        def embedding(vocab_size, name, output=True):
            # Padding is masked explicitly from the ids, not through Keras
            # masks, so that no mask leaks into the loss or the exports.
            return SharedEmbedding(vocab_size, config.d_model, scale=config.scale_embedding,
                                   mask_zero=False, logits_bias=config.logits_bias and output,
                                   name=name)

        def positions(name):
            if config.positional_encoding == "learned":
                return LearnedPositionalEmbedding(config.max_length, name=name)
            # fairseq numbers positions from the padding id + 1 (padding
            # itself would take the padding id's position).
            first = config.pad_id + 1 if config.sinusoid == "fairseq" else 0
            return SinusoidalPositionalEncoding(style=config.sinusoid, first_position=first,
                                                name=name)

        def stack(layer_class, count, prefix):
            return [
                layer_class(
                    num_heads=config.num_heads,
                    d_ff=config.d_ff,
                    key_dim=config.head_key_dim,
                    value_dim=config.head_value_dim,
                    dropout=config.dropout,
                    attention_dropout=config.attention_dropout,
                    ffn_dropout=config.ffn_dropout,
                    activation=config.activation,
                    norm_first=config.norm_first,
                    layer_norm_epsilon=config.layer_norm_epsilon,
                    name=f"{prefix}_{index}",
                )
                for index in range(count)
            ]

        def final_norm(name):
            # Pre-norm leaves the residual stream unnormalised after the last
            # layer; post-norm already ends every layer with a LayerNorm.
            if not config.norm_first:
                return None
            return LayerNormalization(epsilon=config.layer_norm_epsilon, name=name)

        if config.shared_vocabulary:
            source_embedding = target_embedding = embedding(source_vocab_size, "shared_embedding")
        else:
            source_embedding = embedding(source_vocab_size, "source_embedding", output=False)
            target_embedding = embedding(target_vocab_size, "target_embedding")
        return {
            "source_embedding": source_embedding,
            "target_embedding": target_embedding,
            "source_positions": positions("source_positions"),
            "target_positions": positions("target_positions"),
            "source_dropout": Dropout(config.dropout, name="source_dropout"),
            "target_dropout": Dropout(config.dropout, name="target_dropout"),
            "encoder_layers": stack(TransformerEncoderLayer, config.num_encoder_layers,
                                    "encoder_layer"),
            "decoder_layers": stack(TransformerDecoderLayer, config.num_decoder_layers,
                                    "decoder_layer"),
            "encoder_norm": final_norm("encoder_norm"),
            "decoder_norm": final_norm("decoder_norm"),
        }

    # ----------------------------------------------------------------- halves

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Source ids `(batch, S)` -> encoder output `(batch, S, d_model)`;
        with `return_attention_scores`, also each layer's attention weights."""
        padding_mask = ops.not_equal(source_ids, self._pad_id)
        x = self.source_positions(self.source_embedding(source_ids))
        x = self.source_dropout(x, training=training)
        scores = []
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=padding_mask, training=training,
                      return_attention_scores=return_attention_scores)
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores)
        x = x if self.encoder_norm is None else self.encoder_norm(x)
        return (x, scores) if return_attention_scores else x

    def decode(self, target_ids, encoder_output, source_ids, training=None,
               return_attention_scores=False):
        """Teacher-forced decoder: all target positions at once -> logits;
        with `return_attention_scores`, also each layer's `(self, cross)`
        attention weights."""
        x = self.target_positions(self.target_embedding(target_ids))
        x = self.target_dropout(x, training=training)
        source_padding = ops.not_equal(source_ids, self._pad_id)
        scores = []
        for layer in self.decoder_layers:
            x = layer(x, encoder_output, encoder_padding_mask=source_padding, training=training,
                      return_attention_scores=return_attention_scores)
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores)
        logits = self._logits(x)
        return (logits, scores) if return_attention_scores else logits

    def _logits(self, x, output_weights=None):
        x = x if self.decoder_norm is None else self.decoder_norm(x)
        return self.target_embedding(x, reverse=True, transposed=output_weights)

    def output_weights(self):
        """The output projection's matrix, `(d_model, target_vocab_size)`
        (the transposed target embedding), for `decode_step` and
        `decode_step_growing`: a decoding loop that computes it once, before
        the loop, saves a transpose of the embedding at every step."""
        return self.target_embedding.transposed_embeddings()

    def attention_weights(self, source_ids, target_ids):
        """The attention weights of every layer for one teacher-forced pass
        (for visualisation, as in the paper's appendix).

        Returns:
            A dict of lists, one array `(batch, heads, queries, keys)` per
            layer: `encoder_self` (source over source), `decoder_self`
            (target over target, causal) and `cross` (target over source).
        """
        encoder_output, encoder_scores = self.encode(source_ids, return_attention_scores=True)
        _, decoder_scores = self.decode(target_ids, encoder_output, source_ids,
                                        return_attention_scores=True)
        return {
            "encoder_self": encoder_scores,
            "decoder_self": [self_scores for self_scores, _ in decoder_scores],
            "cross": [cross_scores for _, cross_scores in decoder_scores],
        }

    def cross_attention(self, source_ids, target_ids, layer):
        """The encoder-decoder attention weights `(batch, heads, queries,
        keys)` of decoder layer `layer` in one teacher-forced pass, computing
        nothing after it (no later layer, no logits over the vocabulary,
        which would cost the most): what aligns a translation with its
        source (`decoding.alignment`)."""
        encoder_output = self.encode(source_ids)
        x = self.target_positions(self.target_embedding(target_ids))
        source_padding = ops.not_equal(source_ids, self._pad_id)
        for decoder_layer in self.decoder_layers[:layer]:
            x = decoder_layer(x, encoder_output, encoder_padding_mask=source_padding)
        _, (_, cross) = self.decoder_layers[layer](
            x, encoder_output, encoder_padding_mask=source_padding, return_attention_scores=True)
        return cross

    def encoder_model(self):
        """`source_ids -> encoder_output` as a functional model on these weights."""
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        return keras.Model(source_ids, self.encode(source_ids), name="encoder")

    def decoder_model(self):
        """`{target_ids, encoder_output, source_ids} -> logits` as a functional
        model on these weights (`source_ids` gives the source padding)."""
        inputs = {
            "target_ids": keras.Input(shape=(None,), dtype="int32", name="target_ids"),
            "encoder_output": keras.Input(
                shape=(None, self.config.d_model), dtype=self.compute_dtype, name="encoder_output"
            ),
            "source_ids": keras.Input(shape=(None,), dtype="int32", name="source_ids"),
        }
        logits = self.decode(inputs["target_ids"], inputs["encoder_output"], inputs["source_ids"])
        return keras.Model(inputs, logits, name="decoder")

    # ---------------------------------------------------- incremental decoding

    def initial_cache(self, encoder_output, source_ids, max_length=None, hypotheses=1):
        """The decoding state before the first step, for `hypotheses`
        decoder rows per sentence (the beam size; rows `i*hypotheses ...`
        belong to sentence i).

        Cross-attention keys and values are computed here, once, one row per
        sentence, which all of its hypotheses read (see
        `TransformerDecoderLayer`). With a `max_length`, the self-attention
        caches are zeros of a fixed shape `(batch * hypotheses, heads,
        max_length, head_dim)`, which `decode_step` writes into, so that a
        decoding loop keeps static shapes (XLA, the ONNX decoder-step graph);
        with `max_length=None` (or 0) they are empty, `(rows, heads, 0,
        head_dim)`, and `decode_step_growing` appends to them, so that each
        step reads only the positions decoded so far. All caches are
        heads-first (see `MultiHeadAttention`).

        Returns:
            A dict of tensors: `source_padding` `(batch, S)`, and per decoder
            layer `self_keys`/`self_values`/`cross_keys`/`cross_values` lists.
        """
        rows = ops.shape(encoder_output)[0] * hypotheses
        heads = self.config.num_heads
        dtype = self.compute_dtype
        cross = [layer.cross_attention_cache(encoder_output) for layer in self.decoder_layers]
        layers = range(len(self.decoder_layers))
        max_length = 0 if max_length is None else max_length
        return {
            "source_padding": ops.not_equal(source_ids, self.config.pad_id),
            "cross_keys": [keys for keys, _ in cross],
            "cross_values": [values for _, values in cross],
            "self_keys": [
                ops.zeros((rows, heads, max_length, self.config.head_key_dim), dtype) for _ in layers
            ],
            "self_values": [
                ops.zeros((rows, heads, max_length, self.config.head_value_dim), dtype) for _ in layers
            ],
        }

    def decode_step(self, target_ids, index, cache, output_weights=None, attention_layer=None):
        """Runs the decoder on the tokens at positions `index ...` only.

        Args:
            target_ids: `(rows, steps)`, usually one token per hypothesis,
                the rows of `initial_cache`.
            index: integer scalar, position of `target_ids[:, 0]`.
            cache: from `initial_cache` or the previous step.
            output_weights: `output_weights()`, computed once by the caller
                (faster); None computes the projection from the embedding.
            attention_layer: a decoder layer's index: also return its
                encoder-decoder attention weights for these positions,
                averaged over its heads (what a search aligns its output
                with its source by, as it goes).

        Returns:
            `(logits, cache)`: logits `(rows, steps, target_vocab_size)` equal
            to the rows `index ...` of the full forward pass, and the cache
            with these positions' keys and values written in; with
            `attention_layer`, `(logits, cache, weights)`, the weights
            `(rows, steps, source_length)`.
        """
        return self._cached_step(target_ids, index, cache, grow=False,
                                 output_weights=output_weights, attention_layer=attention_layer)

    def decode_step_growing(self, target_ids, cache, output_weights=None, attention_layer=None,
                            starts=None):
        """`decode_step` with self-attention caches that grow: they hold the
        keys and values of the positions decoded so far, `(rows, heads,
        past_length, head_dim)`, and this step's are concatenated behind
        them. The tokens' position is the caches' length, so no index is
        given. Start from `initial_cache(..., max_length=None)` (empty caches);
        `output_weights` and `attention_layer` as in `decode_step`.

        `starts` `(rows,)`: the column of the caches where each row's
        sequence begins, for rows whose sequences joined a running search
        later than others (`decoding.slots`): a row attends only to the
        columns from its start on, and its tokens' positions count from
        there. None: every row begins at column 0.

        Returns:
            `(logits, cache)`: logits `(rows, steps, target_vocab_size)` equal
            to the rows `past_length ...` of the full forward pass, and the
            cache with self-attention caches `past_length + steps` long;
            with `attention_layer`, the weights too, as `decode_step` gives.
        """
        width = ops.shape(cache["self_keys"][0])[2]
        return self._cached_step(target_ids, width if starts is None else width - starts, cache,
                                 grow=True, output_weights=output_weights,
                                 attention_layer=attention_layer, starts=starts)

    def _cached_step(self, target_ids, index, cache, grow, output_weights=None,
                     attention_layer=None, starts=None):
        x = self.target_positions(self.target_embedding(target_ids), start_index=index)
        self_keys, self_values, attended = [], [], None
        mask = None
        if starts is not None:  # each row's columns, its own and the new ones
            columns = ops.arange(ops.shape(cache["self_keys"][0])[2] + ops.shape(target_ids)[1])
            mask = ops.expand_dims(columns[None, :] >= ops.expand_dims(starts, 1), 1)
        for i, layer in enumerate(self.decoder_layers):
            outputs = layer(
                x,
                encoder_padding_mask=cache["source_padding"],
                self_attention_cache=(cache["self_keys"][i], cache["self_values"][i]),
                self_attention_cache_update_index=None if grow else index,
                append_to_self_attention_cache=grow,
                self_attention_mask=mask,
                cross_attention_cache=(cache["cross_keys"][i], cache["cross_values"][i]),
                return_attention_scores=i == attention_layer,
            )
            if i == attention_layer:
                x, (_, cross), (keys, values) = outputs
                attended = ops.mean(cross, axis=1)
            else:
                x, (keys, values) = outputs
            self_keys.append(keys)
            self_values.append(values)
        step = (self._logits(x, output_weights),
                cache | {"self_keys": self_keys, "self_values": self_values})
        return step if attention_layer is None else (*step, attended)

    # ---------------------------------------------------------- serialisation

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "config": self.config.to_dict(),
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
        }


def _check_special_ids(config, source_vocab_size, target_vocab_size):
    """Each special id must name a row of the vocabulary it is used in."""
    for name, vocab_size in (("pad_id", source_vocab_size), ("eos_id", source_vocab_size),
                             ("pad_id", target_vocab_size), ("unk_id", target_vocab_size),
                             ("decoder_start_id", target_vocab_size),
                             ("eos_id", target_vocab_size)):
        if getattr(config, name) >= vocab_size:
            raise ValueError(
                f"TransformerConfig.{name}={getattr(config, name)} is not an id of a "
                f"{vocab_size}-token vocabulary; special ids must be below the vocabulary size."
            )


def in_precision(model, precision):
    """A copy of `model` whose weights are stored, and whose matmuls run, in
    `precision`: "float32", "bfloat16" (CPUs with AVX-512 BF16 or AMX, and
    GPUs) or "float16" (GPUs); `model` itself when it already is.

    For inference: unlike Keras' mixed policies, which keep float32 weights
    and cast them at every call, the weights are cast once, so that a
    decoding step reads half the bytes. Layer normalisation, the attention
    softmax and the log-probabilities still compute in float32 (Keras'
    `layer_normalization` and this package's attention and logits upcast).
    """
    if precision not in DECODING_PRECISIONS:
        raise ValueError(f"precision must be one of {DECODING_PRECISIONS}; got {precision!r}.")
    if keras.backend.backend() == "tensorflow":
        check_precision(precision)
    if model.dtype_policy.name == precision:
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        copy = transformer(model.config, model.source_vocab_size, model.target_vocab_size,
                           name=model.name)
    finally:
        keras.config.set_dtype_policy(previous)
    copy.set_weights(model.get_weights())
    return copy


def transformer(config, source_vocab_size, target_vocab_size=None, name="transformer"):
    """Builds a `Transformer` from a config and vocabulary sizes.

    `target_vocab_size=None` means the same size as the source; with
    `config.shared_vocabulary` the two must be equal.
    """
    return Transformer(config, source_vocab_size, target_vocab_size, name=name)


def transformer_base(vocab_size, **overrides):
    """The paper's base model (about 65M parameters with a 37k vocabulary).

    Keyword arguments override fields of `BASE`, e.g. the Table 3 variants:
    `transformer_base(37000, **TABLE3_VARIANTS["C-N2"])`.
    """
    return transformer(BASE.replace(**overrides), vocab_size)


def transformer_big(vocab_size, **overrides):
    """The paper's big model (about 213M parameters with a 37k vocabulary)."""
    return transformer(BIG.replace(**overrides), vocab_size)
