"""Continuous batching: a greedy or beam search that sentences join and
leave between steps, for whole files and for a server's stream of requests.

`search.beam_search` runs one batch to its end: its finished sentences leave
(`drop_finished`), and the batch shrinks, so that its last steps run a few
rows at nearly a full batch's cost (a CPU's decoding step mostly reads
weights), and a sentence that arrives meanwhile waits for the next batch.
A `SlotSearch` instead holds up to `slots` sentences; whenever one ends, the
next waiting sentence takes its place at the next step. LLM servers do this
(Orca's iteration-level scheduling, vLLM); of the open-source translation
engines we know, none does it for an encoder-decoder model with beam search
(CTranslate2 and Marian drop finished sentences but admit none).

How the sentences of a running search are kept apart:
- Each sentence has its own position, its `start`: the column of the
  self-attention caches where its first token's keys and values lie. All
  rows append at the same column each step (the caches grow as in
  `Transformer.decode_step_growing`), a sentence that joins starts at the
  caches' current width, and its rows attend only to the columns from its
  start on (an attention mask) with positional encodings counted from it.
  When the oldest sentences leave, the columns before every live start are
  cut off, so that the caches hold at most the longest live sentence's
  positions: memory is bounded by `slots` and the model's length, whatever
  the load.
- Its cross-attention keys and values are computed once, when it joins (the
  newcomers of a step encoded together), padded to the longest live source
  and masked beyond its own; they are cut back when the longest leaves.
  This needs no choice of buckets, and in a file, whose sentences join
  longest first, the live sources have about one length. Measured against
  buckets (2 x 16 slots kept full with Ding's sentences): padding to
  multiples of 16 positions gave 0.90-0.98x its sentences a second, and
  a fixed capacity of the model's length 0.79-0.90x.
- Each beam keeps its own tokens, finished hypotheses and scores, stepped
  by the same code as `search.beam_search` (`search.beam_step`), at its
  own position. Nothing of a step mixes sentences, so each sentence's
  translation is the one it gets searched alone, whatever joins or leaves
  around it (tested with sentences joining at random steps).

The steps run in one traced `tf.function` (`advance`), a `tf.while_loop`
in which each sentence leaves at the step it ends, and which returns once
some have ended and enough slots are free (`free`), or after `max_steps`;
joining (`join`) is another. Between them the caller, in Python, collects
the finished sentences and admits waiting ones. A server's search returns
less often: each sentence that ends is handed to a callback from inside the
loop (`on_ended`, a `tf.py_function` at the steps where some end), so that
its answer goes out at once, and the loop returns only when a `Wakeup`
(variables it reads at each step, set by another thread) says that waiting
sentences are due to join, or that some must be cancelled; the texts are
made in the loop too (`detokenize`), so that no TensorFlow call of the
answers waits behind the searches' steps. At full slots the
bookkeeping costs a few percent of a step; each return to Python costs
about 2 ms and each join an encoder call, which is why, on 2 cores, sorted
batches are still faster for whole files (docs/benchmarks.md, "Continuous
batching").

Sampling (back-translation) is not done here: its draws are made for a
batch (`search.Sampling`), and joining would change them.
"""

import copy
import itertools
import math
import time

import numpy as np
import tensorflow as tf

from keras_transformer.decoding.search import (
    TokenScores,
    beam_done,
    beam_step,
    free_shapes,
    greedy_step,
    initial_beams,
    initial_greedy,
    length_penalty,
    most_attended,
    output_limits,
)


class Wakeup:
    """When a running `SlotSearch.advance` should return to its caller,
    said from another thread: two clock times (`time.time()`'s seconds)
    in variables, which the search's loop reads at each step (no Python, so
    no lock, in the loop). It returns after a step once the clock reaches
    `admit` and a slot is free (sentences waiting to join), or once it
    reaches `recall` (sentences to cancel)."""

    def __init__(self):
        self.admit = tf.Variable(math.inf, dtype=tf.float64, trainable=False)
        self.recall = tf.Variable(math.inf, dtype=tf.float64, trainable=False)

    def admit_at(self, when):
        """Waiting sentences are due to join at `when` (`math.inf`: none wait)."""
        self.admit.assign(when)

    def recall_now(self):
        """Return at the next step, slots free or not."""
        self.recall.assign(time.time())

    def recalled(self):
        """Clears `recall_now` (the caller is back)."""
        self.recall.assign(math.inf)


