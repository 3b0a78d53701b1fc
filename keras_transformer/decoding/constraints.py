"""Lexically constrained beam search: target phrases each translation must
hold, at least once each, in any order, wherever the model puts them (a
glossary's terms, `keras_transformer.glossary`). `search.beam_search`
takes them through its `constraints` argument.

A sentence's constraints are phrases of target tokens, each phrase an
alternative of one constraint (a term's inflected forms, its capitalised
form for the sentence's start): any alternative met meets its constraint.
Dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained
Decoding with Dynamic Beam Allocation"), vectorized over the batch inside
the traced search as Hu et al. 2019 do (fairseq's `--constraints`):

- At each step a sentence's candidates are the 2K best extensions of its
  beams (those unconstrained search ranks), each beam's best token, and
  each beam's next token of every constraint it has not met (the next
  token of an alternative it is inside, or the first of one): so that a
  constraint can always be started or carried on.
- Each candidate's progress on each alternative is a state of that
  phrase's Knuth-Morris-Pratt automaton (`transitions`: the longest prefix
  of the phrase the hypothesis ends with), so partial matches that fail
  fall back correctly. An alternative whose whole phrase has been written
  meets its constraint for good once the word it ends is ended too: the
  next token starts a word, or is punctuation or the end (`word_starts`;
  "insult" followed by "ure" writes "insulture", no insult).
- The candidates are banked by the constraint tokens they have met (a met
  constraint counts its longest alternative's length, an unmet one its
  best progress) and the K kept are taken from the banks in turn, the
  fullest bank first, each bank's best first (fairseq's round-robin over
  banks): hypotheses that placed constraints survive beside those that
  have not yet, whatever the number of banks.
- A hypothesis may end only once all its constraints are met, except at
  the sentence's output limit, where every hypothesis must end: the best
  then is returned as it is, and `SearchResult.met` says which of its
  phrases it holds, so that the caller can name the unmet terms.
- With `best_only`, a sentence's search ends once no alive hypothesis
  would beat its best finished one if it ended at this step, sooner than
  an unconstrained sentence's exact bound (`search._settled` says why).

A sentence without constraints is searched exactly as without this module
(the caller selects its unconstrained step's result for it), and a batch
without any is searched without this module at all.

`Constraints` holds a batch's phrases as tensors; `Constraints.of` builds
them from lists of token ids.
"""

import dataclasses

import numpy as np
import tensorflow as tf

MAX_PHRASE_TOKENS = 16
"""The longest phrase (in target tokens) a constraint may have."""

_NEG_INF = -1e9
_UNMET = -1e6
"""Added to an unmet hypothesis's score to rank it (only): after every met one."""


@dataclasses.dataclass(frozen=True)
class Constraints:
    """A batch's constraints.

    Attributes:
        phrases: int32 `(batch, phrases, MAX_PHRASE_TOKENS)`: each
            alternative's target token ids, left-aligned, padded with -1.
        owner: int32 `(batch, phrases)`: the constraint (0, 1, ...) each
            phrase is an alternative of; -1 for a padding row. A sentence
            whose phrases are all padding has no constraint.
        word_starts: bool `(target vocabulary,)`: the tokens after which a
            phrase's last word has ended (`word_starts`); None: every token.
    """

    phrases: tf.Tensor
    owner: tf.Tensor
    word_starts: tf.Tensor = None

    @classmethod
    def of(cls, sentences, word_starts=None):
        """The constraints of `sentences`, for each a list of constraints,
        each a list of alternatives, each a list of target token ids (a
        sentence may have none: `[]`). Raises a ValueError for an empty
        alternative or one over `MAX_PHRASE_TOKENS` tokens."""
        rows = max([sum(len(alternatives) for alternatives in constraints)
                    for constraints in sentences] + [1])
        phrases = np.full((len(sentences), rows, MAX_PHRASE_TOKENS), -1, np.int32)
        owner = np.full((len(sentences), rows), -1, np.int32)
        for index, constraints in enumerate(sentences):
            row = 0
            for number, alternatives in enumerate(constraints):
                for ids in alternatives:
                    if not 0 < len(ids) <= MAX_PHRASE_TOKENS:
                        raise ValueError(f"A constraint's phrase must have 1 to "
                                         f"{MAX_PHRASE_TOKENS} tokens; got {len(ids)}.")
                    phrases[index, row, :len(ids)] = ids
                    owner[index, row] = number
                    row += 1
        return cls(tf.constant(phrases), tf.constant(owner), word_starts)


