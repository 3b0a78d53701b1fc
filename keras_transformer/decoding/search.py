"""Greedy and beam search for the encoder-decoder (paper section 6.1: "beam
search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output
length to input length + 50, but terminate early when possible").

Written in core TensorFlow ops (`tf.while_loop`, fixed-shape state), so that
the searches run inside a `tf.function`, compile with XLA, and go into an
exported SavedModel that stock TensorFlow Serving can run.

The encoder runs once. By default each step runs the decoder on the newest
token only, appending its keys and values to the self-attention caches of
`Transformer.decode_step_growing`, so that step t reads t + 1 cached positions.
`static_cache=True` keeps caches of the maximum output length instead, which
each step writes into: every loop variable then has a fixed shape, as XLA
(`jit_compile=True`) requires, at the cost of attending over (masked) empty
positions and copying the whole cache at every write. `use_cache=False`
re-runs the decoder over the whole prefix at every step (for comparison).

Beam search follows fairseq and Hugging Face: at each step the 2K best
extensions are ranked by log-probability; those ending in the end token and
ranking in the top K join the finished hypotheses (scored with the GNMT
length penalty), the K best others stay alive; a sentence is done once it
has K finished hypotheses. With K = 1 this is exactly greedy search. As in
both, the padding and start tokens are banned after the softmax (their
probability is not spread over the other tokens), so that log-probabilities
of imported models equal the reference implementations'.

The special ids (padding, start, end) are the model config's.
"""

import dataclasses

import tensorflow as tf

_NEG_INF = -1e9


def length_penalty(length, alpha):
    """GNMT length penalty: ((5 + length) / 6) ** alpha.

    A hypothesis's score is its log-probability divided by this, `length`
    counting the generated tokens including the end token.
    """
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """Output of a search.

    Attributes:
        tokens: int32 `(batch, n_best, length)`, best first, each ending with
            the end token and padded with the model's pad id after it (no
            start token).
        scores: float32 `(batch, n_best)`: log-probability divided by the
            length penalty.
        log_probs: float32 `(batch, n_best)`: plain log-probabilities.
    """

    tokens: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor


def output_limits(source_ids, model, decode_margin=None, max_output_length=None):
    """Per-sentence maximum output length: source length (without its end
    token) plus `decode_margin`, capped by `max_output_length`, which defaults
    to the model's `max_length`."""
    config = model.config
    margin = config.decode_margin if decode_margin is None else decode_margin
    cap = config.max_length if max_output_length is None else max_output_length
    real = tf.reduce_sum(tf.cast((source_ids != config.pad_id) & (source_ids != config.eos_id),
                                 tf.int32), axis=1)
    return tf.minimum(real + margin, cap)


