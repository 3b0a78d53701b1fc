"""Folders built once for the whole test run, whether pytest runs in one
process or in several pytest-xdist workers (tools/run_tests.sh runs two).

Each xdist worker is its own process with its own session fixtures, so a
session fixture alone would train the small run or a Hugging Face model
once per worker. The workers' temporary roots share a parent folder: the
first worker to ask builds there under a file lock (`filelock`, which
`huggingface_hub` already depends on), the others wait and read it.
"""

import os
import shutil

from filelock import FileLock


def built_once(tmp_path_factory, name, build):
    """The folder `name`, written by `build(folder)` once per test run.

    `build` gets an empty folder; a folder whose build raised is built
    again by the next caller. Tests read the folder and never write into it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, built = root / name, root / f"{name}.built"
    with FileLock(root / f"{name}.lock"):
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            built.touch()
    return folder
