"""The search on onnxruntime: the encoder and the decoder step written as
ONNX graphs straight from a model's weights, and the beam (or greedy)
search over them, in NumPy and onnxruntime (no TensorFlow), for one
sentence alone and for a batch.

Why: one sentence alone is searched a step at a time, four rows (its beam)
at most, where each step's matmuls are too small for XLA's CPU runtime to
spread over two cores (docs/benchmarks-log.md, "XLA's second thread"),
while onnxruntime's kernels (MLAS) do; and onnxruntime runs int8 matmuls.
The graphs tf2onnx converts from the model (`export.onnx.graphs`) carry
some four hundred operators a step for two decoder layers (shape
arithmetic, casts), whose dispatch costs more than the arithmetic, and the
search over them (`runtimes.onnx_runner.OnnxSearch`) copies the caches
and ranks the whole vocabulary in NumPy at every step; the graphs here hold
the step's arithmetic and little else (`StepGraphs`):

- the encoder graph: source ids `(sentences, S)`, padded -> each decoder
  layer's cross-attention keys (transposed, `(sentences, heads, head_dim,
  S)`) and values `(sentences, heads, S, head_dim)`, computed once, the
  padding's bias `(sentences, 1, 1, S)` (-1e9 on padding, else 0) and the
  positions an alignment never names (the end token and padding);
- the step graph: the newest token of each row (a sentence's rows
  consecutive, as many for each sentence), its position, the rows of the
  previous step each row continues (the beam's reordering, a gather inside
  the graph), the self-attention caches of the positions so far (keys
  transposed, so that the step multiplies without a transpose) and the
  encoder's outputs -> the caches one position longer, each row's `k` best
  next tokens and their log-probabilities (the padding and start tokens
  banned after the softmax, as every search bans them: `search.token_ban`)
  and the end token's, and the source position the alignment layer's
  cross-attention weighs most (`decoding.alignment`).

The searches (`StepSearch`) keep the caches in onnxruntime between steps
(its outputs bound as the next step's inputs: nothing of them passes
through NumPy) and do the beam's bookkeeping on the few numbers that come
back, with the rules of `decoding.search.beam_search` (fairseq's finished
hypotheses, the GNMT length penalty, ties to the lower index, and with
`best_only` the exact bound that ends a sentence once its best is
settled), so that their translations are the Translator's.
"""

import math
import os

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

FILES = ("search_encoder.onnx", "search_step.onnx")
"""The encoder and step graphs' files in an export's onnx/ folder."""

ACTIVATIONS = ("relu", "gelu", "silu", "swish")
"""The feed-forward activations the graphs write (Keras' names)."""

_NEG_INF = np.float32(-1e9)


def position_table(layer, length, dim):
    """The `(length, dim)` table a positions layer adds at positions
    0 .. length - 1, whatever its kind (learned, or a sinusoid)."""
    if hasattr(layer, "position_embeddings"):
        return _array(layer.position_embeddings)[:length]
    return _array(layer.encoding(length, dim))


def _array(weight):
    return np.asarray(weight.numpy() if hasattr(weight, "numpy") else weight, np.float32)


def check_writable(model):
    """Raises a one-line ValueError where the graphs cannot compute `model`
    exactly (an activation they do not write)."""
    name = getattr(model.config.activation, "__name__", model.config.activation)
    if name not in ACTIVATIONS:
        raise ValueError(f"The lone sentence's ONNX graphs write the {sorted(ACTIVATIONS)} "
                         f"activations; this model's is {name!r}.")