class _Decoder:
    """Next-token log-probabilities for `rows` hypotheses, with or without
    the key/value cache, and the reordering of its state between steps."""

    def __init__(self, model, source_ids, copies, length, use_cache, static_cache):
        self.model = model
        self.use_cache = use_cache
        self.grow_cache = not static_cache
        config = model.config
        # The start token is banned unless it is also the end token (fairseq).
        banned = {config.pad_id, config.decoder_start_id} - {config.eos_id}
        # Added, not selected: an add over the vocabulary-wide tensor costs a
        # tenth of a `tf.where` with a broadcast mask (measured).
        self.ban = _NEG_INF * tf.reduce_max(tf.one_hot(sorted(banned), model.target_vocab_size),
                                            axis=0)
        # At its length limit a hypothesis may only end.
        self.not_end = tf.range(model.target_vocab_size) != config.eos_id
        encoder_output = model.encode(source_ids, training=False)
        if use_cache:
            self.state = model.initial_cache(encoder_output, source_ids,
                                             None if self.grow_cache else length, copies)
        else:
            # Every hypothesis of a sentence reads the same encoder output.
            self.source_ids = tf.repeat(source_ids, copies, axis=0)
            self.state = {"encoder_output": tf.repeat(encoder_output, copies, axis=0)}

    def log_probs(self, tokens, step, state, at_limit):
        """`tokens` `(rows, length + 1)` holds each prefix; returns the
        log-probabilities of token `step + 1`, padding and start banned,
        and every token but the end banned in the rows `at_limit` `(rows,)`
        (only in steps where some row is: a select over the whole
        vocabulary-wide tensor costs a few percent of a step)."""
        if self.use_cache:
            # `[:, step][:, None]`, not `[:, step:step + 1]`: a static length
            # of 1 lets the output projection take its faster one-position
            # path (see `SharedEmbedding`).
            step_ids = tokens[:, step][:, None]
            if self.grow_cache:
                logits, state = self.model.decode_step_growing(step_ids, state)
            else:
                logits, state = self.model.decode_step(step_ids, step, state)
        else:
            logits = self.model.decode(tokens[:, :step + 1], state["encoder_output"], self.source_ids)
        log_probs = tf.nn.log_softmax(tf.cast(logits[:, -1], tf.float32))
        log_probs = log_probs + self.ban[None]
        log_probs = tf.cond(
            tf.reduce_any(at_limit),
            lambda: tf.where(at_limit[:, None] & self.not_end[None], _NEG_INF, log_probs),
            lambda: log_probs)
        return log_probs, state

    def reorder(self, state, rows):
        """Keeps the self-attention caches of hypotheses `rows`."""
        if not self.use_cache:
            return state
        gather = lambda tensors: [tf.gather(t, rows) for t in tensors]  # noqa: E731
        return state | {"self_keys": gather(state["self_keys"]),
                        "self_values": gather(state["self_values"])}


def greedy_search(model, source_ids, alpha=None, decode_margin=None, max_output_length=None,
                  use_cache=True, static_cache=False):
    """Picks the most likely token at every step.

    The same tokens as `beam_search` with one beam (the tests check it), in
    a loop of its own because it needs no beam bookkeeping (top-2K
    extensions, finished-hypothesis sets, cache reordering) and so runs
    faster, as the decoding benchmark shows.

    Args:
        model: a `Transformer`.
        source_ids: int32 `(batch, source_length)`, padded with the pad id, each source
            ending with the end token.
        alpha: length penalty of the reported scores (default: the model's).
        decode_margin: see `output_limits`.
        max_output_length: see `output_limits`.
        use_cache: decode incrementally with the key/value cache.
        static_cache: keep fixed-shape caches (needed under XLA; see the
            module docstring).

    Returns:
        A `SearchResult` with one hypothesis per sentence.
    """
    config = model.config
    alpha = config.length_penalty if alpha is None else alpha
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    limits = output_limits(source_ids, model, decode_margin, max_output_length)
    length = tf.reduce_max(limits)
    decoder = _Decoder(model, source_ids, 1, length, use_cache, static_cache)
    tokens = tf.concat([tf.fill([batch, 1], config.decoder_start_id),
                        tf.fill([batch, length], config.pad_id)], axis=1)

    def body(step, tokens, log_prob, finished, state):
        log_probs, state = decoder.log_probs(tokens, step, state, at_limit=step + 1 >= limits)
        choice = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.gather(log_probs, choice, batch_dims=1)
        choice = tf.where(finished, config.pad_id, choice)
        log_prob += tf.where(finished, 0.0, chosen)
        tokens = _write(tokens, step + 1, choice)
        return step + 1, tokens, log_prob, finished | (choice == config.eos_id), state

    loop_vars = (0, tokens, tf.zeros([batch]), tf.zeros([batch], tf.bool), decoder.state)
    _, tokens, log_prob, _, _ = tf.while_loop(
        lambda step, tokens, log_prob, finished, state: ~tf.reduce_all(finished),
        body, loop_vars, maximum_iterations=length, shape_invariants=_free_shapes(loop_vars))
    tokens = tokens[:, 1:]
    lengths = tf.reduce_sum(tf.cast(tokens != config.pad_id, tf.int32), axis=1)
    scores = log_prob / length_penalty(lengths, alpha)
    return SearchResult(tokens[:, None], scores[:, None], log_prob[:, None])


