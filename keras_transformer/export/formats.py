"""What an export may hold, and how it may store its weights. Plain Python,
so that `keras-transformer export` offers these as choices, and answers
`--help`, without importing TensorFlow."""

FORMATS = ("keras", "saved_model", "onnx", "ctranslate2", "litert")
DEFAULT_FORMATS = ("keras", "saved_model", "onnx")
"""What `export_run` writes unless told: CTranslate2 is an optional
dependency, and LiteRT's conversion takes about a minute."""
QUANTIZATIONS = ("float32", "int8", "float16")
"""How an export may store its weights (`export_run(quantization=...)`):
int8 for ONNX, CTranslate2 and LiteRT, float16 for LiteRT only."""
