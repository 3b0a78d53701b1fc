"""The onnx/ part of an export: the encoder, decoder-step and forward graphs
(`graphs`), their config and the tokenizer files, for the ONNX runtime
(`runtimes.onnx_runner`); the encoder and step graphs written from the
weights (`onnx_step`), which the runtime searches batches and lone
sentences over; and translate.onnx (`text`), text in, text out, with the
tokenizer and onnxruntime's beam search inside. int8 weights are `int8`'s: written and
checked in float32 first, then quantized."""

import importlib.util
import json
import os
import warnings

import numpy as np
import onnx
import onnxruntime

from keras_transformer import onnx_step
from keras_transformer.decoding import beam_search
from keras_transformer.decoding.alignment import alignment_layer
from keras_transformer.export.checks import CHECK_SENTENCES, agreement, require, run_checker
from keras_transformer.export.formats import ExportFormat
from keras_transformer.export.onnx import graphs, int8, text
from keras_transformer.runtimes.onnx_runner import CONFIG_FILE, OnnxSearch

TRANSLATE_SCRIPT = importlib.util.find_spec("keras_transformer.runtimes.translate_onnx").origin
"""The script that runs translate.onnx. Found, not imported: importing it
loads onnxruntime-extensions' op library, which crashes a process that
loaded TensorFlow first."""

TRANSLATE_CHECKS = ({"beam_size": 1}, {"alpha": 0.0})
"""translate.onnx's settings whose translations must be the SavedModel's
(where its search's rules are ours: greedy, or beam search with alpha 0)."""


def runner_config(model):
    """What the ONNX runner needs to know about the model (its config.json)."""
    config = model.config
    return {
        "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads,
        "head_key_dim": config.head_key_dim,
        "head_value_dim": config.head_value_dim,
        "target_vocab_size": model.target_vocab_size,
        "max_length": config.max_length,
        "beam_size": config.beam_size,
        "length_penalty": config.length_penalty,
        "decode_margin": config.decode_margin,
        "pad_id": config.pad_id,
        "decoder_start_id": config.decoder_start_id,
        "eos_id": config.eos_id,
    }


class OnnxFormat(ExportFormat):
    """onnx/, written in float32 and checked against the in-process model:
    logits, the runner's beam search, the step graphs' searches (each check
    sentence alone: the best-only search's tokens; all as one batch: the K
    best), and translate.onnx's
    greedy and alpha = 0 beam translations; then, for int8, quantized and
    measured for how often it agrees."""

    name = "onnx"
    quantizations = ("float32", "int8")

    def write_and_check(self, checks, folder):
        model, tokenizer = checks.model, checks.tokenizer
        directory = os.path.join(folder, self.name)
        paths = graphs.export(model, directory)
        lone = onnx_step.StepGraphs(model, alignment_layer(model))
        for name, proto in zip(onnx_step.FILES, (lone.encoder, lone.step)):
            paths[name] = os.path.join(directory, name)
            onnx.save(proto, paths[name])
        with open(os.path.join(directory, CONFIG_FILE), "w") as file:
            json.dump(runner_config(model), file, indent=2)
        tokenizer.save(directory)
        translate_path = os.path.join(directory, text.FILE)

        def subgraphs():
            """encoder.onnx and decoder_step.onnx as written: translate.onnx's
            search nests them."""
            return tuple(onnx.load(paths[name]) for name in ("encoder", "decoder_step"))

        translates = text.supports(tokenizer)
        if translates:
            onnx.save(text.translate_model(model, tokenizer, subgraphs()), translate_path)
        # translate.onnx runs only with onnxruntime-extensions (an extra):
        # without it the file is written, and said to be unchecked, rather
        # than refused.
        run_translate = translates and importlib.util.find_spec("onnxruntime_extensions") is not None
        logits, tokens, translations = _run(directory, checks.inputs, run_translate)
        difference = float(np.abs(logits - checks.logits).max())
        require(difference < 1e-4, f"ONNX logits differ from Keras by {difference} (> 1e-4)")
        require(np.array_equal(tokens, beam_search(model, checks.source).tokens.numpy()),
                "the onnxruntime beam search differs from the TensorFlow one")
        lone_tokens, batch_tokens = _step_tokens(directory, checks)
        require(lone_tokens == [row[0] for row in _trimmed(beam_search(
            model, checks.source, best_only=True).tokens.numpy(), model.config.eos_id)],
                "the lone sentence's search on onnxruntime differs from the TensorFlow one")
        require(batch_tokens == _trimmed(tokens, model.config.eos_id),
                "the batch's search over the step graphs differs from the TensorFlow one")
        report = {"path": self.name, "opset": graphs.OPSET, "max_logit_difference": difference,
                  "beam_tokens_match": True, "lone_tokens_match": True,
                  "batch_tokens_match": True}
        if translates and not run_translate:
            warnings.warn(f"onnx/{text.FILE} was written but not checked: running it needs "
                          "onnxruntime-extensions (pip install 'keras-transformer[onnx-text]').",
                          stacklevel=3)
            report["translate"] = {"path": f"onnx/{text.FILE}", "checked": False}
        elif translates:
            require(translations == _saved_model_translations(checks),
                    "translate.onnx translated differently from the SavedModel's translate "
                    "function (greedy, or beam search with alpha 0)")
            report["translate"] = {"path": f"onnx/{text.FILE}", "checked": True,
                                   "greedy_matches": True, "beam_alpha_0_matches": True}
        if checks.quantization == "int8":
            for path in paths.values():
                onnx.save(int8.quantize(onnx.load(path)), path)
            if translates:
                onnx.save(text.translate_model(model, tokenizer, subgraphs()), translate_path)
            int8_logits, int8_tokens, int8_translations = _run(directory, checks.inputs,
                                                               run_translate)
            int8_lone, int8_batch = _step_tokens(directory, checks)
            report["int8"] = {
                "max_logit_difference": float(np.abs(int8_logits - checks.logits).max()),
                "beam_tokens_agreement": agreement(list(int8_tokens), list(tokens)),
                "lone_tokens_agreement": agreement(int8_lone, lone_tokens),
                "batch_tokens_agreement": agreement(
                    [hypothesis for row in int8_batch for hypothesis in row],
                    [hypothesis for row in batch_tokens for hypothesis in row])}
            if run_translate:
                report["int8"]["translate_agreement"] = agreement(
                    [line for run in int8_translations for line in run],
                    [line for run in translations for line in run])
        return report


