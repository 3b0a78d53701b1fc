"""translate.onnx (the tokenizer and onnxruntime's BeamSearch operator in one
ONNX file), run in fresh processes that import neither TensorFlow nor
keras_transformer, against the text SavedModel's search: greedy and
alpha = 0 beam search must give the same translations and scores, for our
tokenizer and an imported Marian model (whose int8 export must load and
translate)."""

import json
import subprocess
import sys

import keras
import numpy as np
import onnx
import pytest
import tensorflow as tf

from helpers.processes import TRANSLATE_ONNX_PROCESS
from keras_transformer.data import Tokenizer
from keras_transformer.export import export_run, saved_model
from keras_transformer.export.onnx import text as onnx_text
from keras_transformer.export.onnx.format import TRANSLATE_SCRIPT
from keras_transformer.runtimes.onnx_runner import OnnxTranslator
from keras_transformer.pretrained import from_preset, save_run

# The demo's sentences, sentences of the small run's words, blank ones and
# one longer than the model accepts (cut to its length).
pytestmark = pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
SENTENCES = ["Guten Morgen!", "Wo ist der Bahnhof?", "Ich habe keine Zeit.",
             "Das Wetter ist heute schön.", "Er hat seinen Schlüssel verloren.",
             "Kannst du mir bitte helfen?", "", "  ", "Das Haus ist groß.",
             "der Baum und das Haus", "Hier war ein Haus nicht klein.",
             " ".join(["Haus Baum groß"] * 12)]
# Where onnxruntime's rules are ours: greedy (any alpha: the scores are
# rescored with ours) and beam search with alpha = 0, with n-best lists and
# a decode margin small enough that sentences end at their limit.
AGREEING = [{"beam_size": 1}, {"beam_size": 4, "alpha": 0.0, "n_best": 4},
            {"beam_size": 3, "alpha": 0.0, "n_best": 2, "decode_margin": 2}]


