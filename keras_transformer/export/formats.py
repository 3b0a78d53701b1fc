"""What an export may hold, and how it may store its weights. Plain Python,
so that `keras-transformer export` offers these as choices, and answers
`--help`, without importing TensorFlow."""

FORMATS = ("keras", "saved_model", "onnx", "ctranslate2")
DEFAULT_FORMATS = ("keras", "saved_model", "onnx")
"""What `export_run` writes unless told: CTranslate2 is an optional dependency."""
QUANTIZATIONS = ("float32", "int8")
"""How the weights of an export may be stored (`export_run(quantization=...)`)."""
