"""Greedy and beam search over the exported ONNX graphs with onnxruntime and
NumPy, and text in / text out with the `sentencepiece` package (or an
imported Marian or FSMT model's plain-Python tokenizer): translation without
TensorFlow.

The search is the same as `keras_transformer.decoding.beam_search` (same
rules, same tie-breaking: the lower index first), written again in NumPy
because this runner must not need TensorFlow; the tests check that both give
the same tokens. Greedy search is the beam search with one beam.

Usage:
    translator = OnnxTranslator("exported/onnx")
    translator.translate(["Guten Morgen!"])
"""

import os
import types
import warnings

import numpy as np
import onnxruntime

from keras_transformer import onnx_step, run_folder, special_ids
from keras_transformer.runtimes.runtime import Runtime
from keras_transformer.textfiles import clean_text, read_json, truncation_warning
from keras_transformer.vocabularies.sentencepiece_text import SentencePieceText

_NEG_INF = np.float32(-1e9)
CONFIG_FILE = "config.json"


def length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha, in float32 as in TF."""
    return np.power(np.float32((5.0 + length) / 6.0), np.float32(alpha))


def _top(values, k):
    """Indices of the k largest values per row, ties to the lower index (as
    `tf.math.top_k`)."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]


def _run(session, feeds):
    """A session's outputs by name."""
    return dict(zip([value.name for value in session.get_outputs()], session.run(None, feeds)))


