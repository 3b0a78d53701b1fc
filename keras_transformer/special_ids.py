"""The special token ids shared by the model, the tokenizer, the searches and
the onnxruntime runner. Plain Python, so that the runner imports them without
TensorFlow or Keras."""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
"""0 pads (the model masks it), 1 is unknown, 2 starts and 3 ends a sentence."""