class _Graph:
    """An ONNX graph being written: its nodes, weights, inputs and outputs."""

    def __init__(self):
        self.nodes, self.weights, self.inputs, self.outputs = [], [], [], []
        self._count = 0
        self._renamed = {}  # value -> the output name it is given

    def name(self, hint):
        self._count += 1
        return f"{hint}_{self._count}"

    def weight(self, value, hint="w", dtype=np.float32):
        name = self.name(hint)
        self.weights.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type, *inputs, outputs=1, domain=None, **attributes):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, domain=domain,
                                           **attributes))
        return names[0] if outputs == 1 else names

    def input(self, name, element, shape):
        self.inputs.append(helper.make_tensor_value_info(name, element, shape))
        return name

    def output(self, name, value, element=TensorProto.FLOAT):
        """Makes `value` (a node's output) the graph's output `name`: the
        value renamed, not copied by an Identity (the step's caches would be
        copied at every step)."""
        self._renamed[value] = name
        self.outputs.append(helper.make_tensor_value_info(name, element, None))

    def model(self, graph_name):
        for node in self.nodes:
            for names in (node.input, node.output):
                names[:] = [self._renamed.get(name, name) for name in names]
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs,
                                  self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                 producer_name="keras_transformer")

    # -- the model's pieces ------------------------------------------------

    def dense(self, x, layer, scale=1.0):
        """`x @ kernel (+ bias)` of a Keras Dense `layer`, its activation
        included, both scaled by `scale` (the attention's 1 / sqrt(d_k),
        folded into the query's weights)."""
        y = self.op("MatMul", x, self.weight(_array(layer.kernel) * scale, "kernel"))
        if layer.bias is not None:
            y = self.op("Add", y, self.weight(_array(layer.bias) * scale, "bias"))
        name = getattr(layer.activation, "__name__", "linear")
        if name == "relu":
            y = self.op("Relu", y)
        elif name in ("silu", "swish"):
            y = self.op("Mul", y, self.op("Sigmoid", y))
        elif name == "gelu":  # Keras' gelu is the exact (erf) one
            erf = self.op("Erf", self.op("Mul", y, self.weight(1 / math.sqrt(2), "c")))
            y = self.op("Mul", self.op("Mul", y, self.weight(0.5, "c")),
                        self.op("Add", erf, self.weight(1.0, "c")))
        return y

    def denses(self, x, layers, scales):
        """`dense(x, layer, scale)` of each of `layers` (linear ones, of
        one input) as one MatMul and its split: one matmul, and for int8
        one quantization of `x`, instead of one each."""
        kernels = [_array(layer.kernel) * scale for layer, scale in zip(layers, scales)]
        biases = [_array(layer.bias) * scale if layer.bias is not None else
                  np.zeros(kernel.shape[1], np.float32)
                  for layer, scale, kernel in zip(layers, scales, kernels)]
        y = self.op("Add", self.op("MatMul", x, self.weight(np.concatenate(kernels, 1), "kernel")),
                    self.weight(np.concatenate(biases), "bias"))
        return self.op("Split", y, self.weight([kernel.shape[1] for kernel in kernels], "split",
                                               np.int64), outputs=len(layers), axis=-1)

    def norm(self, x, layer):
        return self.op("LayerNormalization", x, self.weight(_array(layer.gamma), "gamma"),
                       self.weight(_array(layer.beta), "beta"), axis=-1,
                       epsilon=float(layer.epsilon))

    def heads(self, x, count, size, order):
        """`(..., count * size)` -> heads-first `(batch, count, ., size)`
        (`order` the Transpose's perm of `(batch, positions, count, size)`)."""
        shaped = self.op("Reshape", x, self.weight([0, -1, count, size], "shape", np.int64))
        return self.op("Transpose", shaped, perm=order)

    def split(self, x, shape):
        """A step's `(rows, count * size)` -> its heads, `shape` one of
        `[0, count, 1, size]` and (a key, transposed) `[0, count, size, 1]`:
        with one position a row this is a reshape alone, no transpose."""
        return self.op("Reshape", x, self.weight(shape, "shape", np.int64))

    def merged(self, x, count, size):
        """Heads-first `(batch, count, positions, size)` -> `(batch,
        positions, count * size)`."""
        moved = self.op("Transpose", x, perm=[0, 2, 1, 3])
        return self.op("Reshape", moved, self.weight([0, -1, count * size], "shape", np.int64))


