"""Greedy and beam search for the encoder-decoder (paper section 6.1: "beam
search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output
length to input length + 50, but terminate early when possible").

Written in core TensorFlow ops (a `tf.while_loop`), so that
the searches run inside a `tf.function`, compile with XLA, and go into an
exported SavedModel that stock TensorFlow Serving can run.

The encoder runs once. By default each step runs the decoder on the newest
token only, appending its keys and values to the self-attention caches of
`Transformer.decode_step_growing`, so that step t reads t + 1 cached positions.
`static_cache=True` keeps caches of the maximum output length instead, which
each step writes into: every loop variable then has a fixed shape, as XLA
(`jit_compile=True`) requires (given a Python int `max_output_length`, the
caches are that long, and XLA compiles once for all sources of a shape), at
the cost of attending over (masked) empty positions and copying the whole
cache at every write. `use_cache=False`
re-runs the decoder over the whole prefix at every step (for comparison).

Finished sentences leave the batch (`drop_finished`, on unless
`static_cache`): at each step where some sentence is done, and only then
(a `tf.cond`), the rows of the others are gathered from every per-sentence
tensor (tokens, scores, finished hypotheses, length limits, source padding,
cross-attention keys and values) and from the self-attention caches, and
the finished sentence's result is written into its row of the output. A
batch then costs at each step what its unfinished sentences cost, not what
its longest one does (CTranslate2, fairseq and Marian do the same). Each
sentence's tokens and scores are those of the search without dropping: no
step of a sentence reads another sentence's rows. The loop's batch
dimension is free in its shape invariants, so the function is traced once.

Beam search follows fairseq and Hugging Face: at each step the 2K best
extensions are ranked by log-probability; those ending in the end token and
ranking in the top K join the finished hypotheses (scored with the GNMT
length penalty), the K best others stay alive; a sentence is done once it
has K finished hypotheses. With K = 1 this is exactly greedy search. As in
both, the padding and start tokens are banned after the softmax (their
probability is not spread over the other tokens), so that log-probabilities
of imported models equal the reference implementations'.

With `alignment_layer`, a search also keeps, for each token it writes, the
source position that decoder layer's encoder-decoder attention weighed
most (its heads averaged) at the step that chose the token: the attention
it computes anyway, read as it goes, so that a translation's alignment
(`decoding.alignment`) costs no second pass of the model. A hypothesis's
positions travel with its tokens, reordered as the beam reorders them.

The special ids (padding, start, end) are the model config's.
"""

import dataclasses

import tensorflow as tf

from keras_transformer.decoding import constraints as lexical

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
        attended: with `alignment_layer`, int32 `(batch, n_best, length)`:
            for each token, the source position its step attended to most
            (0 after the end token); else None.
        met: with constraints, bool `(batch, n_best)`: whether the
            hypothesis holds all its sentence's constraints (only one that
            reached the output limit may not); else None.
    """

    tokens: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    attended: tf.Tensor = None
    met: tf.Tensor = None


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Drawing each next token from the model's distribution instead of
    taking the most likely, for back-translation (Edunov et al. 2018,
    "Understanding Back-Translation at Scale": sampled source sentences
    train better models than beam search's).

    Attributes:
        top_k: 0 draws from the whole distribution; k > 0 from the k most
            likely tokens, their probabilities renormalized (tokens tied
            with the k-th are kept too); 1 is greedy search.
        temperature: the log-probabilities are divided by it first (below
            1 sharper, above 1 flatter).
        seed: the draws are stateless functions of the seed, the step and
            the rows still being decoded (finished sentences leave the
            batch), so that the same seed and batch give the same output.

    The fields may be scalar tensors (a SavedModel's inputs).
    """

    top_k: int = 0
    temperature: float = 1.0
    seed: int = 0


def choose_tokens(log_probs, step, sampling=None):
    """The next token of each row of `log_probs` `(rows, vocabulary)`: the
    most likely, or with `sampling` a draw (see `Sampling`) for `step`."""
    if sampling is None:
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
    logits = log_probs / tf.cast(sampling.temperature, tf.float32)
    kept = tf.convert_to_tensor(sampling.top_k, tf.int32)
    kth = top_k(logits, tf.maximum(kept, 1))[0][:, -1:]
    logits = tf.where((kept > 0) & (logits < kth), _NEG_INF, logits)
    seed = tf.stack([tf.cast(sampling.seed, tf.int64), tf.cast(step, tf.int64)])
    return tf.random.stateless_categorical(logits, 1, seed, dtype=tf.int32)[:, 0]


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


