"""The commands start TensorFlow quietly and without the optional modules
it would load for nothing (`keras_transformer.startup`): the installed
commands print only their own lines, with TF_CPP_MIN_LOG_LEVEL unset or
the user's 3; what is not chatter (Python warnings, other errors) still
goes through; `--verbose` lets the libraries' lines through; the held-back
modules are missing only while TensorFlow or Keras is imported, and not
those Keras' own backend needs."""

import argparse
import concurrent.futures
import importlib.util
import logging
import os
import subprocess
import sys

import pytest

from helpers import processes
from helpers.files import ding_file
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
QUIET_LINES = [NOT_CHATTER[1], NOT_CHATTER[3]]
"""What a chatty module's import writes in a quiet command."""


def test_the_start_up_chatter_is_told_from_the_lines_that_matter():
    assert [line for line in CHATTER if not startup.is_chatter(line)] == []
    assert [line for line in NOT_CHATTER if startup.is_chatter(line)] == []


@pytest.fixture
def chatty_modules(tmp_path, monkeypatch):
    """The names of two modules that write the chatter, a Python warning and
    an error to standard error when imported, as TensorFlow may (the second
    imported later, as `train` on JAX imports Keras, then TensorFlow), and
    of the optional module they import where they can; with
    TF_CPP_MIN_LOG_LEVEL unset, as a user's environment has it."""
    stem = f"chatty_{os.path.basename(tmp_path)}".replace("-", "_")
    names = (f"{stem}_first", f"{stem}_later", f"optional_{stem}")
    (tmp_path / f"{names[2]}.py").write_text("")
    for name in names[:2]:
        (tmp_path / f"{name}.py").write_text(CHATTY_MODULE.format(
            chatter="\n".join(CHATTER), warning=NOT_CHATTER[1], error=NOT_CHATTER[3],
            optional=names[2]))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(startup.LEVEL_VARIABLE, raising=False)
    yield names
    for module in names:
        sys.modules.pop(module, None)


def _import(names, capfd, verbose=False):
    """Imports the chatty modules one after the other inside
    `tensorflow_start`; their standard error lines, and TF_CPP_MIN_LOG_LEVEL
    inside the block."""
    *chatty, optional = names
    with startup.tensorflow_start(tuple(chatty), held_back=lambda: (optional,)):
        if verbose:
            parser = argparse.ArgumentParser()
            cli.add_verbose_argument(parser)
            assert parser.parse_args(["--verbose"]).verbose
        level = os.environ.get(startup.LEVEL_VARIABLE)
        for name in chatty:
            __import__(name)
    # The optional module was held back while each chatty one was imported,
    # and no longer is.
    assert [sys.modules[name].OPTIONAL for name in chatty] == [False, False]
    __import__(optional)
    return capfd.readouterr().err.splitlines(), level


@pytest.mark.parametrize("user_level, level", [(None, "2"), ("0", "2"), ("3", "3")])
def test_the_imports_write_all_but_the_chatter_whatever_the_user_s_level(
        chatty_modules, capfd, monkeypatch, user_level, level):
    """TF_CPP_MIN_LOG_LEVEL=3 is how people silence TensorFlow: it does not
    silence what comes before TensorFlow's logging starts, so the commands
    hold that back too; their level is 2, or the user's stricter one."""
    if user_level is not None:
        monkeypatch.setenv(startup.LEVEL_VARIABLE, user_level)
    lines, inside = _import(chatty_modules, capfd)
    assert (inside, lines) == (level, QUIET_LINES * 2)
    # The block leaves no trace: the finder is gone, the user's level back.
    assert not any(isinstance(finder, startup._StartingImport) for finder in sys.meta_path)
    assert os.environ.get(startup.LEVEL_VARIABLE) == user_level


@pytest.mark.parametrize("user_level", [None, "3"])
def test_verbose_lets_everything_through_at_the_user_s_level(chatty_modules, capfd, monkeypatch,
                                                              user_level):
    if user_level is not None:
        monkeypatch.setenv(startup.LEVEL_VARIABLE, user_level)
    lines, inside = _import(chatty_modules, capfd, verbose=True)
    assert (inside, lines) == (user_level, (CHATTER + QUIET_LINES) * 2)


@pytest.mark.parametrize("verbose", [False, True])
def test_the_libraries_python_logs_keep_to_errors_unless_verbose(chatty_modules, caplog,
                                                                  verbose):
    """absl's logger (tf.data's and TFDS's) and TensorFlow's keep to errors
    once the first chatty module (TensorFlow) is imported, and so does the
    root logger while Apache Beam is imported (`root_logger_to_errors`);
    `quiet`, which turns TFDS's progress bars off, says so. Afterwards all
    is as before."""
    from absl import logging as absl_logging

    tensorflow_logger = logging.getLogger("tensorflow")
    before = [logging.getLogger(name).level for name in startup.PYTHON_LOGGERS]
    with startup.tensorflow_start(chatty_modules[:1], held_back=lambda: ()):
        if verbose:
            startup.verbose()
        assert startup.quiet() is not verbose
        __import__(chatty_modules[0])
        for log in (absl_logging.warning, absl_logging.error, tensorflow_logger.warning,
                    tensorflow_logger.error):
            log("%s inside", log.__name__)
        with startup.root_logger_to_errors():
            logging.warning("warning inside")
            logging.error("error inside")
    assert not startup.quiet()
    assert [logging.getLogger(name).level for name in startup.PYTHON_LOGGERS] == before
    absl_logging.warning("warning after")
    logging.warning("warning after")
    inside = ["warning inside", "error inside"] * 3
    assert [record.getMessage() for record in caplog.records] == (
        inside if verbose else inside[1::2]) + ["warning after"] * 2


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


