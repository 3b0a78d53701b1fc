"""Export: the SavedModels in fresh processes, ONNX against Keras and the
TensorFlow search, and inputs that must leave nothing half-written."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import processes
from helpers.processes import FRESH_TEXT_PROCESS, ONNX_ONLY_PROCESS
from helpers.small_run import CONFIG
from keras_transformer.data import Tokenizer
from keras_transformer.decoding import Translator, beam_search, greedy_search
from keras_transformer.export import export_run
from keras_transformer.export.onnx import graphs as onnx_graphs
from keras_transformer.runtimes.onnx_runner import OnnxSearch, OnnxTranslator

# The last sentence is cut to the model's length on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
SENTENCES = ["", "Das Haus ist groß.", "der Baum und das Haus", "Hier war ein Haus nicht klein.",
             " ".join(["Haus Baum groß"] * 12)]


@pytest.fixture(scope="module")
def run_dir(small_run):
    """A training output folder: tokenizer, config, model.keras, a checkpoint."""
    return small_run


@pytest.fixture(scope="module")
def exported(small_export):
    return small_export


FRESH_CORE_PROCESS = """
import json, sys
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
result = model.signatures["search_ids"](source_ids=tf.constant(json.loads(sys.argv[2]), tf.int32),
    beam_size=tf.constant(4), alpha=tf.constant(0.6), decode_margin=tf.constant(6))
assert "tensorflow_text" not in sys.modules
print(json.dumps(result["target_ids"].numpy().tolist()))
"""

# The core SavedModel searches before anything imports tensorflow_text (it
# must not need it); then, in the same process, the text SavedModel
# translates: one TensorFlow start for both.
FRESH_CORE_THEN_TEXT_PROCESS = FRESH_CORE_PROCESS + """
sys.argv[1:] = sys.argv[3:]
""" + FRESH_TEXT_PROCESS


def _sources(tokenizer, sentences=SENTENCES[1:4]):
    ids = tokenizer.tokenize(tf.constant(sentences))
    return tf.concat([ids, tf.fill([ids.nrows(), 1], 3)], axis=1).to_tensor().numpy()


@pytest.fixture(scope="module")
def fresh_process(exported, run_dir):
    """What the two SavedModels gave in a fresh process (without this
    package): the source ids of `_sources`, the core one's `search_ids`
    target ids for them, and `FRESH_TEXT_PROCESS`'s translations."""
    source = _sources(Tokenizer(str(run_dir / "tokenizer.model")))
    output = subprocess.run(
        [sys.executable, "-c", FRESH_CORE_THEN_TEXT_PROCESS, str(exported / "saved_model_core"),
         json.dumps(source.tolist()), str(exported / "saved_model"), json.dumps(SENTENCES)],
        capture_output=True, text=True, env=processes.environment(), check=True, timeout=300)
    core, text = output.stdout.strip().splitlines()[-2:]
    return source, np.array(json.loads(core)), json.loads(text)


@pytest.fixture
def reference(run_dir):
    model = keras.models.load_model(run_dir / "model.keras", safe_mode=True)
    return model, Tokenizer(str(run_dir / "tokenizer.model"))


@pytest.mark.slow
def test_saved_model_in_a_fresh_process_translates_like_the_translator(fresh_process, reference):
    _, _, served = fresh_process
    model, tokenizer = reference
    expected = Translator(model, tokenizer, guard=False).translate(SENTENCES)
    assert served["default"] == expected
    assert len(set(expected)) > 2 and expected[0] == ""
    n_best = Translator(model, tokenizer, beam_size=3, guard=False).translate(SENTENCES, n_best=3)
    assert served["n_best"] == [[text for text, _ in row] for row in n_best]


@pytest.mark.slow
def test_core_saved_model_needs_no_tf_text(fresh_process, reference):
    source, served, _ = fresh_process
    model, _ = reference
    np.testing.assert_array_equal(served, beam_search(model, source).tokens.numpy())