def token_ban(model):
    """-1e9 on the tokens no search writes, 0 on the others, float32
    `(vocabulary,)`: padding, and the start token unless it is also the end
    token (fairseq). Added to the log-probabilities after the softmax, not
    selected: an add over the vocabulary-wide tensor costs far less than a
    `tf.where` with a broadcast mask."""
    config = model.config
    banned = {config.pad_id, config.decoder_start_id} - {config.eos_id}
    return _NEG_INF * tf.reduce_max(tf.one_hot(sorted(banned), model.target_vocab_size), axis=0)


class TokenScores:
    """The next token's log-probabilities from a decoding step's logits, as
    every search scores them: the padding and start tokens banned, and at a
    hypothesis's length limit every token but the end. Holds the output
    projection's matrix (`Transformer.output_weights`), made once for a
    search, not at every step: inside the graph that steps, unless given."""

    def __init__(self, model, output_weights=None):
        config = model.config
        self.ban = token_ban(model)
        # At its length limit a hypothesis may only end.
        self.not_end = tf.range(model.target_vocab_size) != config.eos_id
        self.output_weights = model.output_weights() if output_weights is None else output_weights

    def log_probs(self, logits, at_limit):
        """Log-probabilities `(rows, vocabulary)` of the last position of
        `logits` `(rows, steps, vocabulary)`, every token but the end banned
        in the rows `at_limit` `(rows,)` (only in steps where some row is: a
        select over the whole vocabulary-wide tensor costs a few percent of
        a step)."""
        log_probs = tf.nn.log_softmax(tf.cast(logits[:, -1], tf.float32))
        log_probs = log_probs + self.ban[None]
        return tf.cond(
            tf.reduce_any(at_limit),
            lambda: tf.where(at_limit[:, None] & self.not_end[None], _NEG_INF, log_probs),
            lambda: log_probs)


MAX_NGRAM = 8
"""The largest `no_repeat_ngram` of a search."""


def repeated_ngram_ban(tokens, step, n, vocab_size):
    """-1e9 on each token that would repeat an n-gram at position `step + 1`
    of `tokens` `(rows, length)` (each row's prefix written up to `step`,
    its start token at 0), 0 elsewhere: `(rows, vocab_size)`. An n-gram is
    repeated where its first n - 1 tokens are the prefix's last n - 1 and
    the prefix holds it already (fairseq's `no_repeat_ngram_size`; with
    n = 1, no token is written twice). `n` a scalar (a tensor allowed)
    from 1 to `MAX_NGRAM`."""
    n = tf.convert_to_tensor(n, tf.int32)
    rows, length = tf.shape(tokens)[0], tf.shape(tokens)[1]
    starts = tf.range(length)
    # The earlier n-grams tokens[j : j + n], the start token left out, that
    # the prefix holds whole.
    match = tf.broadcast_to((starts >= 1) & (starts + n - 1 <= step), [rows, length])
    for i in range(MAX_NGRAM - 1):
        earlier = tf.gather(tokens, tf.minimum(starts + i, length - 1), axis=1)
        latest = tf.gather(tokens, tf.clip_by_value(step - n + 2 + i, 0, length - 1), axis=1)
        match &= (i >= n - 1) | tf.equal(earlier, latest[:, None])
    banned = tf.gather(tokens, tf.minimum(starts + n - 1, length - 1), axis=1)
    row_ids = tf.broadcast_to(tf.range(rows)[:, None], [rows, length])
    hits = tf.scatter_nd(tf.stack([row_ids, banned], axis=-1), tf.cast(match, tf.float32),
                         [rows, vocab_size])
    return tf.where(hits > 0, _NEG_INF, 0.0)


