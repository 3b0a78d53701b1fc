"""How the commands start TensorFlow: quietly, and without the optional
modules its import would load for nothing.

Quietly. A command prints its own lines (progress and results, warnings
and errors) and not the libraries': while it runs (`cli.run`) without
`--verbose` (`verbose`), they are held back, whatever the user's
`TF_CPP_MIN_LOG_LEVEL` says (`quiet`):

- TensorFlow's start. Importing TensorFlow 2.21 writes C++ log lines
  straight to file descriptor 2 before its logging reads
  `TF_CPP_MIN_LOG_LEVEL`, so that even 3 does not silence them: absl's
  "All log messages before absl::InitializeLog() is called are written to
  STDERR" and "Could not find cuda drivers", once for each of two native
  libraries that carry their own absl and CUDA stub (the framework's,
  loaded by `tensorflow.python.platform.self_check`, and the profiler's,
  `_pywrap_profiler_plugin`); its CPU-feature and oneDNN notes; then its
  search for GPUs logs "failed call to cuInit" as an error on every machine
  without a CUDA driver (its GPU builds add "Unable to register cuDNN
  factory" errors and a TensorRT warning). None of it is the command's, and
  a user reads the error line as its failure. So the first import of
  TensorFlow and its search for GPUs write descriptor 2 into a temporary
  file, and what they wrote goes on to standard error afterwards less the
  chatter (`is_chatter`): C++ log lines of levels INFO and WARNING, and the
  start-up errors that are none.
- TensorFlow's C++ log afterwards: `TF_CPP_MIN_LOG_LEVEL` is 2 (errors
  only), or the user's where it is stricter (3).
- Python's logging of the libraries (`PYTHON_LOGGERS`) keeps to errors:
  absl's, which tf.data and TensorFlow Datasets log through (tf.data's
  "Changing the value of option enabled from False to True." when training
  turns autotuning back on for its cached input, `data.autotuned`), and
  TensorFlow's own.
- TensorFlow Datasets' progress bars are off (`data.corpora` asks `quiet`
  before a dataset is prepared), and so is Python's logging below errors
  while Apache Beam is imported (`root_logger_to_errors`).

Python warnings, tracebacks and every error still reach the user.
`--verbose` lets everything through as the libraries write it, at the
user's `TF_CPP_MIN_LOG_LEVEL`.

Without the optional modules. TensorFlow's import loads JAX (for its
converter of JAX functions to TensorFlow Lite) and SciPy (for sparse inputs
of its legacy Keras), and Keras' import loads Matplotlib (for its image
galleries) and JAX (for its Orbax checkpoints), each only when installed
and none of them used by a command: a good part of the CPU time of
`import tensorflow` where all three are installed, and of a small `train`
run's (`train` imports Keras first; `benchmarks/translate_file.py`
measures the start-up). While TensorFlow or Keras is imported, those not
imported yet are held back (as if not installed, which TensorFlow and
Keras allow for); afterwards a command that wants one (Matplotlib for
`visualize`) imports it as usual.

The same start serves `train` on JAX and PyTorch, whose Keras does not
import TensorFlow: `train` imports it afterwards for tf.data, and that
import is run the commands' way too. Where Keras runs on JAX
(`keras_backend`), JAX and SciPy, which Keras' JAX backend imports, are
not held back. Plain Python: nothing here imports TensorFlow.
"""

import contextlib
import importlib.abc
import json
import logging
import os
import re
import sys
import tempfile

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
COMMAND_LEVEL = "2"
"""TensorFlow's C++ log level under the commands: errors only (the user's
where it is stricter)."""
PYTHON_LOGGERS = ("absl", "tensorflow")
"""The libraries' Python loggers the commands keep to errors."""
STARTING = ("tensorflow", "keras")
"""The modules whose first import is run the commands' way (Keras on
TensorFlow imports TensorFlow)."""
HELD_BACK = ("jax", "scipy", "matplotlib")
"""Optional modules TensorFlow's and Keras' imports would load, and no
command uses."""
JAX_BACKEND_NEEDS = ("jax", "scipy")
"""Of `HELD_BACK`, those Keras imports where it runs on JAX."""

