"""Running the checkout's command scripts (`examples/*.py`,
`export/export_model.py`) as `python SCRIPT ARGS` runs them: in this
process (`command`) where a test is about what the command checks, says
or writes, or in a process of its own (`process_command`) where it is
about the process. In this process, a command costs no second import of
TensorFlow (7-9 s of CPU a process on 2 cores)."""

import contextlib
import io
import os
import runpy
import subprocess
import sys
import warnings

from helpers.processes import ROOT, environment


def command(script, *args, stdin=b""):
    """Runs a script of the checkout in this process as `python SCRIPT ARGS`
    would, with `stdin` (bytes) as its standard input; returns (status,
    stdout bytes, our stderr lines). The environment variables it sets (its
    TensorFlow threads, say) are undone afterwards, and its warnings are
    shown each time, as in a process of its own."""
    path = os.path.join(ROOT, script)
    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
               for name in ("stdout", "stderr")}
    saved_environment = dict(os.environ)
    status = 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())  # and shows repeated ones again
        stack.enter_context(_replaced(sys, "argv", [path, *map(str, args)]))
        stack.enter_context(_replaced(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin),
                                                                     encoding="utf-8")))
        stack.enter_context(_replaced(sys, "stdout", streams["stdout"]))
        stack.enter_context(_replaced(sys, "stderr", streams["stderr"]))
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else 1
        finally:
            os.environ.clear()
            os.environ.update(saved_environment)
    stderr = streams["stderr"].buffer.getvalue().decode("utf-8", "replace")
    return status, streams["stdout"].buffer.getvalue(), messages(stderr)


@contextlib.contextmanager
def _replaced(owner, name, value):
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def process_command(script, *args, stdin=b"", timeout=300):
    """`command` in a process of its own."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)],
                            input=stdin, capture_output=True, env=environment(),
                            timeout=timeout)
    return result.returncode, result.stdout, messages(result.stderr.decode("utf-8", "replace"))


def messages(stderr):
    """The command's own lines of a standard error ("translate.py: ..."),
    not TensorFlow's logs; there must be no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.split(": ", 1)[0].endswith(".py")]