class _Decoder:
    """Next-token log-probabilities for `copies` hypotheses per sentence,
    with or without the key/value cache, and the selection of rows of its
    state between steps.

    The state holds entries of two kinds: one row per sentence (the source
    padding, the cross-attention keys and values; without the cache, the
    encoder output and the source ids), and one row per hypothesis (the
    self-attention caches, `copies` consecutive rows per sentence; with
    `first_copies`, that many before the first step).
    """

    def __init__(self, model, source_ids, copies, length, use_cache, static_cache,
                 first_copies=None, alignment_layer=None, output_weights=None,
                 no_repeat_ngram=None):
        if alignment_layer is not None and not use_cache:
            raise ValueError("alignment_layer reads the cached decoder's steps; it needs "
                             "use_cache=True.")
        self.model = model
        self.copies = copies
        self.use_cache = use_cache
        self.alignment_layer = alignment_layer
        self.grow_cache = not static_cache
        self.no_repeat_ngram = no_repeat_ngram
        config = model.config
        self.scores = TokenScores(model, output_weights)
        encoder_output = model.encode(source_ids, training=False)
        if use_cache:
            self.state = model.initial_cache(encoder_output, source_ids,
                                             None if self.grow_cache else length,
                                             copies if first_copies is None else first_copies)
        else:
            self.state = {"encoder_output": encoder_output, "source_ids": source_ids}
        if alignment_layer is not None:  # the end token is never aligned to
            self.state = self.state | {"source_ends": tf.equal(source_ids, config.eos_id)}

    def log_probs(self, tokens, step, state, at_limit):
        """`tokens` `(rows, length + 1)` holds each prefix; returns the
        log-probabilities of token `step + 1` (`TokenScores`); and with
        `alignment_layer`, the source position each row attended to most
        `(rows,)` (else None)."""
        attended = None
        if self.use_cache:
            # `[:, step][:, None]`, not `[:, step:step + 1]`: a static length
            # of 1 lets the output projection take its faster one-position
            # path (see `SharedEmbedding`).
            step_ids = tokens[:, step][:, None]
            if self.grow_cache:
                outputs = self.model.decode_step_growing(step_ids, state,
                                                         self.scores.output_weights,
                                                         self.alignment_layer)
            else:
                outputs = self.model.decode_step(step_ids, step, state,
                                                 self.scores.output_weights, self.alignment_layer)
            logits, state = outputs[:2]
            if self.alignment_layer is not None:
                attended = most_attended(outputs[2],
                                         state["source_ends"] | ~state["source_padding"])
        else:
            # Every hypothesis of a sentence reads the same encoder output.
            repeat = lambda t: tf.repeat(t, self.copies, axis=0)  # noqa: E731
            logits = self.model.decode(tokens[:, :step + 1], repeat(state["encoder_output"]),
                                       repeat(state["source_ids"]))
        log_probs = self.scores.log_probs(logits, at_limit)
        if self.no_repeat_ngram is not None:  # (a tensor: 0 bans nothing, in a branch not taken)
            log_probs = tf.cond(
                tf.convert_to_tensor(self.no_repeat_ngram) > 0,
                lambda: log_probs + repeated_ngram_ban(tokens, step, self.no_repeat_ngram,
                                                       self.model.target_vocab_size),
                lambda: log_probs)
        return log_probs, state, attended

    def reorder(self, state, rows):
        """Keeps the self-attention caches of hypotheses `rows` (in that
        order: a beam's reordering, and dropping finished sentences)."""
        if not self.use_cache:
            return state
        gather = lambda tensors: [tf.gather(t, rows) for t in tensors]  # noqa: E731
        return state | {"self_keys": gather(state["self_keys"]),
                        "self_values": gather(state["self_values"])}

    def keep_sentences(self, state, sentences):
        """Keeps the per-sentence entries of `sentences` (indexes of rows)."""
        per_sentence = ("source_padding", "cross_keys", "cross_values", "encoder_output",
                        "source_ids", "source_ends")
        return state | {name: tf.nest.map_structure(lambda t: tf.gather(t, sentences), value)
                        for name, value in state.items() if name in per_sentence}


def most_attended(weights, excluded):
    """The source position each decoder row attended to most at its newest
    position: `weights` `(rows, steps, source_length)` (heads averaged),
    the positions `excluded` `(sentences, source_length)` (rows of one
    sentence consecutive; the end token and padding) never chosen, so that
    a source of the end token alone gives position 0 however it is padded."""
    weights = weights[:, -1]
    excluded = tf.repeat(excluded, tf.shape(weights)[0] // tf.maximum(tf.shape(excluded)[0], 1),
                         axis=0)
    return tf.argmax(tf.where(excluded, -1.0, tf.cast(weights, tf.float32)), axis=-1,
                     output_type=tf.int32)


def _drop_done(done, sentences, results, finished_part):
    """Moves the sentences that are `done` out of the batch.

    Args:
        done: bool `(live,)`.
        sentences: dict of per-sentence tensors `(live, ...)`, whose
            `"index"` is each one's row in the caller's batch.
        results: dict of tensors `(batch, ...)`, the outputs of every
            sentence of the batch, each written when it leaves.
        finished_part: `sentences -> dict` of the entries of `results`.

    Returns:
        `(kept, sentences, results)`: the indexes of the live rows that
        stay, the sentences keeping only those, and the results with the
        done ones written into their rows.
    """
    kept = tf.cast(tf.where(~done)[:, 0], tf.int32)
    gone = tf.cast(tf.where(done)[:, 0], tf.int32)
    index = tf.gather(sentences["index"], gone)[:, None]
    results = {name: tf.tensor_scatter_nd_update(results[name], index, tf.gather(value, gone))
               for name, value in finished_part(sentences).items()}
    return kept, tf.nest.map_structure(lambda t: tf.gather(t, kept), sentences), results


