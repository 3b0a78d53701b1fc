"""Exports a trained run to every serving format, checks what it wrote, and
only then moves it into place.

Layout of an export folder:
    model.keras            the Keras model (load with safe_mode=True)
    tokenizer files        the run's: tokenizer.model (ours), or an imported
                           model's (Marian: vocab.json, source.spm, target.spm;
                           FSMT: vocab-src.json, vocab-tgt.json, merges.txt)
    saved_model/           text in, text out, and the id signatures (needs TF Text
                           ops; not for FSMT, whose tokenizer is not TF ops)
    saved_model_core/      the id signatures only, core TF ops (stock TF Serving)
    onnx/                  forward.onnx, encoder.onnx, decoder_step.onnx,
                           config.json and the tokenizer files, for onnxruntime;
                           and translate.onnx: text in, text out, beam search
                           inside (onnxruntime + onnxruntime-extensions; not
                           for FSMT, whose tokenizer is not graph ops)
    ctranslate2/           model.bin, config.json, the vocabularies,
                           decoding.json and the tokenizer files, for
                           CTranslate2 (only when asked for: an optional
                           dependency)
    litert/                translate.tflite (text in, text out, or ids in
                           for a BPE tokenizer) and search_ids.tflite (ids
                           in, ids out), LiteRT files with the beam search
                           inside (`litert_model`; only when asked for)
    export.json            what was exported and what the checks measured, and
                           the languages the run translates where its folder
                           says (`languages.languages`: what serve lists)

`quantization="int8"` stores the ONNX graphs' weights as int8 and runs
their matmuls in int8 with activations quantized row by row
(`onnx_int8`), so that a sentence's translation does not depend on its
batch: they are first written and checked in float32, then quantized and
checked to load and translate, and how often they agree with float32 goes
into the report. The LiteRT files are checked the same way with LiteRT's
own int8 (dynamic range) or float16 weights; float16 is LiteRT's only.

Everything is written to a temporary folder next to the destination; a
failure (a missing or corrupt model, checkpoint or tokenizer, a check that
does not pass) removes it and leaves any earlier export untouched.
"""

import importlib.util
import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import onnx
import onnxruntime
import tensorflow as tf

from keras_transformer.languages import languages
from keras_transformer.data import load_tokenizer
from keras_transformer.decoding import (
    Translator,
    beam_search,
    greedy_search,
    load_model_and_tokenizer,
)
from keras_transformer.decoding.translator import encode_sources, max_source_tokens, search
from keras_transformer.export import (
    ctranslate2_model,
    litert_model,
    onnx_graphs,
    onnx_int8,
    onnx_text,
    saved_model,
)
from keras_transformer.export.ctranslate2_translator import (
    CTranslate2Translator,
    require_ctranslate2,
)
from keras_transformer.export.formats import DEFAULT_FORMATS, FORMATS, QUANTIZATIONS
from keras_transformer.export.onnx_runner import CONFIG_FILE, OnnxSearch
from keras_transformer.models import (
    DECODING_PRECISIONS,
    TransformerConfig,
    in_precision,
    transformer,
)
from keras_transformer.textfiles import TruncationWarning, check_output, replace_folder

TRANSLATE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "translate_onnx.py")
LITERT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "translate_litert.py")
# The last starts with a language code: one id for a multilingual OPUS-MT
# model's tokenizer (unk if its vocabulary lacks it), plain text for others.
CHECK_SENTENCES = ("", "Guten Morgen!", "Das Haus ist groß.",
                   "Ich habe heute keine Zeit, aber morgen komme ich gern.",
                   ">>fra<< Wo ist der Bahnhof?")


def load_for_export(run_dir, model_file=None, checkpoint=None):
    """The model (in float32, whatever precision it was trained in) and the
    tokenizer of a run: from `model_file` (default averaged.keras, else
    model.keras), or from a training `checkpoint` path and the run's
    config.json."""
    if checkpoint is None:
        trained, tokenizer = load_model_and_tokenizer(run_dir, model_file)
    else:
        tokenizer = load_tokenizer(run_dir)
        config_path = os.path.join(run_dir, "config.json")
        if not os.path.isfile(config_path):
            raise FileNotFoundError(f"{config_path} is missing; it describes the checkpoint's model.")
        trained = transformer(TransformerConfig.from_file(config_path), tokenizer.vocab_size,
                              tokenizer.target_vocab_size)
        try:
            tf.train.Checkpoint(model=trained).restore(checkpoint).expect_partial() \
                .assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as error:
            raise ValueError(f"Cannot read checkpoint {checkpoint!r}: {error}") from None
    # Serving formats start from float32 weights (onnxruntime has little
    # bfloat16 support), whatever precision the model was trained in.
    return in_precision(trained, "float32"), tokenizer


