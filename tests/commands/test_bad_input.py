"""Bad input through the library's entry points: random bytes and Unicode
through the `Translator`, the text SavedModel and the `OnnxTranslator`
(property-based, with hypothesis), truncation warnings, and damaged files
named in one-line errors."""

import shutil
import warnings

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from keras_transformer.decoding import Translator
from keras_transformer.runtimes.onnx_runner import OnnxTranslator
from keras_transformer.textfiles import TruncationWarning
from keras_transformer.training.checkpoints import average_checkpoints, latest_step

# Any Unicode text, with the characters that break naive code mixed in:
# lone surrogates (what Python makes of undecodable bytes), NUL, BOM, line
# breaks; and any bytes, valid UTF-8 or not. Up to 80 characters exceeds
# the small model's 23 tokens, so truncation is exercised too.
AWKWARD = st.sampled_from(["\ud800", "\udcff", "\x00", "\ufeff", "\r", "\n", "\t", " ", "\ufffd"])
SENTENCE = st.one_of(st.text(st.one_of(st.characters(), AWKWARD), max_size=80),
                     st.binary(max_size=80))
BATCHES = st.lists(SENTENCE, min_size=1, max_size=5)
# Few examples, always the same ones: the test is deterministic in CI.
PROPERTY = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _as_bytes(sentence):
    """What a client sends the SavedModel: UTF-8 bytes, or the bytes as they were."""
    return sentence if isinstance(sentence, bytes) else sentence.encode("utf-8", "surrogatepass")


@pytest.mark.slow
def test_every_runtime_translates_any_input_one_result_each(small_run, small_export):
    translator = Translator.from_directory(str(small_run))
    served = tf.saved_model.load(str(small_export / "saved_model")).signatures["serving_default"]
    onnx = OnnxTranslator(str(small_export / "onnx"))

    @PROPERTY
    @given(BATCHES)
    # Random examples start small; these are the cases that broke commands.
    @example([b"Das Haus ist gro\xdf.", b"\xff\xfe\x00", "Stra\udcdfe", "\ud800", "Haus\x00Baum",
              "\ufeffHaus\r\n"])
    @example(["", "   ", "\n", "Haus Baum groß " * 1000])
    def check(sentences):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncationWarning)
            results = {
                "Translator": translator.translate(sentences),
                "SavedModel": [t.decode("utf-8") for t in served(
                    text=tf.constant([_as_bytes(s) for s in sentences]))["translations"].numpy()],
                "OnnxTranslator": onnx.translate(sentences),
            }
        for name, translations in results.items():
            assert len(translations) == len(sentences), name
            assert all(isinstance(t, str) for t in translations), name
        # The SavedModel serves the Translator's graph: the same repairs,
        # the same translations.
        assert results["SavedModel"] == results["Translator"]

    check()


@pytest.mark.slow
def test_both_python_translators_name_the_sentences_they_cut(small_run, small_export):
    sentences = ["Haus", " ".join(["Haus Baum groß"] * 20), "", "klein " * 40]
    for translator in (Translator.from_directory(str(small_run)),
                       OnnxTranslator(str(small_export / "onnx"))):
        with pytest.warns(TruncationWarning, match=r"2 sentence\(s\) \(1, 3, counted from 0\) are "
                                                   r"longer than the model's 23 tokens"):
            assert len(translator.translate(sentences)) == 4
    strict = Translator.from_directory(str(small_run), overlong="error")
    with pytest.raises(ValueError, match=r"Sentence\(s\) \[1, 3\] are longer"):
        strict.translate(sentences)


def test_translator_settings_below_their_least_are_refused(small_run):
    for name, value in (("batch_tokens", 0), ("batch_size", -1), ("in_flight", 0)):
        with pytest.raises(ValueError, match=f"^{name} must be >= 1; got {value}.$"):
            Translator.from_directory(str(small_run), **{name: value})


def test_damaged_run_and_export_files_are_named(small_run, small_export, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere is not a folder; give a training run"):
        Translator.from_directory(str(tmp_path / "nowhere"))
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    (run / "tokenizer.model").write_bytes(b"")
    with pytest.raises(ValueError, match="Not a SentencePiece model: .*tokenizer.model"):
        Translator.from_directory(str(run))
    (run / "tokenizer.model").unlink()
    (run / "tokenizer.model").mkdir()
    with pytest.raises(ValueError, match="Cannot read the tokenizer model .*tokenizer.model"):
        Translator.from_directory(str(run))

    for damaged in ("ckpt-0.index", "ckpt-0.data-00000-of-00001"):
        shutil.copy(small_run / "checkpoints" / damaged, tmp_path / "kept")
        (run / "checkpoints" / damaged).write_bytes(b"")
        with pytest.raises(ValueError, match="Cannot resume from the checkpoint .*ckpt-0 .*damaged"):
            latest_step(str(run / "checkpoints"))
        shutil.copy(tmp_path / "kept", run / "checkpoints" / damaged)
    # A run trained on JAX or PyTorch: safetensors checkpoints.
    safetensors = tmp_path / "safetensors"
    safetensors.mkdir()
    (safetensors / "ckpt-7.safetensors").write_bytes(b"\x00garbage")
    assert latest_step(str(safetensors)) == 7
    model = Translator.from_directory(str(small_run)).model
    with pytest.raises(ValueError, match="Cannot read checkpoint .*ckpt-7.safetensors.* damaged"):
        average_checkpoints(model, [str(safetensors / "ckpt-7.safetensors")])

    onnx = tmp_path / "onnx"
    shutil.copytree(small_export / "onnx", onnx)
    (onnx / "config.json").write_text('{"num_heads": 4')
    with pytest.raises(ValueError, match="onnx/config.json is not valid JSON"):
        OnnxTranslator(str(onnx))
    shutil.copy(small_export / "onnx" / "config.json", onnx / "config.json")
    (onnx / "decoder_step.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="Cannot load .*decoder_step.onnx: .*export the model again"):
        OnnxTranslator(str(onnx))
    (onnx / "decoder_step.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="decoder_step.onnx does not exist"):
        OnnxTranslator(str(onnx))
    shutil.copy(small_export / "onnx" / "decoder_step.onnx", onnx / "decoder_step.onnx")
    (onnx / "search_step.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="Cannot load .*search_step.onnx: .*export the model again"):
        OnnxTranslator(str(onnx))
    shutil.copy(small_export / "onnx" / "search_step.onnx", onnx / "search_step.onnx")
    # An export of an earlier version, whose encoder took `source_ids` alone.
    shutil.copy(small_export / "onnx" / "forward.onnx", onnx / "encoder.onnx")
    with pytest.raises(ValueError, match="ONNX graphs of an earlier version .* export the model again"):
        OnnxTranslator(str(onnx))
    shutil.copy(small_export / "onnx" / "encoder.onnx", onnx / "encoder.onnx")
    (onnx / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="Cannot load the tokenizer model .*tokenizer.model"):
        OnnxTranslator(str(onnx))