def _check_drop_finished(drop_finished, static_cache):
    """`drop_finished` resolved: by default on, except with fixed-shape caches."""
    if drop_finished is None:
        return not static_cache
    if drop_finished and static_cache:
        raise ValueError("drop_finished=True changes the batch size between steps, which "
                         "static_cache=True (fixed shapes, for XLA) excludes; leave one out.")
    return drop_finished


def initial_greedy(batch, length, config):
    """Greedy search's state of `batch` sentences before the first step, for
    outputs of up to `length` tokens: each one's tokens (the start token,
    then padding), log-probability and whether it has ended."""
    tokens = tf.concat([tf.fill([batch, 1], config.decoder_start_id),
                        tf.fill([batch, length], config.pad_id)], axis=1)
    return {"tokens": tokens, "log_prob": tf.zeros([batch]),
            "finished": tf.zeros([batch], tf.bool)}


def greedy_step(s, log_probs, step, config, sampling=None, attended=None):
    """Greedy search's sentences `s` after the step that decoded position
    `step` (a scalar, or one for each sentence) into `log_probs`: the chosen
    token written at `step + 1` (padding once a sentence has ended), and
    with `attended`, the source position it attended to."""
    ended = s["finished"]
    choice = choose_tokens(log_probs, step, sampling)
    chosen = tf.gather(log_probs, choice, batch_dims=1)
    choice = tf.where(ended, config.pad_id, choice)
    s = s | {"tokens": _write(s["tokens"], step + 1, choice),
             "log_prob": s["log_prob"] + tf.where(ended, 0.0, chosen),
             "finished": ended | (choice == config.eos_id)}
    if attended is not None:
        s["attended"] = _write(s["attended"], step + 1, tf.where(ended, 0, attended))
    return s


def greedy_search(model, source_ids, alpha=None, decode_margin=None, max_output_length=None,
                  use_cache=True, static_cache=False, drop_finished=None, sampling=None,
                  alignment_layer=None, output_weights=None, no_repeat_ngram=None):
    """Picks the most likely token at every step, or with `sampling` draws
    it from the model's distribution (`Sampling`).

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
        drop_finished: remove each sentence from the batch at the step it
            ends (see the module docstring); default: unless `static_cache`.
        sampling: a `Sampling`, or None for the most likely tokens. The
            scores are the model's log-probabilities of the drawn tokens
            (before any temperature or top-k).
        alignment_layer: a decoder layer whose attention the result's
            `attended` follows (see the module docstring); None: none.
        output_weights: the output projection's matrix
            (`Transformer.output_weights()`), for a caller that searches
            many batches with the same weights; None: made in this search.
        no_repeat_ngram: no n-gram of this many tokens written twice
            (`repeated_ngram_ban`; a scalar, a tensor allowed, 0 for no
            ban): what the Translator's guard searches a looping
            translation again with; None: no ban, and none of its work in
            the graph.

    Returns:
        A `SearchResult` with one hypothesis per sentence.
    """
    config = model.config
    alpha = config.length_penalty if alpha is None else alpha
    drop = _check_drop_finished(drop_finished, static_cache)
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    limits = output_limits(source_ids, model, decode_margin, max_output_length)
    length = _output_length(limits, static_cache, max_output_length)
    aligned = alignment_layer is not None
    decoder = _Decoder(model, source_ids, 1, length, use_cache, static_cache,
                       alignment_layer=alignment_layer, output_weights=output_weights,
                       no_repeat_ngram=no_repeat_ngram)
    sentences = initial_greedy(batch, length, config) | {"index": tf.range(batch),
                                                          "limit": limits}
    if aligned:
        sentences["attended"] = tf.zeros_like(sentences["tokens"])
    names = ("tokens", "log_prob") + (("attended",) if aligned else ())
    finished_part = lambda s: {name: s[name] for name in names}  # noqa: E731
    results = finished_part(sentences)

    def body(step, sentences, state, results):
        s = sentences
        log_probs, state, attended = decoder.log_probs(s["tokens"], step, state,
                                                       at_limit=step + 1 >= s["limit"])
        sentences = greedy_step(s, log_probs, step, config, sampling, attended)
        if drop:
            def drop_done():
                kept, kept_sentences, new_results = _drop_done(
                    sentences["finished"], sentences, results, finished_part)
                kept_state = decoder.reorder(decoder.keep_sentences(state, kept), kept)
                return kept_sentences, kept_state, new_results

            sentences, state, results = tf.cond(
                tf.reduce_any(sentences["finished"]), drop_done,
                lambda: (sentences, state, results))
        return step + 1, sentences, state, results

    loop_vars = (0, sentences, decoder.state, results)
    _, sentences, _, results = tf.while_loop(
        lambda step, sentences, state, results: ~tf.reduce_all(sentences["finished"]),
        body, loop_vars, maximum_iterations=length, shape_invariants=free_shapes(loop_vars))
    if not drop:
        results = finished_part(sentences)
    tokens, log_prob = results["tokens"][:, 1:], results["log_prob"]
    lengths = tf.reduce_sum(tf.cast(tokens != config.pad_id, tf.int32), axis=1)
    scores = log_prob / length_penalty(lengths, alpha)
    return SearchResult(tokens[:, None], scores[:, None], log_prob[:, None],
                        results["attended"][:, None, 1:] if aligned else None)


