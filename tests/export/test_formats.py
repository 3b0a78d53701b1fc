"""Each format of the registry is written and checked by `export_run` on
the small run, and translates as the model does through its runtime; a
format refuses what it cannot store in one line, before anything is
loaded. The exports are the session's shared ones (`small_export`,
`small_ct2`): other tests read them too, and each format written alone
is tested where it is written (test_export.py, test_onnx_beam_search.py,
test_precision.py, test_ctranslate2_export.py, test_litert_export.py)."""

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


@pytest.fixture
def exported(request, small_run, tmp_path):
    """The format `request.param` and the small run's export folder holding
    it: the shared default export for keras, saved_model and onnx, the
    shared CTranslate2 one, or LiteRT's written here (no other test exports
    the small run to float32 LiteRT)."""
    name = request.param
    if name in names.DEFAULT_FORMATS:
        return name, request.getfixturevalue("small_export")
    if name == "ctranslate2":
        return name, request.getfixturevalue("small_ct2")[0]
    with warnings.catch_warnings():  # LiteRT's: the small run's BPE file takes ids
        warnings.simplefilter("ignore")
        export_run(str(small_run), str(tmp_path / "export"), formats=[name])
    return name, tmp_path / "export"


# The default export writes the SavedModels (slow): the quick tier has the others.
@pytest.mark.parametrize("exported", [
    pytest.param(name, marks=pytest.mark.slow) if name in names.DEFAULT_FORMATS else name
    for name in names.FORMATS], indirect=True)
def test_each_format_writes_checks_and_translates_as_the_model(exported, small_run):
    name, folder = exported
    assert FORMATS[name].name == name and name in run_folder.export_report(folder)["formats"]
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
