"""The small Hugging Face models the import and export tests compare with,
trained once per test run and shared.

Training one takes seconds on one thread; on a shared machine PyTorch's
thread pool waits for busy cores and the same seconds of work take
minutes, so training runs on one thread (`one_torch_thread`). Several test
files need the same model (a Marian model with a shared vocabulary is
imported, fine-tuned, and exported to every format): `HuggingFaceModels`
writes each distinct one once per test run, for every xdist worker
(`helpers.shared.built_once`). Its folders are read-only for the tests;
the reference model it returns is loaded from the folder for each test,
which may change it.
"""

import contextlib
import dataclasses
import json

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
    options, each written once per test run."""

    def __init__(self, tmp_path_factory):
        self._tmp_path_factory = tmp_path_factory

    def marian(self, **options):
        from transformers import MarianMTModel

        from helpers.marian_files import MarianFiles
        from helpers.marian_model import write_marian_model

        return self._get("marian", write_marian_model, options, MarianFiles, MarianMTModel)

    def fsmt(self, **options):
        from transformers import FSMTForConditionalGeneration

        from helpers.fsmt_model import FsmtModelFiles, write_fsmt_model

        return self._get("fsmt", write_fsmt_model, options, FsmtModelFiles,
                         FSMTForConditionalGeneration)

    def _get(self, kind, write, options, files_class, model_class):
        from helpers.shared import built_once

        def build(folder):
            files, _ = write(folder, **options)
            (folder / "files.json").write_text(json.dumps(dataclasses.asdict(files)))

        name = "-".join([kind, *(f"{key}={value}" for key, value in sorted(options.items()))])
        folder = built_once(self._tmp_path_factory, name, build)
        fields = json.loads((folder / "files.json").read_text())
        files = files_class(**{key: tuple(value) if isinstance(value, list) else value
                               for key, value in fields.items()})
        return folder, files, model_class.from_pretrained(folder).eval()