def word_starts(pieces, eos_id):
    """Which tokens of a target vocabulary (`pieces`, its strings in id
    order) may follow a word that ends there: for SentencePiece's pieces
    (a word's first marked with "▁"), those that start a word, and those
    without a letter or digit (punctuation); the end token too. Elsewhere
    (BPE that marks a word's continuation on the piece before, FSMT's "@@"):
    None, every token."""
    if not any(piece.startswith("\u2581") for piece in pieces):
        return None
    starts = np.array([piece.startswith("\u2581") or not any(c.isalnum() for c in piece)
                       for piece in pieces])
    starts[eos_id] = True
    return tf.constant(starts)


def of_text(tokenizer, phrases, owner, starts=None):
    """The `Constraints` of target phrases given as text, in the graph (a
    SavedModel's signature): `phrases` string `(batch, phrases)` ("" for
    none), `owner` int32 of the same shape (the constraint each phrase is
    an alternative of; ignored where the phrase is ""); `starts`: see
    `Constraints.word_starts`. A phrase of more than `MAX_PHRASE_TOKENS`
    target tokens fails the call."""
    shape = tf.shape(phrases)
    ids = tokenizer.tokenize_target(tf.reshape(phrases, [-1]))
    checked = tf.debugging.assert_less_equal(
        ids.row_lengths(), tf.cast(MAX_PHRASE_TOKENS, ids.row_lengths().dtype),
        message=f"a constraint's phrase is over {MAX_PHRASE_TOKENS} target tokens")
    with tf.control_dependencies([checked]):
        dense = ids.to_tensor(default_value=-1, shape=[None, MAX_PHRASE_TOKENS])
    dense = tf.reshape(tf.cast(dense, tf.int32), tf.concat([shape, [MAX_PHRASE_TOKENS]], 0))
    return Constraints(dense, tf.where(tf.reduce_any(dense >= 0, axis=-1), owner, -1), starts)


def transitions(phrases):
    """Each phrase's Knuth-Morris-Pratt automaton as a table: int32
    `(..., MAX_PHRASE_TOKENS + 1, MAX_PHRASE_TOKENS)` whose entry `[p, q]`
    is the progress (the length of the longest prefix of the phrase that
    the text ends with) after a text at progress p is followed by the
    phrase's token q. A token that is none of the phrase's resets the
    progress to 0 (the caller's: no entry of the table)."""
    n = MAX_PHRASE_TOKENS
    # border[p, r]: the prefix of r tokens is a suffix of the prefix of p.
    p, r, i = np.meshgrid(np.arange(n + 1), np.arange(n + 1), np.arange(n), indexing="ij")
    later = tf.gather(phrases, np.clip(p - r + i, 0, n - 1).reshape(-1), axis=-1)
    shape = tf.concat([tf.shape(phrases)[:-1], p.shape], 0)
    agree = (tf.reshape(later, shape) == phrases[..., None, None, :]) | (i >= r)
    border = tf.reduce_all(agree, axis=-1) & (r[..., 0] <= p[..., 0])  # (..., p, r)
    # From progress p, token q extends each border r whose next token is q's.
    padded = tf.concat([phrases, -tf.ones_like(phrases[..., :1])], axis=-1)  # token r, r <= n
    extends = (border[..., :, None, :]
               & tf.equal(padded[..., None, None, :], phrases[..., None, :, None])
               & (padded[..., None, None, :] >= 0))  # (..., p, q, r)
    lengths = np.arange(1, n + 2, dtype=np.int32)[None, None, :]
    return tf.reduce_max(tf.where(extends, lengths, 0), axis=-1)


def initial_state(sentences, k):
    """The entries constrained search adds to beam search's sentences
    (`search.initial_beams`): for each alive hypothesis its progress on each
    phrase and which phrases it has written, whether each finished one
    holds its constraints; and each sentence's constants: its phrases'
    lengths and automata, which phrases are alternatives of one constraint
    (`same`), the longest alternative of each phrase's constraint, and the
    first phrase of each constraint (`first`, what counts it in a bank)."""
    phrases, owner = sentences["phrases"], sentences["owner"]
    batch, rows = tf.shape(phrases)[0], tf.shape(phrases)[1]
    lengths = tf.reduce_sum(tf.cast(phrases >= 0, tf.int32), axis=-1)
    same = (owner[:, :, None] == owner[:, None, :]) & (owner[:, None, :] >= 0)
    index = tf.range(rows)
    first = tf.reduce_all(~same | (index[None, None, :] <= index[None, :, None]), axis=1)
    return {"alive_progress": tf.zeros([batch, k, rows], tf.int32),
            "alive_seen": tf.zeros([batch, k, rows], tf.bool),
            "finished_met": tf.zeros([batch, k], tf.bool),
            "phrase_lengths": lengths, "automata": transitions(phrases), "same": same,
            "longest": tf.reduce_max(tf.where(same, lengths[:, None, :], 0), axis=-1),
            "first": first & (owner >= 0),
            "constrained": tf.reduce_any(owner >= 0, axis=1)}