def initial_beams(batch, k, length, config):
    """Beam search's state of `batch` sentences before the first step, for
    outputs of up to `length` tokens: K alive hypotheses each (the start
    token, then padding; only the first alive, so that the first step
    extends one prefix), and room for K finished ones."""
    return {
        "alive": tf.concat([tf.fill([batch, k, 1], config.decoder_start_id),
                            tf.fill([batch, k, length], config.pad_id)], axis=2),
        "alive_log_probs": tf.tile(tf.concat([[0.0], tf.fill([k - 1], _NEG_INF)], 0)[None],
                                   [batch, 1]),
        "finished": tf.fill([batch, k, length + 1], config.pad_id),
        "finished_scores": tf.fill([batch, k], _NEG_INF),
        "finished_log_probs": tf.fill([batch, k], _NEG_INF),
        "finished_count": tf.zeros([batch], tf.int32),
    }


def beam_step(s, log_probs, step, k, copies, alpha, config, attended=None):
    """Beam search's sentences `s` after the step that decoded position
    `step` (a scalar, or one for each sentence) of their first `copies`
    hypotheses into `log_probs` `(sentences * copies, vocabulary)`.

    Returns:
        `(s, rows)`: the sentences, and for each of their K alive
        hypotheses `(sentences, K)` the decoded row it continues, whose
        self-attention caches it takes.
    """
    live = tf.shape(s["alive"])[0]
    top_log_probs, top_beams, top_tokens, _ = top_extensions(s, log_probs, k, copies)
    top_sequences = _write(tf.gather(s["alive"], top_beams, batch_dims=1), step + 1,
                           top_tokens)
    is_end = tf.equal(top_tokens, config.eos_id)
    done = s["finished_count"] >= k

    # Finished: end tokens ranked in the top K, merged with those so far.
    new_scores = top_log_probs / _per_sentence(length_penalty(step + 1, alpha))
    eligible = (is_end & (tf.range(2 * k) < k)[None] & ~done[:, None]
                & (top_log_probs > _NEG_INF / 2))
    new_scores = tf.where(eligible, new_scores, _NEG_INF)
    merged_scores = tf.concat([s["finished_scores"], new_scores], axis=1)
    finished_scores, finished_keep = tf.math.top_k(merged_scores, k=k)
    finished = tf.gather(tf.concat([s["finished"], top_sequences], 1), finished_keep,
                         batch_dims=1)
    finished_log_probs = tf.gather(
        tf.concat([s["finished_log_probs"], tf.where(eligible, top_log_probs, _NEG_INF)], 1),
        finished_keep, batch_dims=1)

    # Alive: the K best extensions that did not end.
    alive_log_probs, keep = tf.math.top_k(tf.where(is_end, _NEG_INF, top_log_probs), k=k)
    if attended is not None:  # a token's position is its parent row's at this step
        top_attended = _write(
            tf.gather(s["alive_attended"], top_beams, batch_dims=1), step + 1,
            tf.gather(tf.reshape(attended, [live, copies]), top_beams, batch_dims=1))
        s = s | {"alive_attended": tf.gather(top_attended, keep, batch_dims=1),
                 "finished_attended": tf.gather(
                     tf.concat([s["finished_attended"], top_attended], 1), finished_keep,
                     batch_dims=1)}
    s = s | {
        "alive": tf.gather(top_sequences, keep, batch_dims=1),
        "alive_log_probs": alive_log_probs,
        "finished": finished,
        "finished_scores": finished_scores,
        "finished_log_probs": finished_log_probs,
        "finished_count": s["finished_count"] + tf.reduce_sum(tf.cast(eligible, tf.int32),
                                                              axis=1),
    }
    # Row j of sentence i continues the hypothesis in decoded row `rows[i, j]`.
    return s, tf.gather(top_beams, keep, batch_dims=1) + tf.range(live)[:, None] * copies


