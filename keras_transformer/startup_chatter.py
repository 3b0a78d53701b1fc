"""TensorFlow's start-up chatter, kept off a command's standard error.

Importing TensorFlow 2.21 writes its C++ log lines straight to file
descriptor 2, before its logging reads `TF_CPP_MIN_LOG_LEVEL`: "All log
messages before absl::InitializeLog() is called are written to STDERR" and
"Could not find cuda drivers" once for each of its two native libraries,
its CPU-feature and oneDNN notes; then its search for GPUs logs "failed call
to cuInit" as an error on every machine without a CUDA driver (a GPU build
adds its "Unable to register cuDNN factory" errors and TensorRT warning).
None of it is the command's, and a user reads the error line as its
failure; `TF_CPP_MIN_LOG_LEVEL=3` does not silence the lines written before
TensorFlow's logging starts.

So, while a command runs (`cli.run`), the first import of TensorFlow and
its search for GPUs write file descriptor 2 into a temporary file, and
what they wrote goes on to standard error afterwards less the chatter
(`is_chatter`): C++ log lines of levels INFO and WARNING, which
`TF_CPP_MIN_LOG_LEVEL=2` (the commands' level) hides once TensorFlow's
logging has started, and the known start-up errors that are none. Python
warnings, tracebacks and any other error line still reach the user, and
TF_CPP_MIN_LOG_LEVEL=2 hides TensorFlow's INFO and WARNING lines after
start-up, as before. `--verbose` (`show`) or the user's own
`TF_CPP_MIN_LOG_LEVEL` leaves everything as TensorFlow writes it.

The same hook serves the commands on JAX and PyTorch, which import
TensorFlow for tf.data. Plain Python: nothing here imports TensorFlow.
"""

import contextlib
import importlib.abc
import os
import re
import sys
import tempfile

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
COMMAND_LEVEL = "2"
"""TensorFlow's C++ log level under the commands: errors only."""

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


@contextlib.contextmanager
def held_back(module="tensorflow"):
    """Within this block, the first import of `module` (TensorFlow) and its
    search for GPUs keep their chatter off standard error, unless
    TF_CPP_MIN_LOG_LEVEL is set (the user's own) or `module` is already
    imported; TF_CPP_MIN_LOG_LEVEL is 2 in the block. `show` within it
    (`--verbose`) lets everything through."""
    if os.environ.get(LEVEL_VARIABLE) is not None or module in sys.modules:
        yield
        return
    os.environ[LEVEL_VARIABLE] = COMMAND_LEVEL
    _state["level_set"] = True
    _state["finder"] = _QuietImport(module)
    sys.meta_path.insert(0, _state["finder"])
    try:
        yield
    finally:
        _remove_finder()
        if _state["level_set"]:
            os.environ.pop(LEVEL_VARIABLE, None)
            _state["level_set"] = False


def show():
    """Lets TensorFlow write everything it logs, as it does by default
    (`--verbose`), where `held_back` would hold its chatter back and
    TensorFlow has not started yet."""
    _remove_finder()
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


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds `module` with the other finders, and has its loader run the
    import and the search for GPUs with descriptor 2 filtered; once (a
    library may look the module up, `importlib.util.find_spec`, without
    importing it: the finder stays until the import runs)."""

    def __init__(self, module):
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


class _QuietLoader(importlib.abc.Loader):
    """Runs another loader's import with descriptor 2 filtered, then
    TensorFlow's search for GPUs (its cuInit error comes then, not at
    import; the search would come at its first operation anyway)."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        _remove_finder()
        module.__loader__ = module.__spec__.loader = self.loader
        with _descriptor_2_filtered():
            self.loader.exec_module(module)
            config = getattr(module, "config", None)
            if config is not None and hasattr(config, "list_physical_devices"):
                config.list_physical_devices("GPU")
