"""The ONNX part of an export (`format.OnnxFormat`, what the exporter calls).

- `graphs`: the encoder, decoder-step and forward graphs (tf2onnx), which
  the ONNX runtime searches with (`runtimes.onnx_runner`) and
  onnxruntime's BeamSearch operator nests;
- `int8`: their int8 form, batch-independent;
- `beam_search`, `text`: translate.onnx, one file with the tokenizer and
  onnxruntime's BeamSearch operator inside (run by
  `runtimes/translate_onnx.py` with only onnxruntime and
  onnxruntime-extensions);
- `builder`: the graph-building helpers the last two share.
"""