def onnx_config(model):
    """What the ONNX runner needs to know about the model."""
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


def _check_ids(tokenizer, model):
    """Source ids of the check sentences, and as target ids the same
    sentences after the start id (any target will do for comparing logits)."""
    texts = tf.constant([s for s in CHECK_SENTENCES if s])
    source, _ = encode_sources(tokenizer, texts, max_source_tokens(model))
    ids = tokenizer.tokenize(texts)[:, :max_source_tokens(model)]
    target = tf.concat([tf.fill([ids.nrows(), 1], tokenizer.bos_id), ids], axis=1).to_tensor(
        default_value=tokenizer.pad_id)
    return source.numpy(), target.numpy()


def export_run(run_dir, output_dir, formats=DEFAULT_FORMATS, model_file=None, checkpoint=None,
               overwrite=False, quantization="float32", precision="float32"):
    """Exports a training output folder; returns the report in export.json.

    `quantization` is how the formats that can store weights in another
    type do so: "float32", "int8" (the ONNX graphs, CTranslate2, LiteRT) or
    "float16" (LiteRT). A float32 export is checked for exactness; an int8
    or float16 one for loading and translating, with its agreement
    measured and reported. `precision` is
    the one the SavedModels decode in ("bfloat16" is faster on CPUs with
    AVX-512 BF16 or AMX, "float16" on GPUs; see `models.in_precision`),
    checked as `_write_and_check_saved_models` says.

    Raises:
        FileExistsError: `output_dir` exists and `overwrite` is False
            (checked, like whether it can be written, before anything is
            loaded).
        ImportError: a format whose optional package is not installed.
        FileNotFoundError, ValueError: missing or unreadable inputs, or a
            format that fails its check.
    """
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"Unknown export format(s) {sorted(unknown)}; choose from {FORMATS}.")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantization!r}; choose from {QUANTIZATIONS}.")
    if precision not in DECODING_PRECISIONS:
        raise ValueError(f"precision must be one of {DECODING_PRECISIONS}; got {precision!r}.")
    if quantization == "float16" and ({"onnx", "ctranslate2"} & set(formats)
                                      or "litert" not in formats):
        raise ValueError("float16 weights are for the litert format only: give --formats "
                         "litert (keras and saved_model may come along, in float32), and "
                         "export onnx and ctranslate2 apart, in float32 or int8.")
    if "ctranslate2" in formats:
        require_ctranslate2()
    output_dir = check_output(output_dir, overwrite, folder=True,
                              option="overwrite=True (--overwrite)")
    model, tokenizer = load_for_export(run_dir, model_file, checkpoint)
    if "ctranslate2" in formats:
        ctranslate2_model.check_exportable(model.config)
    if "litert" in formats:
        litert_model.check_exportable(tokenizer)
    with replace_folder(output_dir, prefix=".export-") as scratch:
        report = _write_and_check(model, tokenizer, scratch, formats, quantization, precision)
        report["languages"] = languages(run_dir)
        with open(os.path.join(scratch, "export.json"), "w") as file:
            json.dump(report, file, indent=2)
    return report


