"""Serving formats (TensorFlow, tf2onnx, onnxruntime).

- `export_run`: a training output folder -> .keras, SavedModels, ONNX,
  each checked against the in-process model before it is moved into place.
- `saved_model.ServingModule`: the functions the SavedModels serve.
- `onnx_graphs.export`: forward, encoder and decoder-step ONNX graphs.
- `OnnxSearch`, `OnnxTranslator`: greedy and beam search over those graphs
  with onnxruntime and NumPy, and text in / text out with sentencepiece.
"""

from keras_transformer.export.exporter import FORMATS, export_run, load_for_export
from keras_transformer.export.onnx_runner import OnnxSearch, OnnxTranslator

__all__ = ["FORMATS", "OnnxSearch", "OnnxTranslator", "export_run", "load_for_export"]
