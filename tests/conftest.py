"""Shared test setup: quiet TensorFlow, deterministic seeds, small configs,
the order of the test files."""

import collections
import json
import os
import tempfile

# JAX compiles a jitted function anew in every process, and the JAX
# training jobs the tests start (resume, multi-host, the benchmark) compile
# the same small steps: several seconds each on CPU. JAX's persistent cache
# (keyed by the program, JAX's version and its flags) lets every process of
# the run, and of later runs, load what one compiled. Set before Keras
# imports JAX; xdist workers and the tests' processes inherit it.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "keras-transformer-tests", "jax-cache"))
# JAX caches only programs that took a second or more to compile; most of
# the tests' small programs take less, and a resumed job compiles the same
# ones again: with every program cached, the JAX kill-and-resume test took
# 69.6 CPU-s against 74.5.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# XLA's CPU compiler spends much of a program's compile time in LLVM's
# optimizations, which the tests' small programs never repay: without them
# test_training_backends with the JAX resume test took 274 CPU-s against 342,
# and the JAX backend run 236 against 275. Results differ from optimized
# code's by float rounding, within every tolerance here. Set before JAX or
# TensorFlow reads XLA_FLAGS; the tests' processes inherit it.
_xla_flags = os.environ.get("XLA_FLAGS", "")
if "xla_backend_optimization_level" not in _xla_flags:
    os.environ["XLA_FLAGS"] = f"{_xla_flags} --xla_backend_optimization_level=0".strip()

import pytest  # noqa: E402

from keras_transformer import startup  # noqa: E402

# Keras and TensorFlow start as in the commands: quietly (their start-up
# chatter, the cuInit error among it, kept off the test log) and without
# the optional modules their imports load for nothing (startup.HELD_BACK,
# 3 CPU-s a process); a test that needs one imports it as usual. Then
# TensorFlow's C++ log keeps to errors here and in the tests' processes,
# unless TF_CPP_MIN_LOG_LEVEL was set already.
with startup.tensorflow_start():
    import keras  # noqa: E402
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer.models import BASE  # noqa: E402


HANDED_OUT_FIRST = ("test_resume.py", "test_learning.py", "test_distributed.py", "test_formats.py")
"""Files of a few tests that take minutes of CPU (training jobs in processes
of their own, in the quick tier the exports): handed to the workers first
(`pytest_collection_modifyitems`)."""

SLOW_FIXTURES = {"small_export", "small_ct2", "hf_models"}
"""Shared fixtures that export a run or train Hugging Face models: a test
that uses one is slow (`pytest_collection_modifyitems`)."""


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    """Marks the tests that use `SLOW_FIXTURES` slow, and sorts the test
    files in the order the workers take them (tools/run_tests.sh gives
    pytest-xdist `--no-loadscope-reorder`): `HANDED_OUT_FIRST`, then the
    files with most tests first, as pytest-xdist orders them. A file's own
    tests keep their order."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    counts = collections.Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path.name not in HANDED_OUT_FIRST, -counts[item.path],
                                 str(item.path)))


def pytest_addoption(parser):
    parser.addoption(
        "--learning-seed", type=int, default=0,
        help="added to the seeds (weights, data) of the tests that check what a model learned "
             "(the `learning_seed` fixture): run them with a few to see that their margins hold")


@pytest.fixture(scope="session")
def learning_seed(request):
    """`--learning-seed` (0 by default): the tests that train a model and
    assert on what it learned add it to their seeds."""
    return request.config.getoption("--learning-seed")


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture
def tiny_config():
    """Two layers each side, small widths: fast, yet every code path runs."""
    return BASE.replace(
        num_encoder_layers=2, num_decoder_layers=2, d_model=16, d_ff=32, num_heads=4, max_length=64
    )


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """A run folder (tests/helpers/small_run.py) shared by the tests that only
    read it: copy it before changing anything in it. Create tokenizers and
    translators on it inside each test (see `Tokenizer` on seeding)."""
    from helpers.shared import built_once
    from helpers.small_run import write_small_run

    return built_once(tmp_path_factory, "small_run", write_small_run)


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """Small trained Hugging Face Marian and FSMT models, each written once
    per test run (tests/helpers/hf_models.py): read their folders, never
    write into them."""
    from helpers.hf_models import HuggingFaceModels

    return HuggingFaceModels(tmp_path_factory)


@pytest.fixture(scope="session")
def small_export(small_run, tmp_path_factory):
    """`small_run` exported to every format by `export_run`."""
    from helpers.shared import built_once
    from keras_transformer.export import export_run

    def export(folder):
        report = export_run(str(small_run), str(folder / "export"))
        assert set(report["formats"]) == {"keras", "saved_model", "onnx"}

    return built_once(tmp_path_factory, "small_export", export) / "export"


@pytest.fixture(scope="session")
def small_ct2(small_run, tmp_path_factory):
    """`small_run` exported to CTranslate2 float32 by `export_run`: the
    export folder and its report."""
    from helpers.shared import built_once
    from keras_transformer.export import export_run

    def export(folder):
        report = export_run(str(small_run), str(folder / "export"), formats=["ctranslate2"])
        (folder / "report.json").write_text(json.dumps(report))

    folder = built_once(tmp_path_factory, "small_ct2", export)
    return folder / "export", json.loads((folder / "report.json").read_text())