def met(seen, same, owner):
    """Whether each phrase's constraint is met `(batch, hypotheses,
    phrases)`: any of its alternatives written (`seen`, of the same shape;
    `same`: see `initial_state`); padding rows count as met."""
    return tf.reduce_any(seen[:, :, None, :] & same[:, None], axis=-1) | (owner < 0)[:, None]


def _tokens_met(progress, seen, s):
    """The bank of each hypothesis `(batch, hypotheses)`: over its
    constraints, the longest alternative's length where met, else its best
    progress."""
    value = tf.where(met(seen, s["same"], s["owner"]), s["longest"][:, None], progress)
    best = tf.reduce_max(tf.where(s["same"][:, None], value[:, :, None, :], 0), axis=-1)
    return tf.reduce_sum(tf.where(s["first"][:, None], best, 0), axis=-1)


def _order(key, scores, valid):
    """Each candidate's place in the order of `key` (lower first), then
    score (higher first), then index; invalid candidates after all."""
    index = tf.range(tf.shape(key)[1])
    before = ((key[:, None, :] < key[:, :, None])
              | ((key[:, None, :] == key[:, :, None])
                 & ((scores[:, None, :] > scores[:, :, None])
                    | ((scores[:, None, :] == scores[:, :, None])
                       & (index[None, None, :] < index[None, :, None])))))
    before &= valid[:, None, :]
    place = tf.reduce_sum(tf.cast(before, tf.int32), axis=-1)
    return tf.where(valid, place, tf.shape(key)[1] + index[None])


