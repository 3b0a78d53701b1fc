"""Serving formats (TensorFlow, tf2onnx, onnxruntime, CTranslate2).

- `export_run`: a training output folder -> .keras, SavedModels, ONNX,
  CTranslate2, each checked against the in-process model before it is
  moved into place.
- `saved_model.ServingModule`: the functions the SavedModels serve.
- `onnx_graphs.export`: forward, encoder and decoder-step ONNX graphs;
  `onnx_int8.quantize`: their int8 form, batch-independent.
- `OnnxSearch`, `OnnxTranslator`: greedy and beam search over those graphs
  with onnxruntime and NumPy, and text in / text out with sentencepiece.
- `ctranslate2_model.save`: the model as a CTranslate2 model (float32 or
  int8); `CTranslate2Translator`: text in / text out with it.
- `onnx_beam_search`, `onnx_text`: `translate.onnx`, one file with the
  tokenizer and onnxruntime's BeamSearch operator inside; `translate_onnx.py`
  runs it with only onnxruntime and onnxruntime-extensions.
- `litert_model`: `translate.tflite` and `search_ids.tflite`, LiteRT files
  with the beam search (and SentencePiece) inside; `translate_litert.py`
  runs them with a LiteRT interpreter and tf-text's kernels.

The exporter is imported on first use, so that the runners can be imported
without loading TensorFlow.
"""

import importlib

from keras_transformer.export.ctranslate2_translator import CTranslate2Translator
from keras_transformer.export.onnx_runner import OnnxSearch, OnnxTranslator

_EXPORTER_NAMES = ("DEFAULT_FORMATS", "FORMATS", "QUANTIZATIONS", "export_run", "load_for_export")

__all__ = ["CTranslate2Translator", "DEFAULT_FORMATS", "FORMATS", "OnnxSearch", "OnnxTranslator",
           "QUANTIZATIONS", "export_run", "load_for_export"]


def __getattr__(name):
    if name in _EXPORTER_NAMES:
        return getattr(importlib.import_module("keras_transformer.export.exporter"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