@pytest.mark.slow
def test_saved_model_searches_drop_finished_sentences(reference, monkeypatch):
    """`search_ids`, `translate` and `serving_default` trace the searches
    that move finished sentences out of the batch (TensorFlow Serving
    batches requests of mixed lengths)."""
    from keras_transformer.decoding import search
    from keras_transformer.export.saved_model import ServingModule

    traced = []
    drop_done = search._drop_done
    monkeypatch.setattr(search, "_drop_done", lambda *args: traced.append(1) or drop_done(*args))
    for name in ("search_ids", "translate", "serving_default"):
        before = len(traced)
        # A module of its own for each: serving_default calls translate's
        # trace, which a module traces once.
        getattr(ServingModule(*reference), name).get_concrete_function()
        assert len(traced) > before, name


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(exported):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", str(exported / "saved_model"), "--all"],
                           capture_output=True, text=True, check=True, timeout=300,
                           env=processes.environment()).stdout
    for name in ("serving_default", "translate", "translate_constrained", "search_ids", "logits",
                 "encode"):
        assert f"signature_def['{name}']" in shown


@pytest.mark.slow
def test_the_constrained_signature_translates_as_the_translator_with_a_glossary(
        exported, reference):
    """A TF Serving client gives each sentence's target phrases (a glossary's
    terms and their alternatives, as `Glossary.constraints` finds them); the
    SavedModel's best translations are the Translator's with that glossary."""
    from keras_transformer.glossary import Glossary

    model, tokenizer = reference
    glossary = Glossary.of([("Haus", "Baum"), ("klein", "oder dort")], "de")
    sentences = SENTENCES[1:4] + ["ein Baum"]
    expected = Translator(model, tokenizer).translate(sentences, glossary=glossary)
    asked = [glossary.constraints(sentence)[0] for sentence in sentences]
    width = max(sum(len(alternatives) for alternatives in each) for each in asked)
    phrases = [[text for alternatives in each for text in alternatives] for each in asked]
    owner = [[number for number, alternatives in enumerate(each) for _ in alternatives]
             for each in asked]
    signature = tf.saved_model.load(str(exported / "saved_model")).signatures[
        "translate_constrained"]
    config = model.config
    found = signature(
        text=tf.constant(sentences),
        phrases=tf.constant([row + [""] * (width - len(row)) for row in phrases]),
        owner=tf.constant([row + [-1] * (width - len(row)) for row in owner], tf.int32),
        beam_size=tf.constant(config.beam_size), alpha=tf.constant(config.length_penalty),
        decode_margin=tf.constant(config.decode_margin))
    assert [row[0].decode() for row in found["translations"].numpy()] == expected
    assert found["met"].numpy()[:, 0].all() and any(asked) and not all(asked)


def test_onnx_forward_matches_keras(exported, reference):
    import onnxruntime

    model, _ = reference
    session = onnxruntime.InferenceSession(str(exported / "onnx" / "forward.onnx"))
    rng = np.random.default_rng(0)
    for batch, source_length, target_length in [(1, 3, 1), (2, 9, 5), (5, 17, 12)]:
        source = rng.integers(4, 60, (batch, source_length)).astype("int32")
        target = rng.integers(4, 60, (batch, target_length)).astype("int32")
        source[0, -1] = 0  # some padding
        logits = session.run(None, {"source_ids": source, "target_ids": target})[0]
        expected = model({"source_ids": source, "target_ids": target}).numpy()
        assert np.abs(logits - expected).max() < 1e-4


@pytest.mark.slow
def test_onnxruntime_search_matches_the_tensorflow_search(exported, reference):
    model, tokenizer = reference
    source = _sources(tokenizer)
    runner = OnnxSearch(str(exported / "onnx"))
    greedy_tokens, _ = runner.greedy(source)
    np.testing.assert_array_equal(greedy_tokens, greedy_search(model, source).tokens.numpy())
    beam_tokens, beam_scores = runner.beam(source, beam_size=4)
    expected = beam_search(model, source, beam_size=4)
    np.testing.assert_array_equal(beam_tokens, expected.tokens.numpy())
    np.testing.assert_allclose(beam_scores, expected.scores.numpy(), atol=1e-4)
    assert OnnxTranslator(str(exported / "onnx")).translate(SENTENCES) == \
        Translator(model, tokenizer, guard=False).translate(SENTENCES)