def constrained_step(s, log_probs, step, k, copies, alpha, config, extensions, length_penalty,
                     write, starts=None, attended=None):
    """Beam search's step (`search.beam_step`) under constraints: the same
    arguments and returns, with `s` holding the entries of `initial_state`
    and each sentence's `phrases` and `owner`; `extensions` is beam
    search's top-2K `(log_probs, beams, tokens)` of this step and each
    decoded row's best token (`search.top_extensions`);
    `length_penalty` and `write` are `search`'s; `starts`:
    `Constraints.word_starts`."""
    live = tf.shape(s["alive"])[0]
    phrases, owner, lengths = s["phrases"], s["owner"], s["phrase_lengths"]
    rows = tf.shape(phrases)[1]
    alive_met = met(s["alive_seen"], s["same"], owner)
    # The candidates: (beam, token) pairs.
    top_log_probs, top_beams, top_tokens, best_tokens = extensions
    next_tokens = tf.gather(
        tf.broadcast_to(phrases[:, None], [live, copies, rows, MAX_PHRASE_TOKENS]),
        tf.minimum(s["alive_progress"][:, :copies], MAX_PHRASE_TOKENS - 1)[..., None],
        batch_dims=3)[..., 0]
    wanted = (~alive_met[:, :copies]) & (owner[:, None] >= 0) & (next_tokens >= 0)
    beam_ids = tf.range(copies)[None, :]
    beams = tf.concat([top_beams, tf.tile(beam_ids, [live, 1]),
                       tf.reshape(tf.tile(beam_ids[:, :, None], [live, 1, rows]), [live, -1])], 1)
    tokens = tf.concat([top_tokens, best_tokens,
                        tf.reshape(tf.where(wanted, next_tokens, 0), [live, -1])], 1)
    offered = tf.concat([tf.ones_like(top_tokens, tf.bool), tf.ones_like(best_tokens, tf.bool),
                         tf.reshape(wanted, [live, -1])], 1)
    token_log_probs = tf.gather_nd(
        tf.reshape(log_probs, [live, copies, -1]), tf.stack([beams, tokens], -1), batch_dims=1)
    scores = tf.gather(s["alive_log_probs"], beams, batch_dims=1) + token_log_probs
    count = tf.shape(tokens)[1]
    index = tf.range(count)
    repeated = tf.reduce_any((beams[:, None, :] == beams[:, :, None])
                             & (tokens[:, None, :] == tokens[:, :, None])
                             & offered[:, None, :] & (index[None, None, :] < index[None, :, None]),
                             axis=-1)
    valid = offered & ~repeated & (scores > _NEG_INF / 2)

    # Each candidate's progress and phrases written, from its beam's.
    parent_progress = tf.gather(s["alive_progress"], beams, batch_dims=1)  # (live, M, rows)
    table = tf.gather(s["automata"], tf.transpose(parent_progress, [0, 2, 1]), axis=2,
                      batch_dims=2)  # (live, rows, M, q)
    is_token = tf.equal(phrases[:, :, None, :], tokens[:, None, :, None])
    progress = tf.transpose(tf.reduce_max(tf.where(is_token, table, 0), axis=-1), [0, 2, 1])
    # A phrase written whole at the parent is met by a token that ends its word.
    ended = (parent_progress == lengths[:, None]) & (owner[:, None] >= 0)
    if starts is not None:
        ended &= tf.gather(starts, tokens)[..., None]
    seen = tf.gather(s["alive_seen"], beams, batch_dims=1) | ended
    all_met = tf.reduce_all(met(seen, s["same"], owner), axis=-1)
    sequences = write(tf.gather(s["alive"], beams, batch_dims=1), step + 1, tokens)
    is_end = tf.equal(tokens, config.eos_id)
    at_limit = tf.expand_dims(step + 1 >= s["limit"], -1)
    done = s["finished_count"] >= k

    # Finished: ends whose constraints are met (at the limit, every end),
    # those that hold their constraints ranked before those that do not.
    penalty = length_penalty(step + 1, alpha)
    penalty = penalty[:, None] if penalty.shape.rank == 1 else penalty
    eligible = is_end & valid & (all_met | at_limit) & ~done[:, None]
    merged_scores = tf.concat([s["finished_scores"],
                               tf.where(eligible, scores / penalty, _NEG_INF)], 1)
    merged_met = tf.concat([s["finished_met"], all_met], 1)
    finished_keep = tf.math.top_k(
        tf.where(merged_met | (merged_scores <= _NEG_INF / 2), merged_scores,
                 merged_scores + _UNMET), k=k).indices
    keep_finished = lambda old, new: tf.gather(tf.concat([old, new], 1), finished_keep,  # noqa: E731
                                               batch_dims=1)
    finished_scores = tf.gather(merged_scores, finished_keep, batch_dims=1)

    # Alive: the K taken from the banks in turn.
    alive_valid = valid & ~is_end
    bank = _tokens_met(progress, seen, s)
    rank = _order(-bank, scores, alive_valid)  # within its bank: same key, by score
    same_bank = bank[:, None, :] == bank[:, :, None]
    stripe = tf.reduce_sum(tf.cast(same_bank & (rank[:, None, :] < rank[:, :, None])
                                   & alive_valid[:, None, :], tf.int32), axis=-1)
    keep = tf.math.top_k(-_order(stripe * (MAX_PHRASE_TOKENS * 64) - bank, scores, alive_valid),
                         k=k).indices
    kept_valid = tf.gather(alive_valid, keep, batch_dims=1)
    s = s | {
        "alive": tf.gather(sequences, keep, batch_dims=1),
        "alive_log_probs": tf.where(kept_valid, tf.gather(scores, keep, batch_dims=1), _NEG_INF),
        "alive_progress": tf.gather(progress, keep, batch_dims=1),
        "alive_seen": tf.gather(seen, keep, batch_dims=1),
        "finished": keep_finished(s["finished"], sequences),
        "finished_scores": finished_scores,
        "finished_log_probs": keep_finished(s["finished_log_probs"],
                                            tf.where(eligible, scores, _NEG_INF)),
        "finished_met": keep_finished(s["finished_met"], all_met),
        "finished_count": s["finished_count"] + tf.reduce_sum(tf.cast(eligible, tf.int32),
                                                              axis=1),
    }
    if attended is not None:
        candidate_attended = write(
            tf.gather(s["alive_attended"], beams, batch_dims=1), step + 1,
            tf.gather(tf.reshape(attended, [live, copies]), beams, batch_dims=1))
        s = s | {"alive_attended": tf.gather(candidate_attended, keep, batch_dims=1),
                 "finished_attended": keep_finished(s["finished_attended"], candidate_attended)}
    return s, tf.gather(beams, keep, batch_dims=1) + tf.range(live)[:, None] * copies
