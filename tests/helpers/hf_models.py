"""The small Hugging Face models the import and export tests compare with,
trained once per test session and shared.

Training one takes seconds on one thread; on a shared machine PyTorch's
thread pool waits for busy cores and the same seconds of work take
minutes, so training runs on one thread (`one_torch_thread`). Several test
files need the same model (a Marian model with a shared vocabulary is
imported, fine-tuned, and exported to every format): `HuggingFaceModels`
writes each distinct one once. Its folders are read-only for the tests;
the reference model it returns is a copy the test may change.
"""

import contextlib
import copy

import torch


@contextlib.contextmanager
def one_torch_thread():
    """PyTorch runs on one thread inside the block."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class HuggingFaceModels:
    """`marian(**options)` and `fsmt(**options)`: `(folder, files,
    reference)` for `write_marian_model` / `write_fsmt_model` with these
    options, each written once into a folder of `tmp_path_factory`."""

    def __init__(self, tmp_path_factory):
        self._tmp_path_factory = tmp_path_factory
        self._written = {}

    def marian(self, **options):
        from helpers.marian_model import write_marian_model

        return self._get("marian", write_marian_model, options)

    def fsmt(self, **options):
        from helpers.fsmt_model import write_fsmt_model

        return self._get("fsmt", write_fsmt_model, options)

    def _get(self, kind, write, options):
        key = (kind, tuple(sorted(options.items())))
        if key not in self._written:
            folder = self._tmp_path_factory.mktemp(kind)
            self._written[key] = (folder, *write(folder, **options))
        folder, files, reference = self._written[key]
        return folder, files, copy.deepcopy(reference)