@pytest.mark.slow
def test_onnx_translator_runs_without_tensorflow(exported, reference):
    output = subprocess.run(
        [sys.executable, "-c", ONNX_ONLY_PROCESS, str(exported / "onnx"), json.dumps(SENTENCES)],
        capture_output=True, text=True, check=True)
    result = json.loads(output.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["translations"] == Translator(*reference, guard=False).translate(SENTENCES)


@pytest.mark.slow
def test_checkpoint_export_works(run_dir, tmp_path, reference):
    checkpoint = str(run_dir / "checkpoints" / "ckpt-0")
    export_run(str(run_dir), str(tmp_path / "from_checkpoint"), formats=["keras"], checkpoint=checkpoint)
    exported = keras.models.load_model(tmp_path / "from_checkpoint" / "model.keras", safe_mode=True)
    model, _ = reference
    for a, b in zip(exported.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def _leftovers(folder):
    return [name for name in os.listdir(folder) if name.startswith(".export-")]


def test_bad_inputs_give_clear_errors_and_leave_nothing(run_dir, tmp_path):
    broken = tmp_path / "broken_run"
    broken.mkdir()
    (broken / "model.keras").write_bytes((run_dir / "model.keras").read_bytes())
    with pytest.raises(ValueError, match="No tokenizer in .*expected tokenizer.model"):
        export_run(str(broken), str(tmp_path / "out"))
    (broken / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="Not a SentencePiece model"):
        export_run(str(broken), str(tmp_path / "out"))
    (broken / "tokenizer.model").write_bytes((run_dir / "tokenizer.model").read_bytes())
    (broken / "model.keras").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="Cannot load the model"):
        export_run(str(broken), str(tmp_path / "out"))
    (broken / "config.json").write_text(CONFIG.to_json())
    bad_checkpoint = tmp_path / "ckpt-1.index"
    bad_checkpoint.write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="Cannot read checkpoint"):
        export_run(str(broken), str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt-1"))
    assert not (tmp_path / "out").exists() and not _leftovers(tmp_path)

    # An existing export is kept unless overwrite is asked for.
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("earlier export")
    with pytest.raises(FileExistsError):
        export_run(str(run_dir), str(existing), formats=["keras"])
    assert (existing / "keep.txt").read_text() == "earlier export"


def test_a_failure_while_writing_keeps_the_earlier_export(run_dir, tmp_path, monkeypatch):

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("earlier export")

    def fail(model, directory, opset=17):
        (tmp_path / "reached").write_text("yes")
        raise RuntimeError("conversion failed")

    monkeypatch.setattr(onnx_graphs, "export", fail)
    with pytest.raises(RuntimeError, match="conversion failed"):
        export_run(str(run_dir), str(existing), formats=["keras", "onnx"], overwrite=True)
    assert (tmp_path / "reached").exists()
    assert (existing / "keep.txt").read_text() == "earlier export" and not _leftovers(tmp_path)


@pytest.mark.slow
def test_without_onnxruntime_extensions_translate_onnx_is_written_and_said_unchecked(
        run_dir, exported, tmp_path, monkeypatch):
    """The core install (no onnxruntime-extensions) exports every format:
    translate.onnx, which only that package can run, is written, a warning
    names the extra, and the report says it was not checked; the other
    ONNX checks still run. (The graphs are the same run's, converted by
    `small_export`: converting them again would cost 20 CPU-s and test
    nothing this test is about; the checks run on them as on new ones.)"""
    import importlib.util

    def converted(model, directory):
        os.makedirs(directory)
        return {name: shutil.copy(exported / "onnx" / f"{name}.onnx", directory)
                for name in ("forward", "encoder", "decoder_step")}

    monkeypatch.setattr(onnx_graphs, "export", converted)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None
                        if name == "onnxruntime_extensions" else find_spec(name, *rest))
    with pytest.warns(UserWarning, match=r"translate\.onnx was written but not checked.*onnx-text"):
        report = export_run(str(run_dir), str(tmp_path / "export"), formats=["onnx"])
    onnx_report = report["formats"]["onnx"]
    assert onnx_report["translate"] == {"path": "onnx/translate.onnx", "checked": False}
    assert onnx_report["max_logit_difference"] < 1e-4 and onnx_report["beam_tokens_match"]
    assert (tmp_path / "export" / "onnx" / "translate.onnx").stat().st_size > 0
