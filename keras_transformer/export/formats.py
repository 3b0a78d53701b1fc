"""What a serving format is to the exporter: an object that says what it
needs, writes itself into the export folder and checks what it wrote
(`ExportFormat`); and the simplest of them, the Keras file. The others live
beside the code that writes them (`saved_model`, `onnx.format`,
`ctranslate2_model`, `litert_model`); `exporter.FORMATS` is the registry."""

import keras
import numpy as np

from keras_transformer import run_folder
from keras_transformer.export.checks import require


class ExportFormat:
    """One format of an export (a name of `names.FORMATS`, which is also the
    name of its part of the export folder).

    Attributes:
        name: the format's name.
        quantizations: the weights it can store (`names.QUANTIZATIONS`);
            None: float32 only, whatever the export's quantization (it
            comes along in float32).
    """

    name = None
    quantizations = None

    def require(self):
        """Raises a one-line ImportError where a package it needs is
        missing: called before anything is loaded."""

    def check_exportable(self, model, tokenizer):
        """Raises a one-line ValueError for a model this format cannot hold:
        called before anything is written."""

    def write_and_check(self, checks, folder):
        """Writes the format into the export folder `folder` and checks it
        against the model (`checks`, a `checks.Checks`); returns what the
        check measured, for export.json. Raises a ValueError when a check
        does not pass."""
        raise NotImplementedError


class KerasFormat(ExportFormat):
    """model.keras, checked to give the same logits loaded back."""

    name = "keras"

    def write_and_check(self, checks, folder):
        path = run_folder.save_model(folder, checks.model)
        reloaded = keras.models.load_model(path, safe_mode=True)
        difference = float(np.abs(reloaded(checks.inputs).numpy() - checks.logits).max())
        require(difference == 0.0, f".keras reload changed the logits by {difference}")
        return {"path": run_folder.MODEL_FILE, "max_logit_difference": difference}
