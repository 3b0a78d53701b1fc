"""What can translate a folder, without TensorFlow at import: a run folder
(a training run, or a model brought in by `keras-transformer import`)
through the `Translator`, and an export folder through its SavedModel,
CTranslate2, ONNX or LiteRT runtime. `keras-transformer serve`,
`translate --runtime` and `translate-corpus` open their model here, so that
each takes either kind of folder, and says in one line what to run where a
runtime cannot.

| runtime | reads | needs | module |
|---|---|---|---|
| keras | a run folder (averaged.keras, else model.keras), or an export's model.keras | TensorFlow | `tensorflow_runtimes` |
| saved_model | an export's saved_model/ (text in, text out) | TensorFlow, tensorflow-text | `tensorflow_runtimes` |
| ctranslate2 | an export's ctranslate2/ (`--formats ctranslate2`) | ctranslate2 | `ctranslate2_runner` |
| onnx | an export's onnx/ (encoder and decoder-step graphs, the search in NumPy) | onnxruntime | `onnx_runner` |
| litert | an export's litert/translate.tflite (`--formats litert`), the search in the file | ai-edge-litert (or TensorFlow's LiteRT interpreter), tensorflow-text's kernels | `litert_runner` |

`runtime` holds the interface (`Runtime`, `Decoding`, `open_runtime`); each
runtime's module is imported when it is opened. `translate_onnx.py` and
`translate_litert.py` also run as scripts that import nothing of this
package, next to a copied model file.
"""

from keras_transformer.names import RUNTIMES
from keras_transformer.runtimes.runtime import (
    Decoding,
    Runtime,
    check_runtime,
    default_runtime,
    open_runtime,
    split_by_tokens,
    translate_sorted,
)

__all__ = [
    "RUNTIMES",
    "Decoding",
    "Runtime",
    "check_runtime",
    "default_runtime",
    "open_runtime",
    "split_by_tokens",
    "translate_sorted",
]
