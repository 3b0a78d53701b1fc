"""Exports a run to its serving formats, each checked against the model
before the folder is moved into place (the export folder's layout:
`run_folder`).

Each format is an `ExportFormat` (`formats`) that writes itself and checks
what it wrote; `FORMATS` is their registry, in the order they are written.
`export_run` checks what it can before loading anything (the options, the
output folder, the packages the formats need), then what the model allows,
then writes and checks the formats one after another into a temporary
folder beside the destination: a failure (a missing or corrupt model,
checkpoint or tokenizer, a check that does not pass) or Ctrl-C removes it
and leaves any earlier export untouched.

`quantization="int8"` stores the ONNX graphs', CTranslate2's and LiteRT's
weights as int8: each is first written and checked in float32, then
quantized and checked to load and translate, and how often it agrees with
float32 goes into the report. LiteRT may also store float16.

The run's calibrator (`trust.CALIBRATION_FILE`) goes with the export where
it was fitted for the exported model: the keras runtime reads it there, and
the text SavedModel's `translate` gives its confidence. Where the run has
none, or one fitted for other weights, the export says so in its report
and warns in one line.
"""

import warnings

from keras_transformer import names, run_folder, trust
from keras_transformer.decoding import quality
from keras_transformer.export.checks import Checks
from keras_transformer.export.ctranslate2_model import CTranslate2Format
from keras_transformer.export.formats import KerasFormat
from keras_transformer.export.litert_model import LiteRTFormat
from keras_transformer.export.onnx.format import OnnxFormat
from keras_transformer.export.saved_model import SavedModelFormat, ServingModules
from keras_transformer.models import in_precision
from keras_transformer.textfiles import check_output, replace_folder

FORMATS = {format.name: format for format in (KerasFormat(), SavedModelFormat(), OnnxFormat(),
                                              CTranslate2Format(), LiteRTFormat())}
"""Every format an export may hold (`names.FORMATS`), by name."""


def load_for_export(run_dir, model_file=None, checkpoint=None):
    """The model of a run (`run_folder.load_model`) in float32, whatever
    precision it was trained in (onnxruntime has little bfloat16 support),
    and its tokenizer."""
    model = run_folder.load_model(run_dir, model_file, checkpoint)
    return in_precision(model, "float32"), run_folder.load_tokenizer(run_dir)


def export_run(run_dir, output_dir, formats=names.DEFAULT_FORMATS, model_file=None,
               checkpoint=None, overwrite=False, quantization="float32", precision="float32"):
    """Exports a run folder; returns the report in export.json.

    Args:
        formats: which of `names.FORMATS` to write.
        model_file: the .keras file of the run to export (default
            averaged.keras, else model.keras).
        checkpoint: a TensorFlow training checkpoint to export instead (see
            `run_folder.load_model`).
        quantization: how the formats that can store weights in another
            type do so: "float32", "int8" (the ONNX graphs, CTranslate2,
            LiteRT) or "float16" (LiteRT); keras and saved_model stay in
            float32. A float32 export is checked for exactness; an int8 or
            float16 one for loading and translating, with its agreement
            measured and reported.
        precision: the one the SavedModels decode in ("bfloat16" is faster
            on CPUs with AVX-512 BF16 or AMX, "float16" on GPUs; see
            `models.in_precision` and `saved_model.SavedModelFormat`).

    Raises:
        FileExistsError: `output_dir` exists and `overwrite` is False
            (checked, like whether it can be written, before anything is
            loaded).
        ImportError: a format whose optional package is not installed.
        FileNotFoundError, ValueError: missing or unreadable inputs, or a
            format that fails its check.
    """
    chosen = _chosen_formats(formats, quantization, precision)
    for format in chosen:
        format.require()
    output_dir = check_output(output_dir, overwrite, folder=True,
                              option="overwrite=True (--overwrite)")
    model, tokenizer = load_for_export(run_dir, model_file, checkpoint)
    for format in chosen:
        format.check_exportable(model, tokenizer)
    calibrator, calibration = export_calibrator(run_dir, model)
    with replace_folder(output_dir, prefix=".export-") as scratch:
        tokenizer.save(scratch)
        if calibrator is not None:
            calibrator.save(scratch)
        checks = Checks.for_model(model, tokenizer, quantization, precision,
                                  ServingModules(model, tokenizer, calibrator))
        report = {"config": model.config.to_dict(), "quantization": quantization,
                  "formats": {format.name: format.write_and_check(checks, scratch)
                              for format in chosen},
                  "languages": run_folder.languages(run_dir), "confidence": calibration}
        run_folder.write_export_report(scratch, report)
    return report


def export_calibrator(run_dir, model):
    """The run's calibrator where it was fitted for `model` (float32), else
    None with a one-line warning; and what the report says of it."""
    calibrator = trust.Calibrator.load(run_dir, signals=quality.SIGNALS)
    if calibrator is not None and calibrator.model_digest == quality.model_digest(model):
        return calibrator, f"calibrated ({trust.CALIBRATION_FILE})"
    why = ("its calibrator was fitted for other weights" if calibrator is not None
           else "it has no calibrator")
    warnings.warn(f"{run_dir}: {why}, so the export gives no confidence (NaN); run "
                  f"keras-transformer calibrate {run_dir} first to include one.", stacklevel=3)
    return None, f"none: {why}"


def _chosen_formats(formats, quantization, precision):
    """The `ExportFormat`s of `formats`, in `FORMATS`' order, after one-line
    errors for unknown names and settings they cannot take."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"Unknown export format(s) {sorted(unknown)}; choose from "
                         f"{names.FORMATS}.")
    if quantization not in names.QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantization!r}; choose from "
                         f"{names.QUANTIZATIONS}.")
    if precision not in names.DECODING_PRECISIONS:
        raise ValueError(f"precision must be one of {names.DECODING_PRECISIONS}; got "
                         f"{precision!r}.")
    chosen = [FORMATS[name] for name in FORMATS if name in formats]
    stored = [format for format in chosen if format.quantizations]
    if quantization != "float32" and (
            not stored or any(quantization not in format.quantizations for format in stored)):
        takers = [format.name for format in FORMATS.values()
                  if format.quantizations and quantization in format.quantizations]
        raise ValueError(f"{quantization} weights are for the {', '.join(takers)} format"
                         f"{'s' * (len(takers) > 1)} only: give --formats with {' or '.join(takers)} "
                         "(keras and saved_model may come along, in float32), and export the "
                         "others apart.")
    return chosen
