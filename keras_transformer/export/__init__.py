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

Each name is imported on first use, from the module that defines it, so
that the runners load no TensorFlow and `formats` (what `keras-transformer
export` offers) loads nothing.
"""

import importlib

# Names imported on first use, and the modules that define them.
_LAZY = {
    "CTranslate2Translator": "ctranslate2_translator",
    "DEFAULT_FORMATS": "formats",
    "FORMATS": "formats",
    "OnnxSearch": "onnx_runner",
    "OnnxTranslator": "onnx_runner",
    "QUANTIZATIONS": "formats",
    "export_run": "exporter",
    "load_for_export": "exporter",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    """Imports a name's module when the name is first used."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