class OnnxSearch:
    """Searches with `encoder.onnx` and `decoder_step.onnx` from `directory`
    (written by `keras_transformer.export`, with its `config.json`), with
    onnxruntime's default session options, or `options` (an
    `onnxruntime.SessionOptions`)."""

    def __init__(self, directory, threads=None, options=None):
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"{directory} is not a folder; give the onnx/ folder of an "
                                    "export (keras-transformer export).")
        self.config = read_json(os.path.join(directory, CONFIG_FILE))
        options = options or onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.encoder, self.decoder_step = (
            onnx_step.load_session(os.path.join(directory, name), options)
            for name in ("encoder.onnx", "decoder_step.onnx"))
        if [value.name for value in self.encoder.get_inputs()][:1] != ["encoder_input_ids"]:
            raise ValueError(f"{directory} holds ONNX graphs of an earlier version of "
                             "keras-transformer, with other inputs; export the model again.")
        caches = [value.name for value in self.encoder.get_outputs()
                  if value.name.startswith("present_")]
        self.self_caches = [name for name in caches if "_self_" in name]
        self.cross_caches = [name for name in caches if "_cross_" in name]
        # Exports made before the special ids were configurable use ours.
        self.pad_id = self.config.get("pad_id", special_ids.PAD_ID)
        self.start_id = self.config.get("decoder_start_id", special_ids.BOS_ID)
        self.eos_id = self.config.get("eos_id", special_ids.EOS_ID)

    def limits(self, source_ids, decode_margin=None, max_output_length=None):
        margin = self.config["decode_margin"] if decode_margin is None else decode_margin
        cap = self.config["max_length"] if max_output_length is None else max_output_length
        real = np.sum((source_ids != self.pad_id) & (source_ids != self.eos_id), axis=1)
        return np.minimum(real + margin, cap)

    def greedy(self, source_ids, alpha=None, **limits):
        """Greedy search: `(tokens (batch, 1, length), scores (batch, 1))`."""
        return self.beam(source_ids, beam_size=1, alpha=alpha, **limits)

    def beam(self, source_ids, beam_size=None, alpha=None, decode_margin=None,
             max_output_length=None):
        """Beam search: `(tokens (batch, K, length), scores (batch, K))`, best first."""
        k = self.config["beam_size"] if beam_size is None else beam_size
        alpha = self.config["length_penalty"] if alpha is None else alpha
        source_ids = np.asarray(source_ids, np.int32)
        batch = source_ids.shape[0]
        limits = self.limits(source_ids, decode_margin, max_output_length)
        length = int(limits.max())
        vocab = self.config["target_vocab_size"]

        # The encoder graph runs the first step too, one row per sentence;
        # its logits and self caches are repeated for the sentence's k
        # hypotheses (of which only the first is alive at the start). The
        # mask and cross caches stay one row per sentence, which its k
        # hypotheses share.
        mask = (source_ids != self.pad_id).astype(np.int32)
        outputs = _run(self.encoder, {
            "encoder_input_ids": source_ids, "encoder_attention_mask": mask,
            "decoder_input_ids": np.full((batch, 1), self.start_id, np.int32)})
        feeds = {"encoder_attention_mask": mask}
        for name in self.cross_caches:
            feeds[name.replace("present_", "past_")] = outputs[name]
        # The row of the last graph's outputs that each hypothesis reads.
        output_rows = np.repeat(np.arange(batch), k)

        alive = np.full((batch, k, length + 1), self.pad_id, np.int32)
        alive[:, :, 0] = self.start_id
        alive_log_probs = np.full((batch, k), _NEG_INF, np.float32)
        alive_log_probs[:, 0] = 0.0
        finished = np.full_like(alive, self.pad_id)
        finished_scores = np.full((batch, k), _NEG_INF, np.float32)
        finished_log_probs = np.full((batch, k), _NEG_INF, np.float32)
        finished_count = np.zeros(batch, np.int64)
        banned = np.zeros(vocab, bool)
        banned[list({self.pad_id, self.start_id} - {self.eos_id})] = True

        for step in range(length):
            if np.all((finished_count >= k) | (step >= limits)):
                break
            if step:
                feeds["input_ids"] = alive[:, :, step].reshape(batch * k, 1)
                outputs = _run(self.decoder_step, feeds)
                output_rows = np.arange(batch * k)
            logits = outputs["logits"][output_rows, 0].astype(np.float32)
            shifted = logits - logits.max(axis=1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            log_probs = np.where(banned, _NEG_INF, log_probs).reshape(batch, k, vocab)
            at_limit = (step + 1 >= limits)[:, None, None]
            log_probs = np.where(at_limit & (np.arange(vocab) != self.eos_id), _NEG_INF, log_probs)
            candidates = (alive_log_probs[:, :, None] + log_probs).reshape(batch, k * vocab)
            top_ids = _top(candidates, 2 * k)
            top_log_probs = np.take_along_axis(candidates, top_ids, axis=1)
            top_beams, top_tokens = top_ids // vocab, top_ids % vocab
            top_sequences = np.take_along_axis(alive, top_beams[:, :, None], axis=1)
            top_sequences[:, :, step + 1] = top_tokens
            is_end = top_tokens == self.eos_id
            done = finished_count >= k

            eligible = (is_end & (np.arange(2 * k) < k)[None] & ~done[:, None]
                        & (top_log_probs > _NEG_INF / 2))
            new_scores = np.where(eligible, top_log_probs / length_penalty(step + 1, alpha), _NEG_INF)
            merged = np.concatenate([finished_scores, new_scores.astype(np.float32)], axis=1)
            keep = _top(merged, k)
            finished_scores = np.take_along_axis(merged, keep, axis=1)
            finished = np.take_along_axis(
                np.concatenate([finished, top_sequences], axis=1), keep[:, :, None], axis=1)
            finished_log_probs = np.take_along_axis(np.concatenate(
                [finished_log_probs, np.where(eligible, top_log_probs, _NEG_INF)], axis=1), keep, axis=1)
            finished_count += eligible.sum(axis=1)

            alive_candidates = np.where(is_end, _NEG_INF, top_log_probs)
            keep = _top(alive_candidates, k)
            alive = np.take_along_axis(top_sequences, keep[:, :, None], axis=1)
            alive_log_probs = np.take_along_axis(alive_candidates, keep, axis=1)
            beams = (np.take_along_axis(top_beams, keep, axis=1) + np.arange(batch)[:, None] * k).ravel()
            for name in self.self_caches:
                feeds[name.replace("present_", "past_")] = outputs[name][output_rows[beams]]
        return finished[:, :, 1:], finished_scores


class OnnxTranslator:
    """Text in, text out over the ONNX graphs, with the same rules as
    `keras_transformer.decoding.Translator`: str or bytes in, invalid UTF-8
    becomes U+FFFD and NUL a space, blank input gives "", input longer than
    the model accepts is cut to its `max_length - 1` tokens with a
    `TruncationWarning` naming it (unless `warn_overlong` is False: a caller
    that counts them itself, as a server does)."""

    def __init__(self, directory, tokenizer_path=None, threads=None, warn_overlong=True):
        self.search = OnnxSearch(directory, threads)
        self.warn_overlong = warn_overlong
        self.tokenizer = (SentencePieceText(tokenizer_path) if tokenizer_path
                          else run_folder.load_text_tokenizer(directory))
        # The graphs written from the weights (`onnx_step`), where the export
        # holds them: the same search, its caches kept in onnxruntime and a
        # few operators a step (several times faster on a file).
        paths = [os.path.join(directory, name) for name in onnx_step.FILES]
        self.steps = (onnx_step.StepSearch(paths, types.SimpleNamespace(**self.search.config),
                                           threads)
                      if all(os.path.isfile(path) for path in paths) else None)
        if self.steps is None:
            warnings.warn(f"{directory} was exported before the graphs that search batches "
                          "and lone sentences fast: export the run again.", stacklevel=3)

    def encode(self, sentences):
        limit = self.search.config["max_length"] - 1
        pieces = [self.tokenizer.encode(clean_text(s)) for s in sentences]
        too_long = [i for i, ids in enumerate(pieces) if len(ids) > limit]
        if too_long and self.warn_overlong:
            warnings.warn(truncation_warning(too_long, limit), stacklevel=3)
        pieces = [list(ids[:limit]) for ids in pieces]
        source = np.full((len(pieces), max(len(p) for p in pieces) + 1), self.search.pad_id,
                         np.int32)
        for row, ids in enumerate(pieces):
            source[row, :len(ids) + 1] = ids + [self.search.eos_id]
        return source, [not ids for ids in pieces]

    def decode(self, ids):
        return self.tokenizer.decode(ids)

    def search_batch(self, source, beam_size=None, alpha=None, decode_margin=None, n_best=1):
        """`(tokens (batch, n_best, length), scores (batch, n_best))` of the
        padded `source` ids, best first: over the graphs written from the
        weights where the export holds them, else `OnnxSearch.beam`."""
        config = self.search.config
        beam_size = config["beam_size"] if beam_size is None else beam_size
        alpha = config["length_penalty"] if alpha is None else alpha
        decode_margin = config["decode_margin"] if decode_margin is None else decode_margin
        if self.steps is not None:
            return self.steps.search_batch(source, beam_size, alpha, decode_margin, n_best)
        tokens, scores = self.search.beam(source, beam_size, alpha, decode_margin)
        return tokens[:, :n_best], scores[:, :n_best]

    def translate(self, sentences, beam_size=None, alpha=None):
        if not sentences:
            return []
        source, blank = self.encode(sentences)
        tokens, _ = self.search_batch(source, beam_size=beam_size, alpha=alpha)
        return ["" if empty else self.decode(row[0]) for row, empty in zip(tokens, blank)]


class OnnxRuntime(Runtime):
    """An export's ONNX graphs with the beam search in NumPy
    (`OnnxTranslator`): batches and lone sentences over the graphs written
    from the weights (`onnx_step.StepSearch`: the caches kept in
    onnxruntime, a few operators a step), where the export holds them
    (exports made before them are told, in one line, to export again)."""

    name = "onnx"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        folder = run_folder.export_part(path, "onnx")
        self.translator = OnnxTranslator(folder, threads=threads, warn_overlong=False)
        self._tokenizer = self.translator.tokenizer
        self.lone = "onnxruntime" if self.translator.steps is not None else None

    def _translate(self, sentences, n_best, seed):
        settings, translator = self.decoding, self.translator
        if self.lone and len(sentences) == 1 and n_best == 1:
            return self._translate_lone(sentences[0])
        source, blank = translator.encode(sentences)
        n_best = min(n_best, settings.beam_size)
        tokens, scores = translator.search_batch(source, settings.beam_size, settings.alpha,
                                                 settings.decode_margin, n_best)
        return [[("", 0.0)] * n_best if empty else
                [(translator.decode(ids), float(score)) for ids, score in zip(rows, row_scores)]
                for rows, row_scores, empty in zip(tokens, scores, blank)]

    def _translate_lone(self, sentence):
        """`_translate`'s answer for one sentence, over the step graphs."""
        source, blank = self.translator.encode([sentence])
        if blank[0]:
            return [[("", 0.0)]]
        settings = self.decoding
        tokens, score, _, _ = self.translator.steps.search(
            [int(i) for i in source[0]], settings.beam_size, settings.alpha,
            settings.decode_margin)
        return [[(self.translator.decode(tokens), score)]]