def _translate_fresh(path, sentences, settings, batches=None):
    """Runs translate.onnx in a new process with only onnxruntime and
    onnxruntime-extensions (the README's snippet); returns, per settings
    dict, the translations and scores of `sentences` translated in one
    batch, or of every batch of the list `batches` in turn."""
    request = json.dumps({"path": str(path), "batches": batches or [sentences],
                          "settings": settings})
    output = subprocess.run([sys.executable, "-c", TRANSLATE_ONNX_PROCESS], input=request,
                            capture_output=True, text=True, check=True, timeout=300)
    result = json.loads(output.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    return result["runs"]


def _assert_agrees(path, model, tokenizer, sentences, more=()):
    """translate.onnx gives what the text SavedModel's `translate` function
    (here in process, one trace for all settings) gives, for `AGREEING`;
    returns its runs of the `more` settings."""
    translate = saved_model.ServingModule(model, tokenizer).translate
    config = model.config
    runs = _translate_fresh(path, sentences, AGREEING + list(more))
    for settings, run in zip(AGREEING, runs):
        values = {"beam_size": config.beam_size, "alpha": float(config.length_penalty),
                  "decode_margin": config.decode_margin, "n_best": 1} | settings
        served = translate(tf.constant(sentences), tf.constant(values["beam_size"]),
                           tf.constant(values["alpha"]), tf.constant(values["decode_margin"]))
        n_best = values["n_best"]
        texts = [[text.decode() for text in row[:n_best]] for row in served["translations"].numpy()]
        assert run["translations"] == texts, settings
        np.testing.assert_allclose(run["scores"], served["scores"].numpy()[:, :n_best], atol=1e-4)
    return runs[len(AGREEING):]


@pytest.mark.slow
def test_translate_onnx_translates_as_the_saved_model_where_the_rules_agree(small_run, small_export):
    report = json.loads((small_export / "export.json").read_text())
    assert report["formats"]["onnx"]["translate"]["checked"]
    assert report["formats"]["onnx"]["translate"]["greedy_matches"]
    model = keras.models.load_model(small_run / "model.keras", safe_mode=True)
    tokenizer = Tokenizer(str(small_run / "tokenizer.model"))
    # The defaults are the model's: beam 4, alpha 0.6 (onnxruntime's length
    # rule may keep other hypotheses than ours, so only the form is checked).
    default, = _assert_agrees(small_export / "onnx" / "translate.onnx", model, tokenizer,
                              SENTENCES, more=[{}])
    assert np.shape(default["translations"]) == (len(SENTENCES), 1)


def test_translate_onnx_py_loads_no_converter_of_onnxruntime_extensions(small_export):
    """translate_onnx.py (the exporter's check and the user's script) loads
    the extensions' op library without their package, whose converters
    import transformers and PyTorch (installed here): they took 4.5 s of
    its 5 s start. It prints nothing but its answer."""
    done = subprocess.run(
        [sys.executable, TRANSLATE_SCRIPT, str(small_export / "onnx" / onnx_text.FILE), "--json"],
        input=json.dumps({"sentences": SENTENCES[:2], "settings": [{"beam_size": 1}]}),
        capture_output=True, text=True, check=True, timeout=300)
    output = json.loads(done.stdout)
    assert output["loaded"] == [] and done.stderr == ""
    assert [len(row) for row in output["results"][0]["translations"]] == [1, 1]


MARIAN_SENTENCES = ["Der Hund sieht einen roten Apfel.", ">>fra<< Der König liest", "",
                    "  Mein Bruder braucht 3 Flaschen Wasser.  "]
# Sentences of the Marian fixture's words and of very different lengths,
# each translated alone and in batches of others.
INT8_SENTENCES = ["Der König liest.", "Die Katze schließt das Buch.", "Der Hund",
                  "Mein Bruder sieht einen roten Apfel und die Katze liest das Buch.",
                  "Wasser", "Der Hund sieht einen roten Apfel.", "Die Katze braucht Wasser."]
INT8_BATCHES = ([[sentence] for sentence in INT8_SENTENCES] + [INT8_SENTENCES]
                + [INT8_SENTENCES[::-1], INT8_SENTENCES[:2], INT8_SENTENCES[2:5], INT8_SENTENCES[5:]])


@pytest.mark.slow
def test_an_imported_marian_model_exports_translate_onnx_in_float32_and_int8(hf_models, tmp_path):
    folder, _, _ = hf_models.marian(language_codes=True)
    model, tokenizer = from_preset(str(folder))
    save_run(model, tokenizer, str(tmp_path / "run"))
    report = export_run(str(tmp_path / "run"), str(tmp_path / "export"), formats=["onnx"],
                        quantization="int8")
    assert report["quantization"] == "int8"
    report = report["formats"]["onnx"]
    # Before quantizing, the exporter ran the float32 translate.onnx in a
    # fresh process: its greedy and alpha 0 beam translations of its check
    # sentences (one with a language code) are the SavedModel's.
    assert report["translate"]["greedy_matches"] and report["translate"]["beam_alpha_0_matches"]
    assert 0 <= report["int8"]["translate_agreement"] <= 1
    folder = tmp_path / "export" / "onnx"
    nodes = onnx.load(folder / onnx_text.FILE).graph.node
    search = next(node for node in nodes if node.op_type == "BeamSearch")
    subgraphs = [attribute.g for attribute in search.attribute if attribute.type == attribute.GRAPH]
    # The step graphs too (a lone sentence, and a batch), measured against
    # their float32 search.
    assert 0 <= report["int8"]["lone_tokens_agreement"] <= 1
    assert 0 <= report["int8"]["batch_tokens_agreement"] <= 1
    assert report["lone_tokens_match"] and report["batch_tokens_match"]
    for graph in subgraphs + [onnx.load(folder / name).graph
                              for name in ("decoder_step.onnx", "search_step.onnx")]:
        assert any(tensor.data_type == onnx.TensorProto.INT8 for tensor in graph.initializer)
    # One process: MARIAN_SENTENCES, then the batches of INT8_BATCHES, greedy
    # and with the file's defaults.
    runs = _translate_fresh(folder / onnx_text.FILE, None, [{"beam_size": 1}, {}],
                            batches=[MARIAN_SENTENCES] + INT8_BATCHES)
    translations = runs[0]["translations"][:len(MARIAN_SENTENCES)]
    assert [len(row) for row in translations] == [1] * 4 and translations[2] == [""]
    assert all(row[0] for i, row in enumerate(translations) if i != 2)
    # The file's own command line, as a user runs it.
    printed = subprocess.run([sys.executable, TRANSLATE_SCRIPT, str(folder / onnx_text.FILE),
                              "--beam-size", "1", *MARIAN_SENTENCES[:2]],
                             capture_output=True, text=True, check=True, timeout=300).stdout
    assert printed.splitlines() == [row[0] for row in translations[:2]]
    # A sentence's int8 translation does not depend on its batch.
    for batched in runs:
        _assert_batch_independent(INT8_BATCHES, [row[0] for row in batched["translations"]
                                                 [len(MARIAN_SENTENCES):]])
    translator = OnnxTranslator(str(folder))
    _assert_batch_independent(INT8_BATCHES, [text for batch in INT8_BATCHES
                                             for text in translator.translate(batch)])


def _assert_batch_independent(batches, translations):
    """Every sentence of `batches` (translated batch by batch into the flat
    list `translations`) got one translation wherever it was."""
    found = {}
    for sentence, translation in zip([s for batch in batches for s in batch], translations):
        found.setdefault(sentence, set()).add(translation)
    assert all(len(texts) == 1 for texts in found.values()), found


def test_tokenizers_that_are_not_graph_ops_get_no_translate_onnx(tmp_path):
    from helpers.fsmt_files import write_fsmt_tokenizer_files
    from keras_transformer.pretrained.fsmt_tokenizer import FsmtTokenizer

    tokenizer = FsmtTokenizer.from_directory(write_fsmt_tokenizer_files(tmp_path).directory)
    assert not onnx_text.supports(tokenizer)
    with pytest.raises(ValueError, match="cannot be ONNX ops"):
        onnx_text.translate_model(None, tokenizer)
