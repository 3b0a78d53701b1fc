"""How the commands start TensorFlow: quietly, and without the optional
modules its import would load for nothing.

Quietly. Importing TensorFlow 2.21 writes C++ log lines straight to file
descriptor 2 before its logging reads `TF_CPP_MIN_LOG_LEVEL`: "All log
messages before absl::InitializeLog() is called are written to STDERR" and
"Could not find cuda drivers" once for each of its two native libraries,
its CPU-feature and oneDNN notes; then its search for GPUs logs "failed call
to cuInit" as an error on every machine without a CUDA driver (its GPU
builds add "Unable to register cuDNN factory" errors and a TensorRT
warning). None of it is the command's, a user reads the error line as its
failure, and `TF_CPP_MIN_LOG_LEVEL=3` does not silence what comes before
TensorFlow's logging starts. So while a command runs (`cli.run`), the first
import of TensorFlow and its search for GPUs write descriptor 2 into a
temporary file, and what they wrote goes on to standard error afterwards
less the chatter (`is_chatter`): C++ log lines of levels INFO and WARNING,
which the commands' `TF_CPP_MIN_LOG_LEVEL=2` hides once TensorFlow's logging
has started, and the start-up errors that are none. Python warnings,
tracebacks and any other error still reach the user. `--verbose`
(`verbose`) or the user's own `TF_CPP_MIN_LOG_LEVEL` leaves everything as
TensorFlow writes it.

Without the optional modules. TensorFlow's import loads JAX (for its
converter of JAX functions to TensorFlow Lite) and SciPy (for sparse inputs
of its legacy Keras), and Keras' import loads Matplotlib (for its image
galleries) and JAX (for its Orbax checkpoints), each only when installed
and none of them used by a command: a good part of the CPU time of
`import tensorflow` where all three are installed, and of a small `train`
run's (`train` imports Keras first; `benchmarks/translate_file.py`
measures the start-up). While the first of TensorFlow and Keras is
imported, those not imported yet are held back (as if not installed,
which TensorFlow and Keras allow for); afterwards a command that wants
one (Matplotlib for `visualize`) imports it as usual.

The same start serves `train` on JAX and PyTorch, which import TensorFlow
for tf.data: where Keras runs on JAX (`keras_backend`), JAX and SciPy,
which Keras' JAX backend imports, are not held back. Plain Python: nothing
here imports TensorFlow.
"""

import contextlib
import importlib.abc
import json
import os
import re
import sys
import tempfile

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
COMMAND_LEVEL = "2"
"""TensorFlow's C++ log level under the commands: errors only."""
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

_state = {"finder": None, "level_set": False}


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
    """Within this block, the first import of any of `modules` (TensorFlow
    or Keras) holds back the modules `held_back()` (called as that import
    starts), and it and TensorFlow's search for GPUs keep their chatter off
    standard error unless TF_CPP_MIN_LOG_LEVEL is set (the user's own),
    which otherwise is 2 in the block; `verbose` within it lets everything
    through. Nothing changes where one of `modules` is imported already."""
    if any(module in sys.modules for module in modules):
        yield
        return
    if os.environ.get(LEVEL_VARIABLE) is None:
        os.environ[LEVEL_VARIABLE] = COMMAND_LEVEL
        _state["level_set"] = True
    _state["finder"] = _StartingImport(modules, held_back, quiet=_state["level_set"])
    sys.meta_path.insert(0, _state["finder"])
    try:
        yield
    finally:
        _remove_finder()
        _unset_level()


def verbose():
    """Lets TensorFlow write everything it logs, as it does by default
    (`--verbose`), where `tensorflow_start` would keep its chatter back and
    TensorFlow has not started yet."""
    if _state["finder"] is not None:
        _state["finder"].quiet = False
    _unset_level()


def _unset_level():
    if _state["level_set"]:
        os.environ.pop(LEVEL_VARIABLE, None)
        _state["level_set"] = False


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
    """Finds the first of `modules` imported with the other finders, and has
    its loader run the import (and the search for GPUs) the commands' way;
    once. A library may look a module up without importing it
    (`importlib.util.find_spec`): the finder stays until an import runs."""

    def __init__(self, modules, held_back, quiet):
        self.modules, self.held_back, self.quiet = modules, held_back, quiet

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
    when quiet, descriptor 2 filtered; then, where TensorFlow was imported
    (by itself or by Keras), its search for GPUs (its cuInit error comes
    then, not at import; the search would come at its first operation
    anyway)."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        _remove_finder()
        module.__loader__ = module.__spec__.loader = self.loader
        with _descriptor_2_filtered() if self.finder.quiet else contextlib.nullcontext():
            with _modules_held_back(self.finder.held_back()):
                self.loader.exec_module(module)
            tensorflow = sys.modules.get("tensorflow")
            if tensorflow is not None:
                tensorflow.config.list_physical_devices("GPU")
