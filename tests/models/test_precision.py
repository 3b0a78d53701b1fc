"""Decoding in reduced precision: `models.in_precision`, the Translator's
`precision`, and SavedModels exported with `precision="bfloat16"`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.bfloat16 import needs_bfloat16
from keras_transformer import run_folder
from keras_transformer.decoding import Translator, greedy_search
from keras_transformer.export import export_run, saved_model
from keras_transformer.export.saved_model import LOGIT_TOLERANCE, ServingModule
from keras_transformer.models import in_precision

SENTENCES = ["das Haus ist groß.", "der Baum war hier und dort.", "ein Haus.", ""]


@needs_bfloat16
def test_in_precision_casts_the_weights_once_and_keeps_float32_logits(small_run):
    model = run_folder.load_transformer(str(small_run / "model.keras"))
    assert in_precision(model, "float32") is model
    half = in_precision(model, "bfloat16")
    assert {w.dtype for w in half.weights} == {"bfloat16"}
    for ours, theirs in zip(half.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(ours, theirs.astype(ours.dtype))  # bfloat16 rounding only
    rng = np.random.default_rng(0)
    inputs = {"source_ids": rng.integers(4, 60, (3, 7)).astype("int32"),
              "target_ids": rng.integers(4, 60, (3, 5)).astype("int32")}
    full, reduced = model(inputs).numpy(), half(inputs)
    assert reduced.dtype == "float32"
    # bfloat16 keeps 8 bits of mantissa: logits agree to a few hundredths,
    # within what the export check allows.
    scale = np.abs(full).max()
    assert np.abs(reduced.numpy() - full).max() < LOGIT_TOLERANCE["bfloat16"] * scale
    with pytest.raises(ValueError, match="precision must be one of"):
        in_precision(model, "int8")
    translator = Translator(model, run_folder.load_tokenizer(str(small_run)), precision="bfloat16")
    assert translator.model.compute_dtype == "bfloat16"


@pytest.mark.slow
@needs_bfloat16
def test_bfloat16_search_mostly_agrees_with_float32(small_run):
    model = run_folder.load_transformer(str(small_run / "model.keras"))
    rng = np.random.default_rng(1)
    source = rng.integers(4, 60, (32, 9)).astype("int32")
    source[:, -1] = 3
    full = greedy_search(model, source).tokens.numpy()
    half = greedy_search(in_precision(model, "bfloat16"), source).tokens.numpy()
    same = np.mean([np.array_equal(a, b) for a, b in zip(full, half)])
    assert same >= 0.75, same  # rounding flips a near-tie now and then, not more


@pytest.mark.slow
@needs_bfloat16
def test_a_bfloat16_export_serves_what_its_graph_computes_in_process(small_run, tmp_path):
    output = tmp_path / "export"
    # export_run itself checks, before moving the SavedModels into place,
    # that each signature loaded back gives what it gave in process, and
    # that the logits are the float32 model's within bfloat16's tolerance;
    # here the result is checked again from outside.
    report = export_run(str(small_run), str(output), formats=["saved_model"],
                        precision="bfloat16")["formats"]["saved_model"]
    assert report["precision"] == "bfloat16"
    assert 0 < report["relative_logit_difference"] <= LOGIT_TOLERANCE["bfloat16"]
    assert 0 <= report["translator_agreement"] <= 1
    stored = tf.train.load_checkpoint(str(output / "saved_model" / "variables" / "variables"))
    dtypes = {dtype for name, dtype in stored.get_variable_to_dtype_map().items()
              if "VARIABLE_VALUE" in name}
    assert dtypes == {tf.bfloat16}, dtypes
    model = in_precision(run_folder.load_transformer(str(small_run / "model.keras")), "bfloat16")
    module = ServingModule(model, run_folder.load_tokenizer(str(small_run)))
    loaded = tf.saved_model.load(str(output / "saved_model"))
    served = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))
    expected = module.serving_default(tf.constant(SENTENCES))
    for key in ("translations", "scores"):
        np.testing.assert_array_equal(served[key].numpy(), expected[key].numpy())
    with pytest.raises(ValueError, match="precision must be one of"):
        export_run(str(small_run), str(tmp_path / "other"), precision="int4")
    assert not (tmp_path / "other").exists()
    keras.backend.clear_session()


@pytest.mark.slow
@needs_bfloat16
def test_a_reduced_precision_export_of_other_weights_is_refused(small_run, tmp_path, monkeypatch):
    def wrong(model, precision):  # the right precision, one weight matrix reversed
        copy = in_precision(model, precision)
        kernel = copy.get_layer("encoder_layer_0").weights[0]
        kernel.assign(kernel[::-1])
        return copy

    def save(*args):
        raise AssertionError("a SavedModel was written before the check")

    monkeypatch.setattr(saved_model, "in_precision", wrong)
    monkeypatch.setattr(saved_model.ServingModule, "save", save)
    with pytest.raises(ValueError, match="logits are .* away from the float32 model's"):
        export_run(str(small_run), str(tmp_path / "export"), formats=["saved_model"],
                   precision="bfloat16")
    assert not (tmp_path / "export").exists()