def beam_search(model, source_ids, beam_size=None, alpha=None, decode_margin=None,
                max_output_length=None, use_cache=True, static_cache=False):
    """Beam search with the GNMT length penalty (see the module docstring).

    Args:
        model: a `Transformer`.
        source_ids: int32 `(batch, source_length)`, padded with the pad id, each source
            ending with the end token.
        beam_size: K (default: the model config's, 4 in the paper).
        alpha: length penalty (default: the model config's, 0.6).
        decode_margin: see `output_limits`.
        max_output_length: see `output_limits`.
        use_cache: decode incrementally with the key/value cache.
        static_cache: keep fixed-shape caches (needed under XLA; see the
            module docstring).

    Returns:
        A `SearchResult` with the K best finished hypotheses per sentence.
    """
    config = model.config
    k = config.beam_size if beam_size is None else beam_size
    alpha = config.length_penalty if alpha is None else alpha
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    limits = output_limits(source_ids, model, decode_margin, max_output_length)
    length = tf.reduce_max(limits)
    decoder = _Decoder(model, source_ids, k, length, use_cache, static_cache)
    # At the start all K beams hold the same prefix: keep only one alive.
    alive_log_probs = tf.tile(tf.concat([[0.0], tf.fill([k - 1], _NEG_INF)], 0)[None], [batch, 1])
    alive = tf.concat([tf.fill([batch, k, 1], config.decoder_start_id),
                       tf.fill([batch, k, length], config.pad_id)], axis=2)
    finished = tf.fill([batch, k, length + 1], config.pad_id)
    finished_scores = tf.fill([batch, k], _NEG_INF)
    finished_log_probs = tf.fill([batch, k], _NEG_INF)
    finished_count = tf.zeros([batch], tf.int32)
    batch_rows = tf.range(batch)[:, None] * k
    per_beam = tf.minimum(2 * k, model.target_vocab_size)  # extensions ranked per beam

    def body(step, alive, alive_log_probs, finished, finished_scores, finished_log_probs,
             finished_count, state):
        log_probs, state = decoder.log_probs(tf.reshape(alive, [batch * k, -1]), step, state,
                                             at_limit=tf.repeat(step + 1 >= limits, k))
        # The 2K best extensions of all K beams are among the 2K best of each
        # beam: rank each beam's vocabulary first, then the K * 2K survivors
        # (one pass over the vocabulary-wide tensor instead of three). The
        # order, ties included, is that of ranking all K * vocab at once:
        # the lower beam, then the lower token, first.
        row_log_probs, row_tokens = _top_k(log_probs, per_beam)
        candidates = alive_log_probs[:, :, None] + tf.reshape(row_log_probs, [batch, k, per_beam])
        top_log_probs, top_ids = tf.math.top_k(tf.reshape(candidates, [batch, k * per_beam]),
                                               k=2 * k)
        top_beams = top_ids // per_beam
        top_tokens = tf.gather(tf.reshape(row_tokens, [batch, k * per_beam]), top_ids, batch_dims=1)
        top_sequences = _write(tf.gather(alive, top_beams, batch_dims=1), step + 1, top_tokens)
        is_end = tf.equal(top_tokens, config.eos_id)
        done = finished_count >= k

        # Finished: end tokens ranked in the top K, merged with those so far.
        new_scores = top_log_probs / length_penalty(step + 1, alpha)
        eligible = is_end & (tf.range(2 * k) < k)[None] & ~done[:, None] & (top_log_probs > _NEG_INF / 2)
        new_scores = tf.where(eligible, new_scores, _NEG_INF)
        merged_scores = tf.concat([finished_scores, new_scores], axis=1)
        finished_scores, keep = tf.math.top_k(merged_scores, k=k)
        finished = tf.gather(tf.concat([finished, top_sequences], 1), keep, batch_dims=1)
        finished_log_probs = tf.gather(
            tf.concat([finished_log_probs, tf.where(eligible, top_log_probs, _NEG_INF)], 1),
            keep, batch_dims=1)
        finished_count += tf.reduce_sum(tf.cast(eligible, tf.int32), axis=1)

        # Alive: the K best extensions that did not end.
        alive_scores, keep = tf.math.top_k(tf.where(is_end, _NEG_INF, top_log_probs), k=k)
        alive = tf.gather(top_sequences, keep, batch_dims=1)
        alive_log_probs = alive_scores
        rows = tf.reshape(tf.gather(top_beams, keep, batch_dims=1) + batch_rows, [-1])
        return (step + 1, alive, alive_log_probs, finished, finished_scores, finished_log_probs,
                finished_count, decoder.reorder(state, rows))

    def not_done(step, alive, alive_log_probs, finished, finished_scores, finished_log_probs,
                 finished_count, state):
        # A sentence is done with K finished hypotheses, or past its limit
        # (fewer than K when fewer than K prefixes were ever alive).
        return ~tf.reduce_all((finished_count >= k) | (step >= limits))

    loop_vars = (0, alive, alive_log_probs, finished, finished_scores, finished_log_probs,
                 finished_count, decoder.state)
    loop = tf.while_loop(not_done, body, loop_vars, maximum_iterations=length,
                         shape_invariants=_free_shapes(loop_vars))
    finished, finished_scores, finished_log_probs = loop[3], loop[4], loop[5]
    return SearchResult(finished[:, :, 1:], finished_scores, finished_log_probs)