# The callbacks of running `advance(on_ended=...)` calls, by a number the
# traced loop passes to `_report` (one trace serves every search and fork).
_CALLBACKS = {}
_NUMBERS = itertools.count()


def _report(number, ids, *results):
    """Hands the sentences that ended to the callback of `advance` number
    `number` (a `tf.py_function` in the loop)."""
    _CALLBACKS[int(number)](ids.numpy(), [result.numpy() for result in results])
    return tf.constant(0, tf.int32)


class SlotSearch:
    """A greedy or beam search of up to `slots` sentences at once, which
    sentences join and leave between steps (see the module docstring).

    Args:
        model: a `Transformer`.
        slots: the most sentences searched at once (beam search decodes
            `beam_size` rows for each).
        beam_size: 1 for greedy search (default: the model config's).
        alpha: the length penalty (default: the model config's).
        decode_margin: see `search.output_limits`.
        best_only: with beam search, end each sentence once its best is
            settled and give it alone (as `beam_search(best_only=True)`);
            False gives the `beam_size` best (n-best lists).
        alignment_layer: keep, for each token, the source position this
            decoder layer attended to most, as `search.beam_search` does
            (its `attended`); None: not.
        detokenize: a tokenizer's `detokenize` (ids `(n, length)` to
            strings): each sentence that ends also gives its texts, made in
            the search's graph (a server's answers then need no TensorFlow
            call of their own, which would wait behind the running
            searches' steps). None: tokens alone.
        output_weights: the output projection's matrix
            (`Transformer.output_weights()`) to share with other searches of
            the model; None: this search makes its own.

    Use `join` while `free` slots and waiting sentences remain, then
    `advance`, which returns the sentences that ended (or hands them to its
    `on_ended`); repeat until `live` is 0. A search is used by one thread
    at a time; `fork` gives another thread its own, traced once for both.
    """

    def __init__(self, model, slots, beam_size=None, alpha=None, decode_margin=None,
                 best_only=True, alignment_layer=None, detokenize=None, output_weights=None):
        if slots < 1:
            raise ValueError(f"slots must be >= 1; got {slots}.")
        config = model.config
        self.model = model
        self.slots = slots
        self.k = config.beam_size if beam_size is None else beam_size
        self.alpha = config.length_penalty if alpha is None else alpha
        self.decode_margin = decode_margin
        self.best_only = best_only
        self.alignment_layer = alignment_layer
        self.detokenize = detokenize
        # Every sentence's tokens are kept in rows of the longest output any
        # may have, so that newcomers' rows concatenate with the others'.
        self.length = config.max_length
        # Each live sentence's id in the graph, in the order of its rows,
        # and its key.
        self._order, self._keys, self._next_id = [], {}, 0
        self._state = self._empty = self._empty_state()
        self._never = Wakeup()  # of an `advance` told nothing
        # The output projection's matrix, transposed once (here, unless
        # given) rather than in every `advance` (a transpose of the embedding
        # took most of a call that ran no step): the weights are read when
        # the search is made.
        self._output_weights = (model.output_weights() if output_weights is None
                                else output_weights)
        specs = tf.nest.map_structure(
            lambda shape, value: tf.TensorSpec(shape, value.dtype),
            free_shapes(self._state), self._state)
        self._join = tf.function(self._join_graph, autograph=False, input_signature=[
            specs, tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])
        self._advance = tf.function(self._advance_graph, autograph=False, input_signature=[
            specs, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32),
            tf.TensorSpec(self._output_weights.shape, self._output_weights.dtype),
            tf.TensorSpec([], tf.resource), tf.TensorSpec([], tf.resource),
            tf.TensorSpec([], tf.int64)])
        self._remove = tf.function(lambda state, gone: self._without(*state, gone),
                                   autograph=False,
                                   input_signature=[specs, tf.TensorSpec([None], tf.bool)])

    def fork(self):
        """An empty search of the same model and settings, which shares this
        one's traced graphs (no second trace), for another thread."""
        fork = copy.copy(self)
        fork._order, fork._keys, fork._next_id, fork._state = [], {}, 0, self._empty
        return fork

    @property
    def keys(self):
        """The keys of the sentences being searched, in the order they joined."""
        return [self._keys[i] for i in self._order]

    @property
    def live(self):
        """The sentences being searched."""
        return len(self._order)

    @property
    def free(self):
        """The sentences that may join now."""
        return self.slots - len(self._order)

    def join(self, source_ids, keys):
        """Admits sentences, which start at the next step.

        Args:
            source_ids: int32 `(n, length)`, as `search.beam_search` takes
                them (padded, each ending with the end token), n at most
                `free`.
            keys: one value for each, which `advance` gives back with its
                result.
        """
        keys = list(keys)
        if len(keys) != len(source_ids):
            raise ValueError(f"{len(keys)} keys for {len(source_ids)} sentences.")
        if len(keys) > self.free:
            raise ValueError(f"{len(keys)} sentences join a search with {self.free} free slots.")
        if keys:
            ids = np.arange(self._next_id, self._next_id + len(keys), dtype=np.int32)
            self._next_id += len(keys)
            self._state = self._join(self._state, tf.constant(source_ids, tf.int32),
                                     tf.constant(ids))
            self._order += ids.tolist()
            self._keys.update(zip(ids.tolist(), keys))

    def advance(self, max_steps=2**30, free=1, on_ended=None, wakeup=None):
        """Runs steps until some sentence has ended and at least `free` slots
        are free (or none is live), or `max_steps`; each sentence leaves at
        the step it ends. (A file's search admits sentences in groups, a
        server's as soon as one ends.)

        With `on_ended`, each sentence that ends is handed to it, from
        inside the loop, at its step (a list of the tuples below, on one of
        TensorFlow's threads while this call waits), and the loop goes on
        until no sentence is live, `max_steps`, or `wakeup` (a `Wakeup`)
        says to return. `on_ended` must not call TensorFlow: the search
        holds TensorFlow's threads, and such a call can wait for them
        forever (a server hands the sentences to a thread of its own).

        Returns:
            A list of `(key, tokens, scores, log_probs)` for each sentence
            that ended (and was not handed to `on_ended`), NumPy arrays as
            one row of `search.SearchResult`: tokens `(n_best, length)`
            (n_best 1 unless `best_only=False`), scores and log-probabilities
            `(n_best,)`; then with `alignment_layer`, `attended` `(n_best,
            length)`, and with `detokenize`, the texts `(n_best,)` (bytes).
        """
        if not self._order:
            return []
        wakeup = wakeup or self._never
        number = -1
        if on_ended is not None:
            number = next(_NUMBERS)
            _CALLBACKS[number] = lambda ids, results: on_ended(self._ended(ids, results))
        try:
            self._state, ids, *results = self._advance(
                self._state, tf.constant(max_steps, tf.int32), tf.constant(free, tf.int32),
                self._output_weights, wakeup.admit.handle, wakeup.recall.handle,
                tf.constant(number, tf.int64))
        finally:
            _CALLBACKS.pop(number, None)
        return self._ended(ids.numpy(), [result.numpy() for result in results])

    def _ended(self, ids, results):
        """`advance`'s tuples of the sentences `ids` that ended, their
        slots given up."""
        ids = ids.tolist()
        gone = set(ids)
        self._order = [i for i in self._order if i not in gone]
        return list(zip([self._keys.pop(i) for i in ids], *results))

    def cancel(self, keys):
        """Takes the sentences of `keys` out before they end (a client that
        went away): their slots are free for the next `join`."""
        keys = set(keys)
        gone = [self._keys[i] in keys for i in self._order]
        if any(gone):
            self._state = self._remove(self._state, tf.constant(gone))
            for i, flag in zip(self._order, gone):
                if flag:
                    del self._keys[i]
            self._order = [i for i, flag in zip(self._order, gone) if not flag]

    # ------------------------------------------------------------ the graphs

    def _empty_state(self):
        """The state of no sentence: `(sentences, cache)` with no rows, and
        caches of no column."""
        config = self.model.config
        # A cache of one sentence, its rows taken away: the model's own
        # shapes and dtypes (the projection of an empty batch is not empty).
        one = tf.fill([1, 1], config.eos_id)
        return (self._initial_sentences(one[:0], width=0, ids=tf.zeros([0], tf.int32)),
                tf.nest.map_structure(lambda tensor: tensor[:0], self._cache(one)))

    def _cache(self, source_ids):
        """The model's decoding cache of newcomers `source_ids` (with
        `alignment_layer`, also where their end tokens are)."""
        cache = self.model.initial_cache(self.model.encode(source_ids, training=False),
                                         source_ids, None, self.k)
        if self.alignment_layer is not None:
            cache["source_ends"] = tf.equal(source_ids, self.model.config.eos_id)
        return cache

    def _initial_sentences(self, source_ids, width, ids):
        """The per-sentence state of newcomers `source_ids`, known by `ids`,
        joining caches of `width` columns."""
        n = tf.shape(source_ids)[0]
        limits = output_limits(source_ids, self.model, self.decode_margin, self.length)
        config = self.model.config
        sentences = (initial_greedy(n, self.length, config) if self.k == 1 else
                     initial_beams(n, self.k, self.length, config))
        if self.alignment_layer is not None:  # each hypothesis's attended positions
            sentences |= ({"attended": tf.zeros_like(sentences["tokens"])} if self.k == 1 else
                          {"alive_attended": tf.zeros_like(sentences["alive"]),
                           "finished_attended": tf.zeros_like(sentences["finished"])})
        return sentences | {"limit": limits, "position": tf.zeros([n], tf.int32),
                            "start": tf.fill([n], width), "id": ids}

    def _join_graph(self, state, source_ids, ids):
        sentences, cache = state
        width = tf.shape(cache["self_keys"][0])[2]
        new = self._cache(source_ids)
        # The sources padded to the longest of the old and the new ones.
        old_length, new_length = tf.shape(cache["source_padding"])[1], tf.shape(source_ids)[1]
        longest = tf.maximum(old_length, new_length)

        def pad(tensor, by, axis):
            padding = [[0, 0]] * tensor.shape.rank
            padding[axis] = [0, by]
            return tf.pad(tensor, padding)

        def joined(old, new_one, axis, old_pad, new_pad):
            return tf.concat([pad(old, old_pad, axis), pad(new_one, new_pad, axis)], axis=0)

        def self_rows(old, new_one):  # the newcomers' caches: empty columns so far
            shape = tf.concat([tf.shape(new_one)[:2], [width], tf.shape(new_one)[3:]], 0)
            return tf.concat([old, tf.zeros(shape, old.dtype)], axis=0)

        grow_old, grow_new = longest - old_length, longest - new_length
        cache = {
            **{name: joined(cache[name], new[name], 1, grow_old, grow_new)
               for name in ("source_padding", "source_ends") if name in cache},
            "cross_keys": [joined(old, new_one, 2, grow_old, grow_new)
                           for old, new_one in zip(cache["cross_keys"], new["cross_keys"])],
            "cross_values": [joined(old, new_one, 2, grow_old, grow_new)
                             for old, new_one in zip(cache["cross_values"], new["cross_values"])],
            "self_keys": [self_rows(old, new_one)
                          for old, new_one in zip(cache["self_keys"], new["self_keys"])],
            "self_values": [self_rows(old, new_one)
                            for old, new_one in zip(cache["self_values"], new["self_values"])],
        }
        newcomers = self._initial_sentences(source_ids, width, ids)
        sentences = {name: tf.concat([value, newcomers[name]], axis=0)
                     for name, value in sentences.items()}
        return sentences, cache

    def _done(self, sentences):
        if self.k == 1:
            return sentences["finished"] | (sentences["position"] >= sentences["limit"])
        return beam_done(sentences["position"], sentences, self.k, self.alpha, self.best_only)

    def _step(self, scores, sentences, cache):
        """One step of every live sentence (`scores`: the `TokenScores`)."""
        k, s = self.k, sentences
        live = tf.shape(s["position"])[0]
        position = s["position"]
        rows = tf.repeat(position, k)
        tokens = s["tokens"] if k == 1 else tf.reshape(s["alive"], [live * k, -1])
        step_ids = tf.gather(tokens, rows, batch_dims=1)[:, None]
        outputs = self.model.decode_step_growing(step_ids, cache, scores.output_weights,
                                                 self.alignment_layer,
                                                 starts=tf.repeat(s["start"], k))
        logits, cache = outputs[:2]
        attended = (None if self.alignment_layer is None else
                    most_attended(outputs[2], cache["source_ends"] | ~cache["source_padding"]))
        log_probs = scores.log_probs(logits, at_limit=tf.repeat(
            position + 1 >= s["limit"], k))
        if k == 1:
            s = greedy_step(s, log_probs, position, self.model.config, attended=attended)
        else:
            s, parents = beam_step(s, log_probs, position, k, k, self.alpha, self.model.config,
                                   attended)
            reorder = lambda tensors: [tf.gather(t, tf.reshape(parents, [-1]))  # noqa: E731
                                       for t in tensors]
            cache = cache | {"self_keys": reorder(cache["self_keys"]),
                             "self_values": reorder(cache["self_values"])}
        return s | {"position": position + 1}, cache

    def _results(self, sentences):
        """`(tokens, scores, log_probs)` of every sentence, as its search
        would end now (with `alignment_layer`, and `attended`)."""
        aligned = self.alignment_layer is not None
        if self.k == 1:
            tokens = sentences["tokens"][:, 1:]
            lengths = tf.reduce_sum(tf.cast(tokens != self.model.config.pad_id, tf.int32), axis=1)
            scores = sentences["log_prob"] / length_penalty(lengths, self.alpha)
            results = (tokens[:, None], scores[:, None], sentences["log_prob"][:, None])
            return results + ((sentences["attended"][:, None, 1:],) if aligned else ())
        n_best = 1 if self.best_only else self.k
        results = (sentences["finished"][:, :n_best, 1:],
                   sentences["finished_scores"][:, :n_best],
                   sentences["finished_log_probs"][:, :n_best])
        return results + ((sentences["finished_attended"][:, :n_best, 1:],) if aligned else ())

    def _gone(self, sentences, rows):
        """The ids and `_results` of the sentences at `rows` (with
        `detokenize`, and their texts)."""
        found = tuple(tf.gather(result, rows)
                      for result in (sentences["id"],) + self._results(sentences))
        if self.detokenize is None:
            return found
        tokens = found[1]
        texts = self.detokenize(tf.reshape(tokens, [-1, tf.shape(tokens)[2]]))
        return found + (tf.reshape(texts, tf.shape(tokens)[:2]),)

    def _advance_graph(self, state, max_steps, free, output_weights, admit, recall, number):
        scores = TokenScores(self.model, output_weights)
        sentences, cache = state
        # The results of the sentences that ended, their ids first (unless
        # reported: `number` >= 0).
        ended = self._gone(sentences, tf.zeros([0], tf.int64))
        report = number >= 0

        def running(count, sentences, cache, ended):
            live = tf.shape(sentences["id"])[0]
            enough = (tf.shape(ended[0])[0] > 0) & (self.slots - live >= free)
            now = tf.timestamp()
            woken = (count > 0) & (
                (now >= tf.raw_ops.ReadVariableOp(resource=recall, dtype=tf.float64))
                | ((now >= tf.raw_ops.ReadVariableOp(resource=admit, dtype=tf.float64))
                   & (live < self.slots)))
            return (count < max_steps) & (live > 0) & ~enough & ~woken

        def body(count, sentences, cache, ended):
            sentences, cache = self._step(scores, sentences, cache)
            done = self._done(sentences)

            def leave():
                results = self._gone(sentences, tf.where(done)[:, 0])

                def reported():
                    call = tf.py_function(_report, [number, *results], tf.int32)
                    with tf.control_dependencies([call]):
                        return tuple(tf.identity(old) for old in ended)

                kept = tf.cond(report, reported, lambda: tuple(
                    tf.concat([old, new], 0) for old, new in zip(ended, results)))
                return (*self._without(sentences, cache, done), kept)

            return (count + 1, *tf.cond(tf.reduce_any(done), leave,
                                        lambda: (sentences, cache, ended)))

        loop_vars = (tf.constant(0), sentences, cache, ended)
        _, sentences, cache, ended = tf.while_loop(running, body, loop_vars,
                                                   shape_invariants=free_shapes(loop_vars))
        return ((sentences, cache), *ended)

    def _without(self, sentences, cache, done):
        """The state without the `done` sentences, its caches cut to the
        columns and source positions the others read."""
        kept = tf.cast(tf.where(~done)[:, 0], tf.int32)
        rows = tf.reshape(kept[:, None] * self.k + tf.range(self.k)[None], [-1])
        sentences = {name: tf.gather(value, kept) for name, value in sentences.items()}
        sources = {name: tf.gather(cache[name], kept)
                   for name in ("source_padding", "source_ends") if name in cache}
        width = tf.shape(cache["self_keys"][0])[2]
        first = tf.reduce_min(tf.concat([sentences["start"], [width]], 0))
        longest = tf.reduce_max(tf.concat(
            [tf.reduce_sum(tf.cast(sources["source_padding"], tf.int32), 1), [0]], 0))
        cache = {
            **{name: value[:, :longest] for name, value in sources.items()},
            "cross_keys": [tf.gather(t, kept)[:, :, :longest] for t in cache["cross_keys"]],
            "cross_values": [tf.gather(t, kept)[:, :, :longest] for t in cache["cross_values"]],
            "self_keys": [tf.gather(t, rows)[:, :, first:] for t in cache["self_keys"]],
            "self_values": [tf.gather(t, rows)[:, :, first:] for t in cache["self_values"]],
        }
        return sentences | {"start": sentences["start"] - first}, cache


def search_all(search, source_ids, order=None, max_steps=2**30):
    """Every sentence of `source_ids` (a list of int32 arrays, each ending with
    the end token) searched by `search` (a `SlotSearch`), sentences joining
    as slots free up, in `order` (default: as given).

    Returns:
        A list with `(tokens, scores, log_probs)` for each sentence, in the
        input's order (see `SlotSearch.advance`).
    """
    order = list(range(len(source_ids))) if order is None else list(order)
    results = [None] * len(source_ids)
    waiting = 0
    while waiting < len(order) or search.live:
        newcomers = order[waiting:waiting + search.free]
        waiting += len(newcomers)
        if newcomers:
            search.join(pad_sources([source_ids[i] for i in newcomers],
                                    search.model.config.pad_id), newcomers)
        left = len(order) - waiting
        for key, *result in search.advance(max_steps, free=min(left, search.slots) or search.slots):
            results[key] = tuple(result)
    return results


def pad_sources(sources, pad_id):
    """Sources of different lengths as one int32 `(n, longest)` array."""
    longest = max((len(source) for source in sources), default=0)
    padded = np.full((len(sources), longest), pad_id, np.int32)
    for row, source in enumerate(sources):
        padded[row, :len(source)] = source
    return padded