def _write_and_check(model, tokenizer, folder, formats, quantization, precision):
    tokenizer.save(folder)
    source, target = _check_ids(tokenizer, model)
    inputs = {"source_ids": source, "target_ids": target}
    expected_logits = model(inputs).numpy()
    report = {"config": model.config.to_dict(), "quantization": quantization, "formats": {}}
    modules = _ServingModules(model, tokenizer)

    if "keras" in formats:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        reloaded = keras.models.load_model(path, safe_mode=True)
        difference = float(np.abs(reloaded(inputs).numpy() - expected_logits).max())
        _require(difference == 0.0, f".keras reload changed the logits by {difference}")
        report["formats"]["keras"] = {"path": "model.keras", "max_logit_difference": difference}

    if "saved_model" in formats:
        report["formats"]["saved_model"] = _write_and_check_saved_models(
            modules, precision, folder, inputs, expected_logits)

    if "onnx" in formats:
        expected_search = beam_search(model, source)
        report["formats"]["onnx"] = _write_and_check_onnx(
            model, tokenizer, os.path.join(folder, "onnx"), inputs, expected_logits,
            expected_search.tokens.numpy(), quantization, modules)

    if "ctranslate2" in formats:
        directory = ctranslate2_model.save(model, tokenizer, os.path.join(folder, "ctranslate2"),
                                           quantization)
        report["formats"]["ctranslate2"] = {
            "path": "ctranslate2", "quantization": quantization,
            **_check_ctranslate2(model, tokenizer, directory, exact=quantization == "float32")}

    if "litert" in formats:
        report["formats"]["litert"] = _write_and_check_litert(
            model, tokenizer, os.path.join(folder, "litert"), source, quantization, modules)
    return report


class _ServingModules:
    """The export's `saved_model.ServingModule`s, each made once: the
    SavedModels' checks and the ONNX and LiteRT checks against the text
    SavedModel's functions share them, and with them their traces: each
    function is traced once per export (tracing a beam search takes
    seconds)."""

    def __init__(self, model, tokenizer):
        self.tokenizer, self._model, self._modules = tokenizer, model, {}

    def get(self, precision="float32", text=True):
        """The module decoding in `precision`, with the text functions
        (`text`) or the id functions only; the text one shares the id
        functions of the other."""
        key = (precision, text)
        if key not in self._modules:
            if text:
                module = self.get(precision, text=False).with_text(self.tokenizer)
            else:
                module = saved_model.ServingModule(in_precision(self._model, precision))
            self._modules[key] = module
        return self._modules[key]


LOGIT_TOLERANCE = {"float32": 1e-5, "float16": 2**-6, "bfloat16": 2**-3}
"""How far a SavedModel's logits may be from the float32 model's, relative
to the largest float32 logit: rounding only in float32; in float16 and
bfloat16 about 32 half-units of the last place (2**-11 and 2**-8) of the
format, more than the largest difference measured on the test models
(1.8e-3 and 3.8e-2) and far less than wrong weights give."""


def _write_and_check_saved_models(modules, precision, folder, inputs, float32_logits):
    """Writes saved_model_core/ (and saved_model/, for a tokenizer made of
    TensorFlow ops) decoding in `precision` (the `modules.get` ones), and
    checks:
    - loaded back, each gives exactly what the same functions give in this
      process before saving, text in (tokenizer, search, weights), ids in
      and logits (what the files hold is complete);
    - their logits are the float32 model's within `LOGIT_TOLERANCE` of its
      precision (the functions compute this model); checked first, so that
      a model that fails it is refused before anything is traced or written.
    Equality with the `Translator`'s translations is measured
    (`translator_agreement`), not required: the Translator sorts sentences
    by length, and a sentence's rounding can change with its place in the
    batch (bfloat16 on CPUs without native bfloat16, such as AVX2 ones,
    flips translations that way; float32 moves logits by about 1e-6)."""
    core = modules.get(precision, text=False)
    serving, tokenizer = core.model, modules.tokenizer
    config = serving.config
    ids = {"source_ids": tf.constant(inputs["source_ids"])}
    settings = {"beam_size": tf.constant(config.beam_size),
                "alpha": tf.constant(float(config.length_penalty)),
                "decode_margin": tf.constant(config.decode_margin)}
    text = {"text": tf.constant(list(CHECK_SENTENCES))}
    # One call of each computation: text in (tokenizer, search, weights),
    # ids in, logits. `translate` and `encode` are variants of these.
    checks = {"saved_model": {"serving_default": text},
              "saved_model_core": {"search_ids": ids | settings,
                                   "logits": ids | {"target_ids": tf.constant(inputs["target_ids"])}}}
    logits = core.logits(**checks["saved_model_core"]["logits"])["logits"].numpy()
    difference = float(np.abs(logits - float32_logits).max() / np.abs(float32_logits).max())
    _require(difference <= LOGIT_TOLERANCE[precision],
             f"the SavedModels' logits are {difference:.3g} of the largest logit away from the "
             f"float32 model's (more than {LOGIT_TOLERANCE[precision]:.3g} in {precision})")
    report = {"paths": [], "precision": precision, "signatures": {},
              "relative_logit_difference": difference}
    # A tokenizer that is not TensorFlow ops (FSMT's Moses tokenization)
    # cannot go into a SavedModel: such models serve ids only.
    for path, module_tokenizer in (("saved_model", tokenizer), ("saved_model_core", None)):
        if path == "saved_model" and not tokenizer.in_graph:
            continue
        module = modules.get(precision, text=module_tokenizer is not None)
        loaded = tf.saved_model.load(module.save(os.path.join(folder, path))).signatures
        for name, call in checks[path].items():
            served, expected = loaded[name](**call), getattr(module, name)(**call)
            _require(all(np.array_equal(served[key].numpy(), expected[key].numpy())
                         for key in expected),
                     f"{path}'s {name} gives other outputs loaded than in this process")
            if name == "serving_default":
                report["translator_agreement"] = _agreement(
                    [t.decode() for t in served["translations"].numpy()],
                    _translations(serving, tokenizer))
        report["paths"].append(path)
        report["signatures"][path] = saved_model.signature_names(text=module_tokenizer is not None)
    return report