class StepGraphs:
    """The encoder and step graphs of a `Transformer` (see the module
    docstring), as `onnx.ModelProto`s: `encoder` and `step` (`FILES` in an
    export).

    Args:
        model: a `Transformer` (its weights are read once, as float32).
        alignment_layer: the decoder layer whose attention the step's
            `attended` output follows (`decoding.alignment.alignment_layer`).
    """

    def __init__(self, model, alignment_layer):
        check_writable(model)
        self.config = model.config
        self.encoder = self._encoder(model)
        self.step = self._step(model, alignment_layer)

    def _sizes(self):
        config = self.config
        return config.num_heads, config.head_key_dim, config.head_value_dim

    def _encoder(self, model):
        config, g = self.config, _Graph()
        heads, key_dim, value_dim = self._sizes()
        ids = g.input("source_ids", TensorProto.INT64, ["sentences", "source"])
        padding = g.op("Equal", ids, g.weight(config.pad_id, "pad", np.int64))
        # Padding keys weigh nothing: -1e9 added to their scores (0 elsewhere,
        # so that an unpadded source's scores are its own, bit for bit).
        bias = g.op("Unsqueeze", g.op("Mul", g.op("Cast", padding, to=TensorProto.FLOAT),
                                      g.weight(_NEG_INF, "neg_inf")),
                    g.weight([1, 2], "axes", np.int64))  # (sentences, 1, 1, source)
        g.output("cross_bias", bias)
        # The positions the alignment never names: the end token and padding.
        excluded = g.op("Or", padding, g.op("Equal", ids, g.weight(config.eos_id, "end", np.int64)))
        g.output("source_excluded", g.op("Unsqueeze", excluded, g.weight([1], "axes", np.int64)),
                 TensorProto.BOOL)
        x = g.op("Gather", g.weight(_array(model.source_embedding.embeddings), "embeddings"), ids)
        if model.source_embedding.scale:
            x = g.op("Mul", x, g.weight(math.sqrt(config.d_model), "scale"))
        table = g.weight(position_table(model.source_positions, config.max_length,
                                        config.d_model), "positions")
        length = g.op("Gather", g.op("Shape", ids), g.weight(1, "one", np.int64))
        x = g.op("Add", x, g.op("Slice", table, g.weight([0], "zero", np.int64),
                                g.op("Unsqueeze", length, g.weight([0], "axes", np.int64))))

        def attention(h, layer):
            q, k, v = g.denses(h, [layer.query_dense, layer.key_dense, layer.value_dense],
                               [1 / math.sqrt(key_dim), 1.0, 1.0])
            q = g.heads(q, heads, key_dim, [0, 2, 1, 3])
            k = g.heads(k, heads, key_dim, [0, 2, 3, 1])
            v = g.heads(v, heads, value_dim, [0, 2, 1, 3])
            weights = g.op("Softmax", g.op("Add", g.op("MatMul", q, k), bias), axis=-1)
            return g.dense(g.merged(g.op("MatMul", weights, v), heads, value_dim),
                           layer.output_dense)

        for layer in model.encoder_layers:
            x = _sublayer(g, x, lambda h, a=layer.self_attention: attention(h, a),
                          layer.self_attention_norm, config.norm_first)
            x = _sublayer(g, x, lambda h, f=layer.feed_forward: g.dense(
                g.dense(h, f.inner_dense), f.output_dense), layer.feed_forward_norm,
                config.norm_first)
        if model.encoder_norm is not None:
            x = g.norm(x, model.encoder_norm)
        # Every decoder layer's cross keys and values: one matmul.
        crosses = [layer.cross_attention for layer in model.decoder_layers]
        parts = g.denses(x, [dense for cross in crosses
                             for dense in (cross.key_dense, cross.value_dense)],
                         [1.0] * 2 * len(crosses))
        for i in range(len(crosses)):
            g.output(f"cross_key_{i}", g.heads(parts[2 * i], heads, key_dim, [0, 2, 3, 1]))
            g.output(f"cross_value_{i}", g.heads(parts[2 * i + 1], heads, value_dim,
                                                  [0, 2, 1, 3]))
        return g.model("encoder")

    def _step(self, model, alignment_layer):
        config, g = self.config, _Graph()
        heads, key_dim, value_dim = self._sizes()
        layers = len(model.decoder_layers)
        ids = g.input("ids", TensorProto.INT64, ["rows"])
        position = g.input("position", TensorProto.INT64, [1])
        beams = g.input("beams", TensorProto.INT64, ["rows"])
        k = g.input("k", TensorProto.INT64, [1])
        past = [(g.input(f"past_key_{i}", TensorProto.FLOAT, ["past_rows", heads, key_dim, "P"]),
                 g.input(f"past_value_{i}", TensorProto.FLOAT,
                         ["past_rows", heads, "P", value_dim])) for i in range(layers)]
        cross = [(g.input(f"cross_key_{i}", TensorProto.FLOAT,
                          ["sentences", heads, key_dim, "source"]),
                  g.input(f"cross_value_{i}", TensorProto.FLOAT,
                          ["sentences", heads, "source", value_dim])) for i in range(layers)]
        bias = g.input("cross_bias", TensorProto.FLOAT, ["sentences", 1, 1, "source"])
        excluded = g.input("source_excluded", TensorProto.BOOL, ["sentences", 1, "source"])
        # A sentence's rows are consecutive, as many for each: the queries
        # of each sentence's rows meet its own keys, (sentences, heads,
        # rows a sentence, source).
        by_sentence = g.op("Concat", g.op("Shape", bias, end=1),
                           g.weight([-1, heads, key_dim], "shape", np.int64), axis=0)
        x = g.op("Gather", g.weight(_array(model.target_embedding.embeddings), "embeddings"), ids)
        if model.target_embedding.scale:
            x = g.op("Mul", x, g.weight(math.sqrt(config.d_model), "scale"))
        table = g.weight(position_table(model.target_positions, config.max_length,
                                        config.d_model), "positions")
        # (rows, d) throughout: one position a row, so that the heads are
        # reshapes alone and onnxruntime fuses each MatMul and Add (a Gemm).
        x = g.op("Add", x, g.op("Gather", table, position))
        attended = None

        def most_attended(weights):
            """The source position the weights `(sentences, heads, rows a
            sentence, source)` give most, heads averaged, for each row; never
            the end token or padding, unless the source is the end token
            alone (`search.most_attended`)."""
            mean = g.op("ReduceMean", weights, axes=[1], keepdims=0)
            words = g.op("Where", excluded, g.weight(-1.0, "minus_one"), mean)
            return g.op("Reshape", g.op("ArgMax", words, axis=-1, keepdims=0),
                        g.weight([-1], "shape", np.int64))

        def output(weights, value, layer):
            merged = g.op("Reshape", g.op("MatMul", weights, value),
                          g.weight([0, heads * value_dim], "shape", np.int64))
            return g.dense(merged, layer.output_dense)

        def self_attention(h, layer, i):
            q, k, v = g.denses(h, [layer.query_dense, layer.key_dense, layer.value_dense],
                               [1 / math.sqrt(key_dim), 1.0, 1.0])
            key = g.op("Concat", g.op("Gather", past[i][0], beams),
                       g.split(k, [0, heads, key_dim, 1]), axis=3)
            value = g.op("Concat", g.op("Gather", past[i][1], beams),
                         g.split(v, [0, heads, 1, value_dim]), axis=2)
            g.output(f"present_key_{i}", key)
            g.output(f"present_value_{i}", value)
            weights = g.op("Softmax", g.op("MatMul", g.split(q, [0, heads, 1, key_dim]), key),
                           axis=-1)
            return output(weights, value, layer)

        def cross_attention(h, layer, i):
            nonlocal attended
            q = g.op("Transpose", g.op("Reshape", g.dense(h, layer.query_dense,
                                                          1 / math.sqrt(key_dim)), by_sentence),
                     perm=[0, 2, 1, 3])
            weights = g.op("Softmax", g.op("Add", g.op("MatMul", q, cross[i][0]), bias),
                           axis=-1)
            if i == alignment_layer:
                attended = most_attended(weights)
            merged = g.op("Reshape", g.op("Transpose", g.op("MatMul", weights, cross[i][1]),
                                          perm=[0, 2, 1, 3]),
                          g.weight([-1, heads * value_dim], "shape", np.int64))
            return g.dense(merged, layer.output_dense)

        for i, layer in enumerate(model.decoder_layers):
            x = _sublayer(g, x, lambda h, a=layer.self_attention, i=i: self_attention(h, a, i),
                          layer.self_attention_norm, config.norm_first)
            x = _sublayer(g, x, lambda h, a=layer.cross_attention, i=i: cross_attention(h, a, i),
                          layer.cross_attention_norm, config.norm_first)
            x = _sublayer(g, x, lambda h, f=layer.feed_forward: g.dense(
                g.dense(h, f.inner_dense), f.output_dense), layer.feed_forward_norm,
                config.norm_first)
        if model.decoder_norm is not None:
            x = g.norm(x, model.decoder_norm)
        logits = g.op("MatMul", x, g.weight(_array(model.target_embedding.embeddings).T.copy(),
                                               "output"))
        if model.target_embedding.bias is not None:
            logits = g.op("Add", logits, g.weight(_array(model.target_embedding.bias), "bias"))
        banned = np.zeros(model.target_vocab_size, np.float32)
        banned[sorted({config.pad_id, config.decoder_start_id} - {config.eos_id})] = _NEG_INF
        log_probs = g.op("Add", g.op("LogSoftmax", logits, axis=-1), g.weight(banned, "ban"))
        top_log_probs, top_ids = g.op("TopK", log_probs, k, outputs=2, axis=-1)
        g.output("top_log_probs", top_log_probs)
        g.output("top_ids", top_ids, TensorProto.INT64)
        g.output("end_log_prob", g.op("Gather", log_probs, g.weight(config.eos_id, "end",
                                                                     np.int64), axis=1))
        g.output("attended", attended, TensorProto.INT64)
        step = g.model("step")
        helper.set_model_props(step, {"target_vocab_size": str(model.target_vocab_size)})
        return step


