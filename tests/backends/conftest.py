"""The layers and the model on the Keras backend this process was started
with (`KERAS_BACKEND=tensorflow`, `jax` or `torch`).

`tools/run_tests.sh` runs this folder once per backend, each in its own
pytest process; the main run, on TensorFlow, does not collect it
(`norecursedirs` in setup.cfg). The shared fixtures (`tiny_config`, the
seed) come from `tests/conftest.py`.
"""

import keras


def pytest_report_header(config):
    return f"Keras backend: {keras.backend.backend()}"