def _translations(model, tokenizer):
    """The `Translator`'s translations of the check sentences."""
    with warnings.catch_warnings():  # a check sentence may be longer than the model accepts
        warnings.simplefilter("ignore", TruncationWarning)
        return Translator(model, tokenizer).translate(list(CHECK_SENTENCES))


def _check_ctranslate2(model, tokenizer, directory, exact):
    """Loads the CTranslate2 export and compares it with the model on the
    check sentences: the log-probability of every target token (teacher
    forced), and greedy search's tokens. `exact` requires them to be equal
    (within 1e-4); otherwise they are only measured."""
    translator = CTranslate2Translator(directory)
    texts = tf.constant([s for s in CHECK_SENTENCES if s])
    sources = tokenizer.tokenize(texts)[:, :max_source_tokens(model)].to_list()
    targets = tokenizer.tokenize_target(texts)[:, :max_source_tokens(model)].to_list()
    source_ids, _ = encode_sources(tokenizer, texts, max_source_tokens(model))
    target_ids = tf.ragged.constant([[model.config.decoder_start_id] + t for t in targets]).to_tensor(
        default_value=model.config.pad_id)
    log_probs = tf.nn.log_softmax(model({"source_ids": source_ids, "target_ids": target_ids})).numpy()
    difference = max(
        float(np.abs(np.array(scored) - log_probs[row, np.arange(len(scored)),
                                                  target + [model.config.eos_id]]).max())
        for row, (target, scored) in enumerate(zip(targets, translator.score(sources, targets))))
    expected = [_until_end(row[0], model.config.eos_id)
                for row in greedy_search(model, source_ids).tokens.numpy()]
    found = [best[0][0] for best in translator.search(sources, beam_size=1)]
    matches = sum(a == b for a, b in zip(expected, found))
    if exact:
        _require(difference < 1e-4,
                 f"CTranslate2 log-probabilities differ from Keras by {difference} (> 1e-4)")
        _require(matches == len(expected), "CTranslate2's greedy search differs from ours")
    return {"max_log_prob_difference": difference, "greedy_agreement": matches / len(expected)}


def _until_end(ids, eos_id):
    """Search output up to and including the first end id, as a list."""
    ids = [int(i) for i in ids]
    return ids[:ids.index(eos_id) + 1] if eos_id in ids else ids


