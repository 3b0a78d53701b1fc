"""Exports a trained run to serving formats and checks them.

    keras-transformer export runs/ding --output exports/ding
    keras-transformer export runs/ding --output exports/ding --formats onnx \\
        --checkpoint runs/ding/checkpoints/ckpt-4000
    keras-transformer export runs/ding --output exports/ding-int8 --quantization int8
    keras-transformer export runs/ding --output exports/ding-ct2 \\
        --formats ctranslate2 --quantization int8
    keras-transformer export runs/ding --output exports/ding-litert --formats litert

Writes model.keras, saved_model/ (text in, text out; needs TF Text's ops),
saved_model_core/ (token ids in and out, core TF ops only), onnx/ (forward,
encoder and decoder-step graphs for onnxruntime, and translate.onnx: text in,
text out, beam search inside) and export.json; with --formats ctranslate2
also ctranslate2/ (for CTranslate2, an optional dependency: pip install
".[ctranslate2]"); with --formats litert, litert/ (translate.tflite and
search_ids.tflite, for LiteRT on phones: docs/on-device.md).
`--quantization int8` stores the weights of the ONNX graphs, of the
CTranslate2 model and of the LiteRT files as int8, `float16` those of the
LiteRT files as float16; `--precision bfloat16` makes
the SavedModels decode in bfloat16. Each format is loaded back and compared
with the in-process model before the folder is moved into place; on any
failure or Ctrl-C nothing is left behind and an earlier export is kept. An
existing --output is only replaced with --overwrite (checked before anything
is loaded).
"""

import argparse
import json

from keras_transformer import cli, textfiles
from keras_transformer.names import DEFAULT_FORMATS, FORMATS, QUANTIZATIONS

cli.use_tensorflow_backend()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a run folder (a training run, or an imported model)")
    parser.add_argument("--output", required=True, help="export folder to create")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(DEFAULT_FORMATS),
                        help=f"default: {' '.join(DEFAULT_FORMATS)}")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                        help="weights of the formats that can store int8 (the ONNX graphs, "
                             "CTranslate2, LiteRT) or float16 (LiteRT)")
    parser.add_argument("--model-file", help="default: averaged.keras, else model.keras")
    parser.add_argument("--checkpoint", help="export a training checkpoint instead")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export")
    cli.add_precision_argument(parser, help="the precision the SavedModels decode in (default: "
                                            "float32; bfloat16 is faster on CPUs with AVX-512 "
                                            "BF16 or AMX, float16 is for GPUs)")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    textfiles.check_output(args.output, args.overwrite, folder=True)
    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.export import export_run

    report = export_run(args.run_dir, args.output, formats=args.formats,
                        model_file=args.model_file, checkpoint=args.checkpoint,
                        overwrite=args.overwrite, quantization=args.quantization,
                        precision=args.precision or "float32")
    print(f"Exported {args.run_dir} to {args.output}; every format was loaded back and checked:")
    print(json.dumps(report["formats"], indent=2))

