"""Serving formats, each written and checked against the in-process model
(TensorFlow, tf2onnx, CTranslate2's converter, LiteRT's converter).

- `export_run`: a run folder -> an export folder (`exporter`), over the
  registry of formats (`exporter.FORMATS`, each an `formats.ExportFormat`):
  - `formats.KerasFormat`: model.keras;
  - `saved_model`: `ServingModule`, the functions the SavedModels serve,
    and `SavedModelFormat`;
  - `onnx`: the encoder, decoder-step and forward graphs, their int8 form,
    and translate.onnx (the tokenizer and onnxruntime's beam search inside);
  - `ctranslate2_model`: the model as a CTranslate2 model (float32 or int8);
  - `litert_model`: translate.tflite and search_ids.tflite, LiteRT files
    with the beam search (and SentencePiece) inside.
- `checks`: what every format's check compares with.

What runs the exports without TensorFlow is `keras_transformer.runtimes`.
"""

from keras_transformer.export.exporter import FORMATS, export_run, load_for_export

__all__ = ["FORMATS", "export_run", "load_for_export"]