# Apache Beam's first import in a command as `prepare-data` and
# `translate-corpus` run it, with `--verbose` or without.
BEAM_START = """
import argparse
import concurrent.futures
from keras_transformer import cli
from keras_transformer.pipelines import runner

def main():
    parser = argparse.ArgumentParser()
    cli.add_verbose_argument(parser)
    parser.parse_args()
    runner.require_beam()

cli.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_apache_beam_s_import_warning_is_held_back_unless_verbose(verbose):
    """Beam's import logs "apitools not found, and bigquery client libraries
    are not available ..." through the root logger where Google Cloud's
    client is not installed: only `--verbose` shows it."""
    done = subprocess.run([sys.executable, "-c", BEAM_START] + ["--verbose"] * verbose,
                          capture_output=True, text=True, env=processes.environment(),
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    apitools = importlib.util.find_spec("apitools") is not None
    assert done.stderr == ("" if apitools or not verbose else
                           "WARNING:root:apitools not found, and bigquery client libraries are "
                           "not available despite the import not raising an ImportError.\n")


def _installed(*argv, user_level=None, stdin=""):
    """`keras-transformer ARGV` run in a fresh process as a user runs it,
    with TF_CPP_MIN_LOG_LEVEL unset or `user_level`; the finished process,
    which must have succeeded."""
    command = os.path.join(os.path.dirname(sys.executable), "keras-transformer")
    if not os.path.isfile(command):
        pytest.skip(f"no installed command beside {sys.executable}")
    environment = processes.environment()
    del environment[startup.LEVEL_VARIABLE]
    if user_level is not None:
        environment[startup.LEVEL_VARIABLE] = user_level
    done = subprocess.run([command, *map(str, argv)], input=stdin, capture_output=True,
                          text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _train(folder, *options, user_level=None):
    """`keras-transformer train` of a tiny run (one layer each side),
    `folder`/run, for two updates on a Ding file of its own
    (`folder`/de-en), which TFDS prepares in `folder`/tfds."""
    return _installed(
        "train", "--output", folder / "run", "--dataset", "ding",
        "--ding-path", ding_file(folder / "de-en"), "--data-dir", folder / "tfds",
        "--vocab-size", 120, "--preset", "small", "--set", "num_encoder_layers=1",
        "--set", "num_decoder_layers=1", "--set", "d_model=32", "--set", "d_ff=64",
        "--set", "max_length=24", "--batch-tokens", 512, "--steps", 2, "--eval-every-steps", 2,
        "--checkpoint-every-steps", 2, "--bleu-sentences", 4, *options, user_level=user_level)


@pytest.mark.slow
def test_the_installed_commands_print_only_their_own_lines(tmp_path):
    """`train`, then `translate`, `evaluate` and `export` of its run, and
    `serve --help`, with TF_CPP_MIN_LOG_LEVEL unset and 3: TensorFlow starts
    in each but `serve --help` (imported, its search for GPUs done), and
    their standard error holds the command's own warnings alone; `train`'s
    standard output says what preparing the Ding file does, not TFDS's
    "Downloading". The two ways run side by side (each command is a fresh
    process that spends most of its time on one core, importing)."""
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        ways = [threads.submit(_print_only_their_own_lines, tmp_path / name, level)
                for name, level in (("unset", None), ("level-3", "3"))]
        for way in ways:
            way.result()


def _print_only_their_own_lines(tmp_path, user_level):
    """`test_the_installed_commands_print_only_their_own_lines` in
    `tmp_path`, with TF_CPP_MIN_LOG_LEVEL unset or `user_level`."""
    tmp_path.mkdir()
    trained = _train(tmp_path, user_level=user_level)
    assert trained.stderr == ""
    records = tmp_path / "tfds" / "ding_de_en" / "1.0.0"
    assert trained.stdout.splitlines()[0] == (
        f"Preparing the Ding dictionary {tmp_path / 'de-en'} as TFDS records in {records}; "
        "later runs reuse them.")
    assert "Downloading" not in trained.stdout and "downloaded" not in trained.stdout
    run = tmp_path / "run"

    translated = _installed("translate", run, user_level=user_level,
                            stdin="Haus 3 und Baum\n" + "Haus Baum " * 20 + "\n")
    assert len(translated.stdout.splitlines()) == 2
    assert translated.stderr.splitlines() == [
        "keras-transformer translate: warning: standard input: line 2 exceeded the model's 23 "
        "tokens; only their first 23 tokens were translated."]

    evaluated = _installed("evaluate", run, "--limit", 3, user_level=user_level)
    assert "(3 sentences)" in evaluated.stdout and evaluated.stderr == ""

    exported = _installed("export", run, "--output", tmp_path / "export", "--formats", "onnx",
                          user_level=user_level)
    assert f"Exported {run} to {tmp_path / 'export'}" in exported.stdout
    assert [line.split(": it has")[0] for line in exported.stderr.splitlines()] == [
        f"keras-transformer export: warning: {run}"]

    helped = _installed("serve", "--help", user_level=user_level)
    assert helped.stdout.startswith("usage: keras-transformer serve") and helped.stderr == ""


@pytest.mark.slow
def test_verbose_shows_the_libraries_lines(tmp_path):
    """`train --verbose`: TensorFlow's start-up log, absl's warning from
    tf.data (training turns autotuning back on to read its cached input)
    and TFDS's progress bars, as the libraries write them."""
    stderr = _train(tmp_path, "--verbose").stderr
    assert any(startup.is_chatter(line) for line in stderr.splitlines())
    assert "WARNING:absl:Changing the value of option enabled from False to True.\n" in stderr
    assert "Generating splits..." in stderr