def _write_and_check_onnx(model, tokenizer, directory, inputs, expected_logits, expected_tokens,
                          quantization, modules):
    """Writes onnx/ in float32 and checks it against the in-process model:
    logits, the runner's beam search, and translate.onnx's greedy and
    alpha = 0 beam translations (where its rules are ours); then, for int8,
    quantizes the graphs and measures how often they agree."""
    paths = onnx_graphs.export(model, directory)
    with open(os.path.join(directory, CONFIG_FILE), "w") as file:
        json.dump(onnx_config(model), file, indent=2)
    tokenizer.save(directory)
    translate_path = os.path.join(directory, onnx_text.FILE)

    def subgraphs():
        """encoder.onnx and decoder_step.onnx as written: translate.onnx's
        search nests them."""
        return tuple(onnx.load(paths[name]) for name in ("encoder", "decoder_step"))

    translates = onnx_text.supports(tokenizer)
    if translates:
        onnx.save(onnx_text.translate_model(model, tokenizer, subgraphs()), translate_path)
    # translate.onnx runs only with onnxruntime-extensions (an extra): without
    # it the file is written, and said to be unchecked, rather than refused.
    run_translate = translates and importlib.util.find_spec("onnxruntime_extensions") is not None
    logits, tokens, translations = _run_onnx(directory, inputs, run_translate)
    difference = float(np.abs(logits - expected_logits).max())
    _require(difference < 1e-4, f"ONNX logits differ from Keras by {difference} (> 1e-4)")
    _require(np.array_equal(tokens, expected_tokens),
             "the onnxruntime beam search differs from the TensorFlow one")
    report = {"path": "onnx", "opset": onnx_graphs.OPSET, "max_logit_difference": difference,
              "beam_tokens_match": True}
    if translates and not run_translate:
        warnings.warn(f"onnx/{onnx_text.FILE} was written but not checked: running it needs "
                      "onnxruntime-extensions (pip install 'keras-transformer[onnx-text]').",
                      stacklevel=3)
        report["translate"] = {"path": f"onnx/{onnx_text.FILE}", "checked": False}
    elif translates:
        _require(translations == _served_translations(modules.get().translate, model.config),
                 "translate.onnx translated differently from the SavedModel's translate "
                 "function (greedy, or beam search with alpha 0)")
        report["translate"] = {"path": f"onnx/{onnx_text.FILE}", "checked": True,
                               "greedy_matches": True, "beam_alpha_0_matches": True}
    if quantization == "int8":
        for path in paths.values():
            onnx.save(onnx_int8.quantize(onnx.load(path)), path)
        if translates:
            onnx.save(onnx_text.translate_model(model, tokenizer, subgraphs()), translate_path)
        int8_logits, int8_tokens, int8_translations = _run_onnx(directory, inputs,
                                                                run_translate)
        report["int8"] = {
            "max_logit_difference": float(np.abs(int8_logits - expected_logits).max()),
            "beam_tokens_agreement": _agreement(list(int8_tokens), list(tokens))}
        if run_translate:
            report["int8"]["translate_agreement"] = _agreement(
                [text for run in int8_translations for text in run],
                [text for run in translations for text in run])
    return report


def _write_and_check_litert(model, tokenizer, directory, source_ids, quantization, modules):
    """Writes litert/ (`litert_model`) and checks it in a process that
    loads nothing of this package (`translate_litert.py`): in float32, translate.tflite's n-best
    translations of the check sentences (their ids, for a file that takes
    ids) must be the SavedModel's translate function's, and
    search_ids.tflite's ids TensorFlow's search's, each with the model
    config's beam size, length penalty and margin; then the int8 or float16
    files replace them, and how often they agree goes into the report."""
    weights = ("float32",) + ((quantization,) if quantization != "float32" else ())
    files = litert_model.convert(model, tokenizer, weights)
    refusal = litert_model.text_in_refusal(tokenizer)
    if refusal:
        warnings.warn(f"litert/{litert_model.TRANSLATE_FILE} takes token ids: {refusal}.",
                      stacklevel=4)
    config = model.config
    settings = (config.beam_size, float(config.length_penalty), config.decode_margin)
    (expected, expected_scores), = _saved_model_translations(modules.get().translate,
                                                             [settings])
    expected_ids = search(model, tf.constant(source_ids), *settings).tokens.numpy()
    request = {"sentences": list(CHECK_SENTENCES)} if refusal is None else {
        "source_ids": encode_sources(tokenizer, tf.constant(list(CHECK_SENTENCES)),
                                     max_source_tokens(model))[0].numpy().tolist()}
    report = {"path": "litert", "files": [litert_model.TRANSLATE_FILE, litert_model.SEARCH_FILE],
              "text_in": refusal is None, "beam_size": settings[0], "length_penalty": settings[1],
              "decode_margin": settings[2], "quantization": quantization}
    if refusal:
        report["text_in_refusal"] = refusal
    for kind in weights:
        sizes = litert_model.write(files[kind], directory)
        (translations, scores), (ids, _) = _run_litert(
            {"model": os.path.join(directory, litert_model.TRANSLATE_FILE)} | request,
            {"model": os.path.join(directory, litert_model.SEARCH_FILE),
             "source_ids": source_ids.tolist()})
        found = {"sizes": sizes, "custom_ops": litert_model.custom_ops(
            files[kind][litert_model.TRANSLATE_FILE])}
        if kind == "float32":
            _require(translations == expected, f"litert/{litert_model.TRANSLATE_FILE} translated "
                                               "differently from the SavedModel")
            _require(np.array_equal(ids, expected_ids), f"litert/{litert_model.SEARCH_FILE} "
                                                        "searched differently from TensorFlow")
            found["max_score_difference"] = float(np.abs(scores - expected_scores).max())
        else:
            found["translate_agreement"] = _agreement(translations, expected)
            found["search_agreement"] = _agreement(list(ids), list(expected_ids))
        report[kind] = found
    return report


