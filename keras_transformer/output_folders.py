"""Folders written whole or not at all: what an export or an import writes
goes into a temporary folder beside its destination and is moved into place
only when complete, so that a failure or Ctrl-C leaves nothing half-written
and any earlier folder intact. Plain Python."""

import os
import shutil
import tempfile


def write_folder(output_dir, fill, overwrite=False, prefix=".partial-"):
    """Calls `fill(scratch)` on a new empty folder beside `output_dir`, then
    moves it to `output_dir` (replacing an existing one only with
    `overwrite`); returns what `fill` returned.

    Raises:
        FileExistsError: `output_dir` exists and `overwrite` is False
            (checked first, before any work).
    """
    output_dir = os.path.abspath(output_dir)
    if os.path.exists(output_dir) and not overwrite:
        raise FileExistsError(f"{output_dir} exists; choose another output folder or overwrite it "
                              "(--overwrite).")
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        result = fill(scratch)
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(scratch, output_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return result
