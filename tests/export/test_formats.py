"""Each format of the registry writes and checks itself (`export_run` with
that format alone, on the small run), and translates as the model does
through its runtime; a format refuses what it cannot store in one line,
before anything is loaded."""

import os
import warnings

import pytest

from helpers.small_run import WORDS
from keras_transformer import names, run_folder
from keras_transformer.decoding import Translator
from keras_transformer.export import FORMATS, export_run
from keras_transformer.runtimes import Decoding, open_runtime

SENTENCES = [" ".join(WORDS[i:i + n]) for i, n in ((0, 3), (2, 7), (5, 1), (1, 6))] + [""]
"""Sentences the small run reads whole (at its length limit the runtimes'
searches may differ: docs/export.md)."""


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in ("saved_model", "keras") else name
    for name in names.FORMATS])  # the SavedModels take longest, and a quick test of export.py
# writes the keras format (test_export.py's failure while writing): the quick tier has the others
def test_each_format_writes_checks_and_translates_as_the_model(name, small_run, tmp_path):
    folder = tmp_path / "export"
    with warnings.catch_warnings():  # LiteRT's: the small run's BPE file takes ids
        warnings.simplefilter("ignore")
        report = export_run(str(small_run), str(folder), formats=[name])
    assert FORMATS[name].name == name and list(report["formats"]) == [name]
    assert run_folder.folder_kind(folder) == "export"
    assert os.path.exists(run_folder.export_part(folder, name))
    # The exports' engines search without the Translator's guard.
    expected = Translator.from_directory(small_run, guard=False).translate(SENTENCES)
    runtime = open_runtime(str(folder), name, Decoding(guard=False))
    assert [row[0][0] for row in runtime.translate(SENTENCES)] == expected


def test_a_quantization_a_chosen_format_cannot_store_is_refused_before_loading(tmp_path):
    missing = tmp_path / "no-run"  # never read: the refusal comes first
    with pytest.raises(ValueError, match="float16 weights are for the litert format only"):
        export_run(str(missing), str(tmp_path / "export"), formats=["onnx", "litert"],
                   quantization="float16")
    with pytest.raises(ValueError, match="int8 weights are for the onnx, ctranslate2, litert"):
        export_run(str(missing), str(tmp_path / "export"), formats=["keras"], quantization="int8")
    with pytest.raises(ValueError, match=r"Unknown export format\(s\) \['tflite'\]"):
        export_run(str(missing), str(tmp_path / "export"), formats=["tflite"])
    assert not (tmp_path / "export").exists()