def _trimmed(tokens, eos_id):
    """Each hypothesis of `tokens` `(batch, n, length)` up to its end token,
    included, as lists."""
    return [[list(row[:list(row).index(eos_id) + 1]) if eos_id in row else list(row)
             for row in sentence] for sentence in tokens]


def _step_tokens(directory, checks):
    """The tokens (end token included) the step graphs in `directory` find
    for the check sources: each searched alone (its best), and all as one
    padded batch (its K best, as `_trimmed`)."""
    config = checks.model.config
    search = onnx_step.StepSearch([os.path.join(directory, name) for name in onnx_step.FILES],
                                  config)
    lone = [search.search([int(i) for i in row if i != config.pad_id], config.beam_size,
                          config.length_penalty, config.decode_margin)[0]
            for row in checks.source]
    batch, _ = search.search_batch(checks.source, config.beam_size, config.length_penalty,
                                   config.decode_margin, n_best=config.beam_size)
    return lone, _trimmed(batch, config.eos_id)


def _saved_model_translations(checks):
    """The best translations of the check sentences by the text SavedModel's
    `translate` function (run in this process), for each of
    `TRANSLATE_CHECKS`; the model's config gives the settings they leave
    alone."""
    beam_size, alpha, decode_margin = checks.settings()
    runs = []
    for settings in TRANSLATE_CHECKS:
        values = {"beam_size": beam_size, "alpha": alpha, "decode_margin": decode_margin} \
            | settings
        runs.append((values["beam_size"], values["alpha"], values["decode_margin"]))
    return [[row[0] for row in texts] for texts, _ in checks.saved_model_translations(runs)]


def _run(directory, inputs, translate):
    """The forward graph's logits and the runner's beam-search tokens of the
    check ids, and translate.onnx's translations of the check sentences for
    each of `TRANSLATE_CHECKS` (None without translate.onnx)."""
    forward = onnxruntime.InferenceSession(os.path.join(directory, "forward.onnx"))
    logits = forward.run(None, inputs)[0]
    tokens, _ = OnnxSearch(directory).beam(inputs["source_ids"])
    translations = None
    if translate:
        # In a process of its own: onnxruntime-extensions' ops crash a
        # process that loaded TensorFlow first, and this shows that the
        # file needs neither TensorFlow nor this package.
        request = {"sentences": list(CHECK_SENTENCES), "settings": list(TRANSLATE_CHECKS)}
        output = run_checker([TRANSLATE_SCRIPT, os.path.join(directory, text.FILE),
                              "--json"], request, "translate.onnx")
        translations = [[row[0] for row in run["translations"]] for run in output["results"]]
    return logits, tokens, translations
