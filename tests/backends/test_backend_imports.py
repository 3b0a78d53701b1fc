"""The layers, the model, the loss and the schedule, and the training loop
with this backend's trainer, import without the TensorFlow-only modules, and
without TensorFlow on the other backends."""

import json
import subprocess
import sys

import keras

from helpers import processes

IMPORTS = """
import json, sys
import keras
import keras_transformer.layers, keras_transformer.models
from keras_transformer.training import LabelSmoothedCrossEntropy, TransformerSchedule, paper_optimizer
from keras_transformer.models import BASE
paper_optimizer(BASE)
import keras_transformer.training.loop
trainer = {"jax": "jax_trainer", "torch": "torch_trainer"}.get(keras.backend.backend())
if trainer:
    __import__(f"keras_transformer.training.{trainer}")
print(json.dumps(sorted(name for name in sys.modules
                        if name == "tensorflow" or name.startswith("keras_transformer."))))
"""


def test_the_backend_agnostic_parts_import_no_tensorflow_only_module():
    backend = keras.backend.backend()
    output = subprocess.run([sys.executable, "-c", IMPORTS], check=True, capture_output=True,
                            text=True, env=processes.environment(KERAS_BACKEND=backend))
    loaded = set(json.loads(output.stdout.splitlines()[-1]))
    tensorflow_only = {f"keras_transformer.{name}" for name in (
        "data", "decoding", "export", "training.trainer", "training.checkpoints",
        "training.distribution")}
    assert not loaded & tensorflow_only, loaded & tensorflow_only
    # Keras itself imports TensorFlow when it is the backend, and then
    # `paper_optimizer` gives FusedAdam.
    on_tensorflow = backend == "tensorflow"
    assert ("tensorflow" in loaded) == on_tensorflow
    assert ("keras_transformer.training.fused_adam" in loaded) == on_tensorflow