def _saved_model_translations(translate, runs):
    """The text SavedModel's `translate` function's (run in this process)
    n-best translations and scores of the check sentences, for each
    `(beam_size, alpha, decode_margin)` of `runs`."""
    found = []
    for beam_size, alpha, decode_margin in runs:
        output = translate(tf.constant(list(CHECK_SENTENCES)), tf.constant(beam_size),
                           tf.constant(float(alpha)), tf.constant(decode_margin))
        found.append(([[text.decode() for text in row] for row in output["translations"].numpy()],
                      output["scores"].numpy()))
    return found


CHECK_SECONDS = 900
"""How long a check process may take before the export fails."""


def _run_checker(arguments, request, what):
    """A runner script's `--json` answer to `request`, from a process of its
    own (Python with `arguments`); a one-line `ValueError` naming `what`
    when that process fails or hangs."""
    try:
        done = subprocess.run([sys.executable, *arguments], input=json.dumps(request),
                              capture_output=True, text=True, timeout=CHECK_SECONDS)
    except subprocess.TimeoutExpired:
        raise ValueError(f"Export check failed: {what} did not finish in {CHECK_SECONDS} s.") \
            from None
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["no output"]
        raise ValueError(f"Export check failed: {what} did not run: {lines[-1]}")
    return json.loads(done.stdout)


def _run_litert(*runs):
    """`translate_litert.py --json` on the `runs` (dicts of the file's path
    and its input) in a process of its own: for each, the translations (or
    target ids) and the scores."""
    output = _run_checker([LITERT_SCRIPT, "--json"], {"runs": list(runs)}, "the LiteRT files")
    _require("keras_transformer" not in output["loaded"],
             "the check of the LiteRT files loaded keras_transformer")
    return [(result["translations"] if "translations" in result
             else np.array(result["target_ids"]), np.array(result["scores"], np.float32))
            for result in output["results"]]


TRANSLATE_CHECKS = ({"beam_size": 1}, {"alpha": 0.0})
"""translate.onnx's settings whose translations must be the SavedModel's."""


def _served_translations(translate, config):
    """The best translations of the check sentences by the text SavedModel's
    `translate` function (run in this process), for each of
    `TRANSLATE_CHECKS`; `config` gives the settings they leave alone."""
    runs = []
    for settings in TRANSLATE_CHECKS:
        values = {"beam_size": config.beam_size, "alpha": float(config.length_penalty),
                  "decode_margin": config.decode_margin} | settings
        runs.append((values["beam_size"], values["alpha"], values["decode_margin"]))
    return [[row[0] for row in texts] for texts, _ in _saved_model_translations(translate, runs)]


def _run_onnx(directory, inputs, translate):
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
        path = os.path.join(directory, onnx_text.FILE)
        output = _run_checker([TRANSLATE_SCRIPT, path, "--json"], request, "translate.onnx")
        translations = [run["translations"] for run in output["results"]]
        translations = [[row[0] for row in run] for run in translations]
    return logits, tokens, translations


def _agreement(values, expected):
    """The fraction of items equal to the expected ones."""
    return float(np.mean([np.array_equal(a, b) for a, b in zip(values, expected)]))


def _require(ok, message):
    if not ok:
        raise ValueError(f"Export check failed: {message}.")