def _sublayer(g, x, sublayer, norm, norm_first):
    """The residual connection (`layers.residual.residual_block`, no dropout):
    pre-norm `x + sublayer(norm(x))`, post-norm `norm(x + sublayer(x))`."""
    if norm_first:
        return g.op("Add", x, sublayer(g.norm(x, norm)))
    return g.norm(g.op("Add", x, sublayer(x)), norm)


def length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha, in float32 as the
    search computes it (`decoding.search.length_penalty`)."""
    return np.power(np.float32((5.0 + length) / 6.0), np.float32(alpha))


def session_options(threads=None):
    """onnxruntime's options for the graphs: `threads` per operator (None:
    onnxruntime's own choice), and threads that sleep between calls instead
    of spinning (a server's lone requests come apart)."""
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    return options


def load_session(graph, options):
    """An onnxruntime session of `graph` (bytes, or a path: a missing or
    damaged file is refused in one line, saying to export again)."""
    if isinstance(graph, bytes):
        return onnxruntime.InferenceSession(graph, options)
    if not os.path.isfile(graph):
        raise FileNotFoundError(f"{graph} does not exist; export the model again.")
    try:
        return onnxruntime.InferenceSession(graph, options)
    except Exception as error:  # onnxruntime raises its own types for damaged graphs
        raise ValueError(f"Cannot load {graph}: {str(error).splitlines()[0]}; the file is "
                         "damaged: export the model again.") from None


class StepSearch:
    """The beam search (greedy for a beam of one) over a model's
    `StepGraphs` on onnxruntime (see the module docstring): `search`, the
    best of one sentence, its bookkeeping in Python over the few
    hypotheses (the least time a step for a lone sentence); `search_batch`,
    the n best of each sentence of a batch, its bookkeeping in NumPy over
    the batch.

    Args:
        graphs: the `StepGraphs`, or the serialized encoder and step graphs
            (bytes or paths).
        config: the model's `TransformerConfig`, or what of it an export's
            onnx/config.json holds (the heads and their sizes, the decoder
            layers, the special ids, `max_length`), as attributes.
        threads: see `session_options`.
    """

    def __init__(self, graphs, config, threads=None):
        if isinstance(graphs, StepGraphs):
            graphs = (graphs.encoder.SerializeToString(), graphs.step.SerializeToString())
        options = session_options(threads)
        self.encoder, self.step = (load_session(graph, options) for graph in graphs)
        self.config = config
        self.cross = [value.name for value in self.encoder.get_outputs()]
        self.outputs = [value.name for value in self.step.get_outputs()]
        # Each step's caches, the next one's inputs: (output, input) names.
        self.pasts = [(name, name.replace("present_", "past_")) for name in self.outputs
                      if name.startswith("present_")]
        self.vocabulary_size = int(self.step.get_modelmeta().custom_metadata_map[
            "target_vocab_size"])
        heads = config.num_heads
        # The caches before the first step: no position yet.
        self.empty = {}
        for i in range(config.num_decoder_layers):
            self.empty[f"past_key_{i}"] = np.zeros((1, heads, config.head_key_dim, 0), np.float32)
            self.empty[f"past_value_{i}"] = np.zeros((1, heads, 0, config.head_value_dim),
                                                     np.float32)

    def search(self, source_ids, beam_size, alpha, decode_margin):
        """`(tokens, score, log_prob, attended)` of the best translation of
        `source_ids` (a sequence of ids ending with the end token): its
        tokens, the end token last, its score (log-probability over the
        GNMT length penalty), its log-probability, and each token's most
        attended source position (see `decoding.search.beam_search`, whose
        rules these are)."""
        config, k, alpha = self.config, beam_size, np.float32(alpha)
        source = np.asarray(source_ids, np.int64)[None]
        real = int(np.sum((source != config.pad_id) & (source != config.eos_id)))
        limit = min(real + decode_margin, config.max_length)
        fixed, caches = self._encoded(source)
        # Step 0 extends the start token alone; then the K alive hypotheses.
        alive, alive_attended = [[config.decoder_start_id]], [[0]]
        alive_log_probs, beams = np.zeros(1, np.float32), np.zeros(1, np.int64)
        best, finished = None, 0  # (score, log_prob, tokens, attended), how many ended
        for step in range(limit):
            found = self._step([tokens[-1] for tokens in alive], step, beams, caches, fixed,
                               min(2 * k, self.vocabulary_size))
            top, ids, attended = found["top_log_probs"], found["top_ids"], found["attended"]
            if step + 1 >= limit:  # at its limit a hypothesis may only end
                top = np.full_like(top, _NEG_INF)
                top[:, 0] = found["end_log_prob"]
                ids = np.zeros_like(ids)
                ids[:, 0] = config.eos_id
            candidates = (alive_log_probs[:, None] + top).reshape(-1)
            # The 2K best extensions, ties to the lower beam, then token.
            order = np.argsort(-candidates, kind="stable")[:2 * k]
            rows, tokens = order // top.shape[1], ids.reshape(-1)[order]
            penalty = length_penalty(step + 1, alpha)
            ended, kept = 0, []
            for rank, (row, token, log_prob) in enumerate(zip(rows, tokens, candidates[order])):
                if token != config.eos_id:
                    if len(kept) < k:
                        kept.append((row, token, log_prob))
                elif rank < k and finished < k and log_prob > _NEG_INF / 2:
                    ended += 1
                    score = np.float32(log_prob / penalty)
                    if best is None or score > best[0]:
                        best = (score, log_prob, alive[row] + [int(token)],
                                alive_attended[row] + [int(attended[row])])
            finished += ended
            if finished >= k or step + 1 >= limit:
                break
            alive = [alive[row] + [int(token)] for row, token, _ in kept]
            alive_attended = [alive_attended[row] + [int(attended[row])] for row, _, _ in kept]
            alive_log_probs = np.array([log_prob for _, _, log_prob in kept], np.float32)
            beams = np.array([row for row, _, _ in kept], np.int64)
            caches = {past: found[present] for present, past in self.pasts}
            if best is not None and best[0] >= alive_log_probs.max() / max(
                    length_penalty(step + 2, alpha), length_penalty(limit, alpha)):
                break  # no alive hypothesis can beat the best (`search._settled`)
        score, log_prob, tokens, attended = best
        return tokens[1:], float(score), float(log_prob), attended[1:]

    def search_batch(self, source_ids, beam_size, alpha, decode_margin, n_best=1):
        """The beam search of a batch: `(tokens, scores)`, the `n_best`
        best translations of each row of `source_ids` (`(sentences, length)`,
        padded, each source ending with the end token) as `(sentences,
        n_best, length)` ids (the end token, then padding) and their
        scores, best first.

        The rules of `decoding.search.beam_search` (those of `search`), on
        every sentence at once: each step's bookkeeping is a few NumPy
        operations over the batch, not Python over each hypothesis. With
        `n_best` 1 a sentence ends once its best is settled (`best_only`);
        else once it has K finished hypotheses. A sentence leaves the batch
        at the step it ends (its rows are no longer decoded), as in the
        traced search (`drop_finished`)."""
        config, k, alpha = self.config, beam_size, np.float32(alpha)
        source = np.asarray(source_ids, np.int64)
        count = len(source)
        real = np.sum((source != config.pad_id) & (source != config.eos_id), axis=1)
        limits = np.minimum(real + decode_margin, config.max_length)
        length = int(limits.max())
        fixed, caches = self._encoded(source)
        per_beam = min(2 * k, self.vocabulary_size)  # extensions ranked per row
        # The first step decodes one row a sentence, unless a row has fewer
        # than 2K extensions (then K, all but the first dead).
        copies = 1 if 2 * k <= self.vocabulary_size else k
        live = {"index": np.arange(count), "limit": limits,
                "alive": np.full((count, k, length + 1), config.pad_id, np.int64),
                "alive_log_probs": np.tile(np.array([0.0] + [_NEG_INF] * (k - 1), np.float32),
                                           (count, 1)),
                "finished": np.full((count, k, length + 1), config.pad_id, np.int64),
                "finished_scores": np.full((count, k), _NEG_INF, np.float32),
                "finished_log_probs": np.full((count, k), _NEG_INF, np.float32),
                "finished_count": np.zeros(count, np.int64)}
        live["alive"][:, :, 0] = config.decoder_start_id
        tokens = np.full((count, k, length + 1), config.pad_id, np.int64)
        scores = np.full((count, k), _NEG_INF, np.float32)
        beams = np.zeros(count * copies, np.int64)
        for step in range(length):
            s, n = live, len(live["index"])
            found = self._step(s["alive"][:, :copies, step].reshape(-1), step, beams, caches,
                               fixed, per_beam)
            top, ids = found["top_log_probs"], found["top_ids"]
            at_limit = np.repeat(step + 1 >= s["limit"], copies)
            if at_limit.any():  # at its limit a hypothesis may only end
                top[at_limit] = _NEG_INF
                top[at_limit, 0] = found["end_log_prob"][at_limit]
                ids[at_limit] = 0
                ids[at_limit, 0] = config.eos_id
            candidates = (s["alive_log_probs"][:, :copies, None]
                          + top.reshape(n, copies, per_beam)).reshape(n, -1)
            # The 2K best extensions, ties to the lower row, then rank.
            # (Each row's picks by fancy indexing: `take_along_axis` built
            # its indexes in Python, a share of a greedy file's time.)
            order = np.argsort(-candidates, axis=1, kind="stable")[:, :2 * k]
            each = np.arange(n)[:, None]
            top_log_probs = candidates[each, order]
            top_tokens = ids.reshape(n, -1)[each, order]
            top_beams = order // per_beam
            top_sequences = s["alive"][each, top_beams]
            top_sequences[:, :, step + 1] = top_tokens
            is_end = top_tokens == config.eos_id
            eligible = (is_end & (np.arange(2 * k) < k) & (s["finished_count"] < k)[:, None]
                        & (top_log_probs > _NEG_INF / 2))
            merged = np.concatenate([s["finished_scores"], np.where(
                eligible, top_log_probs / length_penalty(step + 1, alpha), _NEG_INF)], axis=1)
            kept = np.argsort(-merged, axis=1, kind="stable")[:, :k]
            s["finished_scores"] = merged[each, kept]
            s["finished"] = np.concatenate([s["finished"], top_sequences], axis=1)[each, kept]
            s["finished_log_probs"] = np.concatenate(
                [s["finished_log_probs"], np.where(eligible, top_log_probs, _NEG_INF)],
                axis=1)[each, kept]
            s["finished_count"] = s["finished_count"] + eligible.sum(axis=1)
            alive_candidates = np.where(is_end, _NEG_INF, top_log_probs)
            kept = np.argsort(-alive_candidates, axis=1, kind="stable")[:, :k]
            s["alive"] = top_sequences[each, kept]
            s["alive_log_probs"] = alive_candidates[each, kept]
            rows = top_beams[each, kept] + each * copies
            done = (s["finished_count"] >= k) | (step + 1 >= s["limit"])
            if n_best == 1:  # `search._settled`
                done |= s["finished_scores"][:, 0] >= s["alive_log_probs"].max(axis=1) / \
                    np.maximum(length_penalty(step + 2, alpha), length_penalty(s["limit"], alpha))
            if done.any():
                tokens[s["index"][done]] = s["finished"][done]
                scores[s["index"][done]] = s["finished_scores"][done]
                if done.all():
                    break
                live = {name: value[~done] for name, value in s.items()}
                rows = rows[~done]
                fixed = {name: onnxruntime.OrtValue.ortvalue_from_numpy(value.numpy()[~done])
                         for name, value in fixed.items()}
            beams, copies = rows.reshape(-1), k
            caches = {past: found[present] for present, past in self.pasts}
        return tokens[:, :n_best, 1:], scores[:, :n_best]

    def _encoded(self, source):
        """The encoder's outputs for `source` `(sentences, length)` (the
        step's fixed inputs, onnxruntime's values) and the empty caches
        before the first step."""
        binding = self.encoder.io_binding()
        binding.bind_cpu_input("source_ids", source)
        for name in self.cross:
            binding.bind_output(name)
        self.encoder.run_with_iobinding(binding)
        return (dict(zip(self.cross, binding.get_outputs())),
                {name: onnxruntime.OrtValue.ortvalue_from_numpy(value)
                 for name, value in self.empty.items()})

    def _step(self, ids, step, beams, caches, fixed, k):
        """The step graph's outputs for the hypotheses ending in `ids`: the
        caches as onnxruntime's values (bound as the next step's inputs,
        never copied), the rest as NumPy arrays."""
        binding = self.step.io_binding()
        binding.bind_cpu_input("ids", np.array(ids, np.int64))
        binding.bind_cpu_input("position", np.array([step], np.int64))
        binding.bind_cpu_input("beams", beams)
        binding.bind_cpu_input("k", np.array([k], np.int64))
        for name, value in list(caches.items()) + list(fixed.items()):
            binding.bind_ortvalue_input(name, value)
        for name in self.outputs:
            binding.bind_output(name)
        self.step.run_with_iobinding(binding)
        return {name: value if name.startswith("present_") else value.numpy()
                for name, value in zip(self.outputs, binding.get_outputs())}
