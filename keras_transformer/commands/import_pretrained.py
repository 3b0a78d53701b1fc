"""Imports a pretrained translation model into a run folder.

    keras-transformer import hf://Helsinki-NLP/opus-mt-de-en --output runs/opus-de-en
    keras-transformer import hf://facebook/wmt19-de-en --output runs/wmt19-de-en
    keras-transformer import path/to/folder --output runs/local

SOURCE is a Hugging Face Hub id (downloaded with huggingface_hub) or a local
folder: a Hugging Face Marian (OPUS-MT) or FSMT (fairseq WMT19) folder, or
Marian's own release files (decoder.yml, *.npz, *.vocab.yml, *.spm). The run
folder (`run_folder`: config.json, tokenizer files, averaged.keras,
pretrained.json) works with translate, evaluate, visualize, export and train
--init-from. It is written whole or not at all.
"""

import argparse

from keras_transformer import cli, textfiles

cli.use_tensorflow_backend()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=cli.HelpFormatter)
    p.add_argument("source", help="hf://OWNER/NAME or a local model folder")
    p.add_argument("--output", required=True, help="the run folder to write (must not exist)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    p.add_argument("--allow-pytorch-pickle", action="store_true",
                   help="read pytorch_model.bin with PyTorch's weights_only=True loader when "
                        "there is no model.safetensors")
    cli.add_verbose_argument(p)
    args = p.parse_args(argv)
    textfiles.check_output(args.output, args.overwrite, folder=True)  # before the download
    from keras_transformer.pretrained import from_preset, save_run  # after parsing: TensorFlow

    model, tokenizer = from_preset(args.source, allow_pytorch_pickle=args.allow_pytorch_pickle)
    save_run(model, tokenizer, args.output, source=args.source, overwrite=args.overwrite)
    config = model.config
    print(f"Imported {args.source}: {config.num_encoder_layers}+{config.num_decoder_layers} layers, "
          f"d_model {config.d_model}, {model.count_params() / 1e6:.1f}M parameters, vocabularies "
          f"{model.source_vocab_size}/{model.target_vocab_size}; wrote {args.output}.")