# An absl C++ log line: level letter, date (month and day), time (TensorFlow
# writes 00:00:SECONDS-SINCE-1970), thread, file:line].
_LOG_LINE = re.compile(r"([IWEF])\d{4} [\d:.]+ +\d+ [^\]\s]+\] (.*)")
# Errors TensorFlow logs at start-up that say nothing is wrong: no CUDA
# driver (a machine without a GPU), and the duplicate registrations of its
# GPU builds' libraries.
_NOT_ERRORS = re.compile(r"failed call to cuInit|Unable to register cu(DNN|FFT|BLAS) factory|"
                         r"computation placer already registered")
# Lines of the chatter that are not log lines: absl's note before its
# logging starts, and the second line of the CPU-feature note.
_NOTES = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
          "STDERR", "To enable the following instructions:")

# What a quiet command changed (restored by `_restore`): the user's
# TF_CPP_MIN_LOG_LEVEL (None: unset) and the levels of `PYTHON_LOGGERS`.
_UNCHANGED = object()
_state = {"finder": None, "quiet": False, "user_level": _UNCHANGED, "logger_levels": {}}


def is_chatter(line):
    """Whether a line TensorFlow wrote while it started is start-up chatter
    (see the module docstring)."""
    match = _LOG_LINE.match(line)
    if match:
        return match[1] in "IW" or (match[1] == "E" and bool(_NOT_ERRORS.search(match[2])))
    return line.startswith(_NOTES)


def keras_backend():
    """The Keras backend this process will run on, read as Keras reads it
    but without importing it: KERAS_BACKEND, else the one
    $KERAS_HOME/keras.json (by default ~/.keras/keras.json) names, else None
    (Keras' default, TensorFlow)."""
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen:
        return chosen
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as file:
            return json.load(file).get("backend")
    except (OSError, ValueError, AttributeError):
        return None


def held_back_now():
    """`HELD_BACK`, less what Keras' backend imports (`keras_backend`)."""
    needed = JAX_BACKEND_NEEDS if keras_backend() == "jax" else ()
    return tuple(name for name in HELD_BACK if name not in needed)


@contextlib.contextmanager
def tensorflow_start(modules=STARTING, held_back=held_back_now):
    """Within this block the libraries' lines are held back (`quiet`: see
    the module docstring): TF_CPP_MIN_LOG_LEVEL is `_command_level`'s, and
    the first import of each of `modules` (TensorFlow, Keras) holds back the
    modules `held_back()` (called as that import starts), keeps its chatter
    and that of TensorFlow's search for GPUs off standard error, and then
    keeps `PYTHON_LOGGERS` to errors; `verbose` within it lets everything
    through. Afterwards all is as it was. Nothing changes where one of
    `modules` is imported already."""
    if any(module in sys.modules for module in modules):
        yield
        return
    user_level = os.environ.get(LEVEL_VARIABLE)
    os.environ[LEVEL_VARIABLE] = _command_level(user_level)
    _state.update(quiet=True, user_level=user_level)
    _state["finder"] = _StartingImport(modules, held_back)
    sys.meta_path.insert(0, _state["finder"])
    try:
        yield
    finally:
        _remove_finder()
        _restore()


def _command_level(user_level):
    """TF_CPP_MIN_LOG_LEVEL in a quiet command, given the user's (None:
    unset): `COMMAND_LEVEL`, or the user's where it is stricter."""
    try:
        stricter = int(user_level) > int(COMMAND_LEVEL)
    except (TypeError, ValueError):
        stricter = False
    return user_level if stricter else COMMAND_LEVEL


