"""Running the helper jobs in their own Python processes."""

import json
import os
import socket
import subprocess
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)


def environment(**extra):
    # The checkout's package first, then the test helpers: a process started
    # by a test runs the code under test even where another checkout of the
    # package is installed.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]), TF_CPP_MIN_LOG_LEVEL="2")
    env.update({key: str(value) for key, value in extra.items()})
    return env


# Runs a helper job (`python -m MODULE ARGS`) started as the commands start
# (keras_transformer.startup): without the optional modules TensorFlow's
# and Keras' imports would load for nothing, 2-3 CPU-s a process.
_JOB = """
import runpy, sys
from keras_transformer import startup
module = sys.argv.pop(1)
with startup.tensorflow_start():
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def start(module, *args, **extra_env):
    return subprocess.Popen(
        [sys.executable, "-c", _JOB, module, *map(str, args)],
        cwd=TESTS, env=environment(**extra_env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def run(module, *args, timeout=600, **extra_env):
    process = start(module, *args, **extra_env)
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports, index):
    return json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": index},
    })


# Translates JSON-listed sentences with a text SavedModel in a process that
# imports only TensorFlow and TF Text, and checks that nothing of this package
# was loaded.
FRESH_TEXT_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops
model = tf.saved_model.load(sys.argv[1])
default = model.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))
n_best = model.signatures["translate"](text=tf.constant(json.loads(sys.argv[2])),
    beam_size=tf.constant(3), alpha=tf.constant(0.6), decode_margin=tf.constant(6))
assert not any(name.startswith("keras_transformer") for name in sys.modules)
print(json.dumps({"default": [t.decode() for t in default["translations"].numpy()],
                  "n_best": [[t.decode() for t in row] for row in n_best["translations"].numpy()]}))
"""

# Translates with the ONNX runner and reports whether TensorFlow or Keras
# got imported.
ONNX_ONLY_PROCESS = """
import json, sys
from keras_transformer.runtimes.onnx_runner import OnnxTranslator
translations = OnnxTranslator(sys.argv[1]).translate(json.loads(sys.argv[2]))
print(json.dumps({"translations": translations,
                  "loaded": sorted({"tensorflow", "keras"} & set(sys.modules))}))
"""

# Translates with the CTranslate2 runner (greedy) and reports whether
# TensorFlow or Keras got imported.
CTRANSLATE2_ONLY_PROCESS = """
import json, sys
from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
translations = CTranslate2Translator(sys.argv[1]).translate(json.loads(sys.argv[2]), beam_size=1)
print(json.dumps({"translations": translations,
                  "loaded": sorted({"tensorflow", "keras"} & set(sys.modules))}))
"""

# Translates with translate.onnx as the README shows, with only onnxruntime
# and onnxruntime-extensions: reads {"path", "batches": [[sentence, ...], ...],
# "settings": [...]} from standard input, translates each batch in one call,
# prints for each settings dict the translations and scores of all batches
# in order, and which of TensorFlow and keras_transformer got imported.
TRANSLATE_ONNX_PROCESS = """
import json, sys
import numpy as np, onnxruntime, onnxruntime_extensions
request = json.load(sys.stdin)
options = onnxruntime.SessionOptions()
options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
session = onnxruntime.InferenceSession(request["path"], options)
types = {"beam_size": np.int32, "n_best": np.int32, "alpha": np.float32, "decode_margin": np.int32}
runs = []
for settings in request["settings"]:
    run = {"translations": [], "scores": []}
    for batch in request["batches"]:
        feeds = {"text": np.array(batch, dtype=object)}
        feeds.update({name: np.array(value, types[name]) for name, value in settings.items()})
        translations, scores = session.run(None, feeds)
        run["translations"] += translations.tolist()
        run["scores"] += scores.tolist()
    runs.append(run)
loaded = sorted(name for name in ("tensorflow", "keras_transformer") if name in sys.modules)
print(json.dumps({"runs": runs, "loaded": loaded}))
"""
