"""The names the package offers as choices, spelled once.

Plain Python: the commands offer these in `--help` and check them while
parsing, before TensorFlow is imported, and the library modules that act
on them validate against the same tuples.
"""

PRESETS = ("base", "big", "small")
"""The paper's base and big models, and the small model the demo trains
(`models.PRESETS` holds their configs)."""

TRAINING_PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""Keras dtype policies a run may train in (`training.set_precision`)."""

DECODING_PRECISIONS = ("float32", "bfloat16", "float16")
"""What a model may decode in (`models.in_precision`)."""

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
"""tf.distribute's strategies, on the TensorFlow backend."""

ALL_STRATEGIES = STRATEGIES + ("data-parallel",)
"""Every `--strategy`: tf.distribute's, and `keras.distribution`'s data
parallelism on JAX."""

LENGTH_PENALTIES = (0.6, 1.0, 1.5)
"""The length penalties (GNMT alpha) `evaluation.choose_length_penalty`
tries: the paper's 0.6 and two that favour longer translations. Not higher:
on the demo's models 2.0 and 3.0 lengthened translations further (chrF
rewards recall) but garbled short sentences ("Guten Morgen!" -> "Don't
let!")."""

WIDTHS = (256, 192, 128)
"""The demo's ladder of `d_model` values that `training.sizing` chooses
among for the small preset under a time budget, widest first, each with
`d_ff = 4 * d_model` and the preset's heads (4 for the small preset: 64, 48
and 32 dimensions each)."""

MIN_UPDATES = 3000
"""Predicted updates in the budget a width must reach to be chosen
(`training.sizing`)."""

DING_PATH = "/usr/share/trans/de-en"
"""Where Debian's trans-de-en package installs the Ding dictionary."""

TOKENIZER_TYPES = ("bpe", "unigram")
"""The SentencePiece algorithms this package trains (`data.train_tokenizer`):
BPE (the paper's), or unigram (Kudo 2018), which LiteRT's SentencePiece op
(tf-text's `FastSentencepieceTokenizer`) tokenizes exactly, so that a LiteRT
export takes text (`export.litert_model`)."""

FORMATS = ("keras", "saved_model", "onnx", "ctranslate2", "litert")
"""What an export may hold, in the order `export_run` writes them (each is
also the name of its part of the export folder: see `run_folder`)."""

DEFAULT_FORMATS = ("keras", "saved_model", "onnx")
"""What `export_run` writes unless told: CTranslate2 is an optional
dependency, and LiteRT's conversion takes about a minute."""

QUANTIZATIONS = ("float32", "int8", "float16")
"""How an export may store its weights: int8 for ONNX, CTranslate2 and
LiteRT, float16 for LiteRT only."""

RUNTIMES = ("keras", "saved_model", "ctranslate2", "onnx", "litert")
"""What can translate a folder (`runtimes`): a run folder's Keras model, or
one of an export's formats."""

OVERLONG = ("truncate", "error")
"""What happens to a sentence longer than the model accepts: cut to its
length with a warning, or refused."""