def _free_shapes(loop_vars):
    """Shape invariants that leave every dimension free but the head size of
    the caches: the batch and beam (so that `beam_size` may be a tensor fed
    at run time), and the length of the growing caches."""

    def relax(value):
        shape = tf.TensorShape(tf.convert_to_tensor(value).shape)
        if shape.rank == 4:  # a cache: (rows, heads, length, head_dim)
            return tf.TensorShape([None, None, None, shape[3]])
        return tf.TensorShape([None] * shape.rank)

    return tf.nest.map_structure(relax, loop_vars)


def _top_k(values, k, block=512):
    """`tf.math.top_k(values, k)` over the last axis of `(rows, n)`, the
    same values and indices, ties included (the lower index first).

    Written here because TensorFlow's top-k kernel is slow for a small k
    over a large n: for 64 rows of 37,000 log-probabilities and k = 8 it
    took 6.3 ms on this project's CPU, this 2.0 ms. The k largest values
    lie in the k blocks of `block` values with the largest maxima (a value
    in any other block has k block maxima at least as large, at lower
    indices when equal), so only those blocks, kept in index order, are
    ranked.
    """
    n = values.shape[-1]
    if n is None or n < 16 * block:
        return tf.math.top_k(values, k)
    rows, blocks = tf.shape(values)[0], -(-n // block)
    if blocks * block != n:
        values = tf.pad(values, [[0, 0], [0, blocks * block - n]], constant_values=-float("inf"))
    grouped = tf.reshape(values, [rows, blocks, block])
    # (k may be a tensor; with k >= blocks every block is kept.)
    maxima = tf.reduce_max(grouped, axis=2)
    best = tf.sort(tf.math.top_k(maxima, tf.minimum(k, blocks)).indices, axis=1)
    top, positions = tf.math.top_k(tf.reshape(tf.gather(grouped, best, batch_dims=1), [rows, -1]), k)
    return top, tf.gather(best, positions // block, batch_dims=1) * block + positions % block


def _write(tokens, position, values):
    """`tokens[..., position] = values` as a select (fixed shapes, no scatter)."""
    columns = tf.range(tf.shape(tokens)[-1]) == position
    return tf.where(columns, tf.cast(values, tokens.dtype)[..., None], tokens)
