"""The commands start TensorFlow quietly and without the optional modules
it would load for nothing (`keras_transformer.startup`): the installed
command prints only its own lines; what is not chatter (Python warnings,
other errors) still goes through; `--verbose` and the user's own
TF_CPP_MIN_LOG_LEVEL let everything through; the held-back modules are
missing only while the first of TensorFlow and Keras is imported, and
not those Keras' own backend needs."""

import argparse
import os
import subprocess
import sys

import pytest

from helpers import processes
from keras_transformer import cli, startup

# What TensorFlow 2.21 wrote at start-up on this project's machines (a
# 2-core EPYC; an Intel Xeon with AMX, whose oneDNN note this is), and
# what its GPU builds write.
CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795713564.076352    5792 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1795713607.601917    6275 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
    "I0000 00:00:1732637281.118529    5110 util.cc:169] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors "
    "from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "E0000 00:00:1795713616.351036    6275 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "E0000 00:00:1732637281.352418    5110 cuda_dnn.cc:8579] Unable to register cuDNN factory: "
    "Attempting to register factory for plugin cuDNN when one has already been registered",
    "W0000 00:00:1732637282.611432    5110 gpu_device.cc:2344] Cannot dlopen some GPU "
    "libraries.",
]
# Lines that are not chatter: the commands' own, Python's warnings and
# tracebacks, and errors and fatal errors of TensorFlow's not in the list.
NOT_CHATTER = [
    "keras-transformer translate: warning: five.de: line 3 exceeded the model's 23 tokens",
    "/work/x.py:9: UserWarning: a real Python warning",
    "Traceback (most recent call last):",
    "E0000 00:00:1795713616.351036    6275 bfc_allocator.cc:485] Allocator ran out of memory",
    "F0000 00:00:1795713616.351036    6275 check.cc:12] Check failed: rank >= 0",
]
# Writes the chatter and an error to descriptor 2 as TensorFlow's C++ code
# does, and a warning to sys.stderr as Python does; imports an optional
# module where it can, as TensorFlow imports JAX.
CHATTY_MODULE = '''
import os, sys
os.write(2, """{chatter}\\n""".encode())
print("{warning}", file=sys.stderr)
os.write(2, b"{error}\\n")
try:
    import {optional}
    OPTIONAL = True
except ImportError:
    OPTIONAL = False
'''


def test_the_start_up_chatter_is_told_from_the_lines_that_matter():
    assert [line for line in CHATTER if not startup.is_chatter(line)] == []
    assert [line for line in NOT_CHATTER if startup.is_chatter(line)] == []


@pytest.fixture
def chatty_module(tmp_path, monkeypatch):
    """The names of a module that writes the chatter, a Python warning and
    an error to standard error when imported, as TensorFlow may, and of the
    optional module it imports where it can; with TF_CPP_MIN_LOG_LEVEL
    unset, as a user's environment has it."""
    name = f"chatty_{os.path.basename(tmp_path)}".replace("-", "_")
    optional = f"optional_{name}"
    (tmp_path / f"{optional}.py").write_text("")
    (tmp_path / f"{name}.py").write_text(CHATTY_MODULE.format(
        chatter="\n".join(CHATTER), warning=NOT_CHATTER[1], error=NOT_CHATTER[3],
        optional=optional))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(startup.LEVEL_VARIABLE, raising=False)
    yield name, optional
    for module in (name, optional):
        sys.modules.pop(module, None)


def _import(names, capfd, verbose=False):
    """Imports the chatty module inside `tensorflow_start`; its standard
    error lines, and TF_CPP_MIN_LOG_LEVEL inside the block."""
    name, optional = names
    with startup.tensorflow_start((name,), held_back=lambda: (optional,)):
        if verbose:
            parser = argparse.ArgumentParser()
            cli.add_verbose_argument(parser)
            assert parser.parse_args(["--verbose"]).verbose
        level = os.environ.get(startup.LEVEL_VARIABLE)
        __import__(name)
    # The optional module was held back while the chatty one was imported,
    # and no longer is.
    assert sys.modules[name].OPTIONAL is False
    __import__(optional)
    return capfd.readouterr().err.splitlines(), level


def test_an_import_writes_all_but_the_chatter(chatty_module, capfd):
    lines, level = _import(chatty_module, capfd)
    assert level == "2"
    assert lines == [NOT_CHATTER[1], NOT_CHATTER[3]]
    # The block leaves no trace: the finder is gone, the level unset.
    assert not any(isinstance(finder, startup._StartingImport) for finder in sys.meta_path)
    assert startup.LEVEL_VARIABLE not in os.environ


@pytest.mark.parametrize("how", ["--verbose", "TF_CPP_MIN_LOG_LEVEL=0"])
def test_verbose_or_the_user_s_own_level_lets_everything_through(chatty_module, capfd,
                                                                  monkeypatch, how):
    if how.startswith("TF_CPP"):
        monkeypatch.setenv(startup.LEVEL_VARIABLE, "0")
    lines, level = _import(chatty_module, capfd, verbose=how == "--verbose")
    assert level == (None if how == "--verbose" else "0")
    assert lines == CHATTER + [NOT_CHATTER[1], NOT_CHATTER[3]]


# `train`'s start as a command runs it: Keras imported first (TensorFlow
# through it); then the optional modules it loaded.
TRAIN_START = """
import sys
from keras_transformer import cli, startup
cli.run(lambda: __import__("keras_transformer.training"))
print(sorted(name for name in startup.HELD_BACK + ("tensorflow",) if name in sys.modules))
"""


@pytest.mark.slow
def test_a_command_that_imports_keras_first_holds_the_optional_modules_back_too():
    done = subprocess.run([sys.executable, "-c", TRAIN_START], capture_output=True, text=True,
                          env=processes.environment(KERAS_BACKEND="tensorflow"), check=True,
                          timeout=300)
    assert done.stdout.split("\n")[-2] == "['tensorflow']"


def test_keras_own_backend_needs_are_not_held_back(tmp_path, monkeypatch):
    """On JAX, Keras' import needs JAX and SciPy: the backend is read as
    Keras reads it, from KERAS_BACKEND or keras.json."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert startup.keras_backend() is None and startup.held_back_now() == startup.HELD_BACK
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert startup.keras_backend() == "jax" and startup.held_back_now() == ("matplotlib",)
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert startup.held_back_now() == startup.HELD_BACK


@pytest.mark.slow
def test_the_installed_command_prints_only_its_own_lines(small_run, tmp_path):
    """`keras-transformer translate RUN --input F` as a user runs it:
    TensorFlow starts in the process (imported, its search for GPUs done),
    and its standard error holds the command's warning alone."""
    command = os.path.join(os.path.dirname(sys.executable), "keras-transformer")
    if not os.path.isfile(command):
        pytest.skip(f"no installed command beside {sys.executable}")
    source = tmp_path / "five.de"
    source.write_text("das Haus ist groß.\nder Baum\n" + "Haus Baum groß " * 20 + "\n")
    environment = processes.environment()
    del environment[startup.LEVEL_VARIABLE]
    done = subprocess.run([command, "translate", str(small_run), "--input", str(source)],
                          capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 3
    assert done.stderr.splitlines() == [
        f"keras-transformer translate: warning: {source}: line 3 exceeded the model's 23 "
        "tokens; only their first 23 tokens were translated."]