def quiet():
    """Whether the libraries' own lines are held back now: in a command's
    `tensorflow_start` without `verbose`."""
    return _state["quiet"]


def verbose():
    """Lets the libraries write everything they log, as they do by default
    and at the user's TF_CPP_MIN_LOG_LEVEL (`--verbose`), where
    `tensorflow_start` would hold their lines back."""
    _restore()


@contextlib.contextmanager
def root_logger_to_errors():
    """In a quiet command (`quiet`), Python's logging keeps to errors in this
    block: for a library that logs warnings through the root logger as it is
    imported (Apache Beam's "apitools not found, and bigquery client
    libraries are not available ..." where Google Cloud's client is not
    installed), which no logger's level holds back."""
    if not quiet():
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _restore():
    """Undoes what `tensorflow_start` changed to keep the libraries quiet."""
    _state["quiet"] = False
    user_level, _state["user_level"] = _state["user_level"], _UNCHANGED
    if user_level is None:
        os.environ.pop(LEVEL_VARIABLE, None)
    elif user_level is not _UNCHANGED:
        os.environ[LEVEL_VARIABLE] = user_level
    levels, _state["logger_levels"] = _state["logger_levels"], {}
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _python_loggers_to_errors():
    """Keeps `PYTHON_LOGGERS` to errors, remembering their levels. After
    TensorFlow's or Keras' import, which made absl's logger (its own class:
    made before, it would be a plain one)."""
    for name in PYTHON_LOGGERS:
        logger = logging.getLogger(name)
        _state["logger_levels"].setdefault(name, logger.level)
        logger.setLevel(logging.ERROR)


def _remove_finder():
    finder, _state["finder"] = _state["finder"], None
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


@contextlib.contextmanager
def _descriptor_2_filtered():
    """Writes to file descriptor 2 (C++ and Python alike) go to a temporary
    file in this block, and on to standard error afterwards, less the
    chatter. Without a usable descriptor 2, nothing changes."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True)
                           if not is_chatter(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


@contextlib.contextmanager
def _modules_held_back(names):
    """The modules `names` not imported yet cannot be imported in this
    block (`sys.modules[name] = None`: `import` raises ImportError)."""
    absent = [name for name in names if name not in sys.modules]
    for name in absent:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in absent:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


class _StartingImport(importlib.abc.MetaPathFinder):
    """Finds each of `modules` imported with the other finders, and has its
    loader run the import (and the search for GPUs) the commands' way; once
    a module, and the modules that import imports are plain imports in it.
    Keras on TensorFlow imports TensorFlow in its import; on JAX or PyTorch
    it does not, and `train` imports TensorFlow afterwards for tf.data. A
    library may look a module up without importing it
    (`importlib.util.find_spec`): the finder stays until its imports ran."""

    def __init__(self, modules, held_back):
        self.modules, self.held_back = modules, held_back

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _StartingLoader(spec.loader, self)
                return spec
        return None


class _StartingLoader(importlib.abc.Loader):
    """Runs another loader's import with the finder's modules held back and,
    when `quiet`, descriptor 2 filtered; then, where TensorFlow was imported
    (by itself or by Keras), its search for GPUs (its cuInit error comes
    then, not at import; the search would come at its first operation
    anyway); and when `quiet`, keeps `PYTHON_LOGGERS` to errors."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        finder = self.finder
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        module.__loader__ = module.__spec__.loader = self.loader
        try:
            with _descriptor_2_filtered() if quiet() else contextlib.nullcontext():
                with _modules_held_back(finder.held_back()):
                    self.loader.exec_module(module)
                tensorflow = sys.modules.get("tensorflow")
                if tensorflow is not None:
                    tensorflow.config.list_physical_devices("GPU")
            if quiet():
                _python_loggers_to_errors()
        finally:
            if _state["finder"] is finder and any(name not in sys.modules
                                                  for name in finder.modules):
                sys.meta_path.insert(0, finder)