def top_extensions(s, log_probs, k, copies):
    """The 2K best extensions of the sentences `s`'s first `copies` beams,
    decoded into `log_probs` `(sentences * copies, vocabulary)`: their
    log-probabilities, beams and tokens, each `(sentences, 2K)`, best first;
    and each decoded row's best token `(sentences, copies)`.

    The 2K best extensions of all beams are among the 2K best of each
    beam: each beam's vocabulary is ranked first, then the beams * 2K
    survivors (one pass over the vocabulary-wide tensor instead of three).
    The order, ties included, is that of ranking all beams * vocab at once:
    the lower beam, then the lower token, first."""
    live = tf.shape(s["alive"])[0]
    per_beam = tf.minimum(2 * k, log_probs.shape[-1])  # extensions ranked per beam
    row_log_probs, row_tokens = top_k(log_probs, per_beam)
    candidates = s["alive_log_probs"][:, :copies, None] + tf.reshape(
        row_log_probs, [live, copies, per_beam])
    top_log_probs, top_ids = tf.math.top_k(tf.reshape(candidates, [live, copies * per_beam]),
                                           k=2 * k)
    top_tokens = tf.gather(tf.reshape(row_tokens, [live, copies * per_beam]), top_ids,
                           batch_dims=1)
    return top_log_probs, top_ids // per_beam, top_tokens, tf.reshape(row_tokens[:, 0],
                                                                       [live, copies])


def beam_done(step, sentences, k, alpha, best_only):
    """Whether each sentence's beam search is done at `step` (a scalar, or
    one for each sentence): with K finished hypotheses, or past its limit
    (fewer than K when fewer than K prefixes were ever alive), or with
    `best_only` once its best is settled (`_settled`)."""
    done = (sentences["finished_count"] >= k) | (step >= sentences["limit"])
    return done | _settled(step, sentences, alpha) if best_only else done


def _output_length(limits, static_cache, max_output_length):
    """The outputs' (and caches') length: the longest of the sentences'
    `limits`; with `static_cache` and a Python int `max_output_length`,
    that. XLA then knows the shapes from the source's shape alone; from the
    limits it takes the source's values as constants, compiling the search
    again for each source."""
    if static_cache and isinstance(max_output_length, int):
        return max_output_length
    return tf.reduce_max(limits)


def _per_sentence(value):
    """`value`, one for each sentence `(sentences,)`, as a column that
    broadcasts over their hypotheses; a scalar as it is."""
    return value[:, None] if value.shape.rank == 1 else value


def beam_search(model, source_ids, beam_size=None, alpha=None, decode_margin=None,
                max_output_length=None, use_cache=True, static_cache=False, drop_finished=None,
                best_only=False, alignment_layer=None, output_weights=None, constraints=None,
                no_repeat_ngram=None):
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
        drop_finished: remove each sentence from the batch at the step it
            is done (see the module docstring); default: unless
            `static_cache`.
        best_only: return only the best hypothesis, and end each sentence
            as soon as no alive hypothesis can beat its best finished one,
            which may be steps before it has K finished hypotheses: the
            same best translation and score, fewer steps (see `_settled`).
        alignment_layer: a decoder layer whose attention the result's
            `attended` follows (see the module docstring); None: none.
        output_weights: see `greedy_search`.
        constraints: a `constraints.Constraints` of target phrases each
            sentence's translations must hold (lexically constrained
            search, `decoding.constraints`); None: none. A sentence
            without any is searched as without them.
        no_repeat_ngram: see `greedy_search`.

    Returns:
        A `SearchResult` with the K best finished hypotheses per sentence
        (with `best_only`, the best one); with `constraints`, its `met`.
    """
    config = model.config
    k = config.beam_size if beam_size is None else beam_size
    alpha = config.length_penalty if alpha is None else alpha
    drop = _check_drop_finished(drop_finished, static_cache)
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    limits = output_limits(source_ids, model, decode_margin, max_output_length)
    length = _output_length(limits, static_cache, max_output_length)
    # At the start all K beams hold the same prefix: keep only one alive. With
    # the growing cache the first step also decodes that one row per sentence
    # (and the K rows are its copies from the second step on), as CTranslate2
    # does on CPU: a sentence of a real file stays only some ten steps in
    # the batch, so K rows at its first step are a noticeable share of a
    # file's decoder rows. Fixed-shape caches keep K rows throughout; so
    # does a beam whose first step has fewer than 2K extensions (a
    # vocabulary under 2K tokens).
    expand_after_first = use_cache and not static_cache
    first_copies = tf.where(2 * k <= model.target_vocab_size, 1, k) if expand_after_first else k
    aligned = alignment_layer is not None
    decoder = _Decoder(model, source_ids, k, length, use_cache, static_cache, first_copies,
                       alignment_layer, output_weights, no_repeat_ngram)
    sentences = initial_beams(batch, k, length, config) | {"index": tf.range(batch),
                                                           "limit": limits}
    if aligned:  # each hypothesis's attended positions, beside its tokens
        sentences["alive_attended"] = tf.zeros_like(sentences["alive"])
        sentences["finished_attended"] = tf.zeros_like(sentences["finished"])
    if constraints is not None:
        sentences |= {"phrases": constraints.phrases, "owner": constraints.owner}
        sentences |= lexical.initial_state(sentences, k)

    def finished_part(s):
        part = {"tokens": s["finished"], "scores": s["finished_scores"],
                "log_probs": s["finished_log_probs"]}
        if constraints is not None:  # (a sentence without any holds them all)
            part["met"] = s["finished_met"] | ~s["constrained"][:, None]
        return part | {"attended": s["finished_attended"]} if aligned else part

    results = finished_part(sentences)

    def body(step, sentences, state, results):
        s = sentences
        live = tf.shape(s["alive"])[0]
        # Hypotheses decoded at this step per sentence: the first `copies`
        # beams (the others are not alive yet at the first step).
        copies = tf.where(step == 0, first_copies, k) if expand_after_first else k
        log_probs, state, attended = decoder.log_probs(
            tf.reshape(s["alive"][:, :copies], [live * copies, -1]), step, state,
            at_limit=tf.repeat(step + 1 >= s["limit"], copies))
        if constraints is None:
            sentences, rows = beam_step(s, log_probs, step, k, copies, alpha, config, attended)
        else:
            sentences, rows = _either_step(
                s, lambda: beam_step(s, log_probs, step, k, copies, alpha, config, attended),
                lambda: lexical.constrained_step(
                    s, log_probs, step, k, copies, alpha, config,
                    top_extensions(s, log_probs, k, copies), length_penalty, _write,
                    constraints.word_starts, attended))
        if drop:
            def drop_done(sentences, state, results, rows):
                kept, sentences, results = _drop_done(
                    beam_done(step + 1, sentences, k, alpha, best_only), sentences, results,
                    finished_part)
                return sentences, decoder.keep_sentences(state, kept), results, tf.gather(rows, kept)

            sentences, state, results, rows = tf.cond(
                tf.reduce_any(beam_done(step + 1, sentences, k, alpha, best_only)),
                lambda: drop_done(sentences, state, results, rows),
                lambda: (sentences, state, results, rows))
        return step + 1, sentences, decoder.reorder(state, tf.reshape(rows, [-1])), results

    loop_vars = (0, sentences, decoder.state, results)
    _, sentences, _, results = tf.while_loop(
        lambda step, sentences, state, results: ~tf.reduce_all(
            beam_done(step, sentences, k, alpha, best_only)),
        body, loop_vars, maximum_iterations=length, shape_invariants=free_shapes(loop_vars))
    if not drop:
        results = finished_part(sentences)
    if best_only:
        results = {name: value[:, :1] for name, value in results.items()}
    return SearchResult(results["tokens"][:, :, 1:], results["scores"], results["log_probs"],
                        results["attended"][:, :, 1:] if aligned else None,
                        results.get("met"))


def _either_step(s, plain, bound):
    """The step of a constrained search's sentences `s`: `bound()` (the
    constrained step) for those with constraints, `plain()` (beam search's)
    for the others; each `(sentences, rows)`. Each runs only where the
    batch holds its kind of sentence (a `tf.cond` at every step), so that
    one traced search serves batches with constraints, batches without
    and batches of both: a glossary's translations trace one search, not
    two (a trace is most of a short file's time)."""
    constrained = s["constrained"]
    every, some = tf.reduce_all(constrained), tf.reduce_any(constrained)
    unused = (s, tf.zeros_like(s["alive"][:, :, 0]))  # (a branch not taken)
    plain = tf.cond(every, lambda: unused, plain)
    bound = tf.cond(some, bound, lambda: unused)

    def merged():
        sentences = {name: _where_sentences(constrained, bound[0][name], value)
                     for name, value in plain[0].items()}
        return sentences, tf.where(constrained[:, None], bound[1], plain[1])

    return tf.cond(every, lambda: bound, lambda: tf.cond(some, merged, lambda: plain))


def _where_sentences(chosen, value, otherwise):
    """`value` in the sentences `chosen` `(sentences,)`, `otherwise` elsewhere."""
    return tf.where(tf.reshape(chosen, [-1] + [1] * (value.shape.rank - 1)), value, otherwise)


def _settled(step, sentences, alpha):
    """Whether each sentence's best finished hypothesis is final: no alive
    hypothesis (of `step` tokens) can end with a higher score.

    A finished descendant of an alive hypothesis has at most its
    log-probability L <= 0 (every token adds a log-probability <= 0) and a
    length between `step + 1` and the sentence's limit, so its score is at
    most L over the largest length penalty of those lengths, and a later
    tie ranks after the hypothesis found first. The best of the K finished
    hypotheses the full search waits for is then the best found so far (an
    exact bound, unlike Hugging Face's `early_stopping=False`, which
    assumes the current length). With the paper's alpha the bound is loose
    (the penalty at the limit is about twice that at a typical output's
    length), but the alive hypotheses' log-probabilities fall fast once the
    best has ended: on Ding a sentence then stops a few steps before its
    K-th finished hypothesis.

    A sentence under constraints (`decoding.constraints`) is settled
    sooner: once no alive hypothesis would beat its best finished one if it
    ended at this step (Hugging Face's `early_stopping=False`), a heuristic,
    not a bound. The exact bound waits there for the alive hypotheses that
    have not yet written their terms: they may not end until they do, so
    their log-probabilities stay those of a translation without the terms,
    above the best finished one's, which paid for its terms. On the 148
    held-out Ding sentences of `benchmarks/terminology.py`, each with its
    glossary term, the exact bound took 2,273 steps, this one 1,644 (the
    same sentences unconstrained: 1,841), and every translation was the
    same.
    """
    now, at_limit = length_penalty(step + 1, alpha), length_penalty(sentences["limit"], alpha)
    # (Sorted, the best first, but under constraints, banked.)
    best_alive = tf.reduce_max(sentences["alive_log_probs"], axis=1)
    best = sentences["finished_scores"][:, 0]
    settled = best >= best_alive / tf.maximum(now, at_limit)
    if "constrained" in sentences:
        settled |= sentences["constrained"] & (best >= best_alive / now)
    return settled


def free_shapes(loop_vars):
    """Shape invariants that leave every dimension free but the head size of
    the caches: the batch and beam (so that `beam_size` may be a tensor fed
    at run time), and the length of the growing caches."""

    def relax(value):
        shape = tf.TensorShape(tf.convert_to_tensor(value).shape)
        if shape.rank == 4:  # a cache: (rows, heads, length, head_dim)
            return tf.TensorShape([None, None, None, shape[3]])
        return tf.TensorShape([None] * shape.rank)

    return tf.nest.map_structure(relax, loop_vars)


def top_k(values, k, block=64):
    """`tf.math.top_k(values, k)` over the last axis of `(rows, n)`, the
    same values and indices, ties included (the lower index first).

    Written here because TensorFlow's top-k kernel is slow for a small k
    over a large n: for k = 8 it took several times as long as this over
    512 rows of 8,000 log-probabilities or 64 rows of 37,000 (blocks of 64
    were the fastest of 32 to 512 for both). The k largest values lie in
    the k blocks of `block` values with the largest maxima (a value in any
    other block has k block maxima at least as large, at lower indices when
    equal), so only those blocks, kept in index order, are ranked.
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
    """`tokens[..., position] = values` as a select (fixed shapes, no
    scatter); `position` a scalar, or one for each row of `tokens`'s first
    axis."""
    position = tf.convert_to_tensor(position)
    if position.shape.rank == 1:
        position = tf.reshape(position, [-1] + [1] * (tokens.shape.rank - 1))
    columns = tf.range(tf.shape(tokens)[-1]) == position
    return tf.where(columns, tf.cast(values, tokens.dtype)[..., None], tokens)
