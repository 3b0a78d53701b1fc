"""Tokenizes a corpus once into TFRecord shards for train.py (Apache Beam).

    keras-transformer prepare-data --dataset ding --tokenizer runs/ding \\
        --output data/ding-prepared --shards 8
    keras-transformer train --output runs/ding-2 --dataset prepared:data/ding-prepared

    # two local worker processes
    keras-transformer prepare-data ... --direct_running_mode=multi_processing \\
        --direct_num_workers=2

The tokenizer is a training run's or an imported model's (--tokenizer), or a
new SentencePiece model trained on the corpus as train.py would
(--vocab-size). Pairs longer than --max-length tokens (default: the
--tokenizer run's max_length) are dropped and counted. Arguments this
command does not know are Apache Beam pipeline options (--runner, --project,
--flink_master, ...): the job runs in this process unless they say
otherwise. A local --output appears whole, only when the job succeeds.
"""

import argparse

from keras_transformer import cli, run_folder
from keras_transformer.names import DING_PATH, TOKENIZER_TYPES

cli.use_tensorflow_backend()


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--dataset", required=True,
                   help="'ding', a TFDS translation dataset, or a folder of local files")
    p.add_argument("--source-language")
    p.add_argument("--target-language")
    p.add_argument("--data-dir", help="TFDS data folder (on a cluster, one the workers read)")
    p.add_argument("--ding-path", help="the Ding dictionary file (default: trans-de-en's)")
    tokenizer = p.add_mutually_exclusive_group(required=True)
    tokenizer.add_argument("--tokenizer", metavar="RUN_OR_MODEL",
                           help="a training run or imported model whose tokenizer to use")
    tokenizer.add_argument("--vocab-size", type=cli.positive_int,
                           help="train a SentencePiece model of this many pieces on the corpus")
    p.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES,
                   help="the SentencePiece algorithm of a --vocab-size model (see train; "
                        "default: bpe)")
    p.add_argument("--max-length", type=cli.positive_int,
                   help="longest pair in tokens, end token included (default: the --tokenizer "
                        "run's)")
    p.add_argument("--output", required=True, help="the folder to write")
    p.add_argument("--shards", type=cli.positive_int, required=True,
                   help="training shard files (at least the number of training workers)")
    p.add_argument("--parts", type=cli.positive_int,
                   help="pieces the corpus is read in, in parallel (default: --shards)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    p.add_argument("--seed", type=int, default=1234, help="for --vocab-size")
    cli.add_verbose_argument(p)
    return p


def main(argv=None):
    """Runs the command on `argv` (default: the command line)."""
    p = parser()
    args, beam_args = p.parse_known_args(argv)
    if args.tokenizer and args.tokenizer_type:
        p.error("--tokenizer-type is for a model trained with --vocab-size; the --tokenizer "
                "run's own model is used as it is.")
    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.pipelines.runner import check_output_folder, pipeline_options
    from keras_transformer.data.prepared import INFO_FILE

    pipeline_options(beam_args)  # a misspelt option stops here, before any work
    check_output_folder(args.output, args.overwrite, INFO_FILE)

    from keras_transformer import data
    from keras_transformer.pipelines.prepare_data import prepare_data

    corpus = data.corpus(args.dataset, args.source_language, args.target_language,
                         data_dir=args.data_dir, ding_path=args.ding_path or DING_PATH)
    max_length = args.max_length
    if args.tokenizer:
        tokenizer = run_folder.load_tokenizer(args.tokenizer)
        if max_length is None and run_folder.has_config(args.tokenizer):
            max_length = run_folder.load_config(args.tokenizer, option="--tokenizer").max_length
    if max_length is None:
        raise ValueError("Give --max-length (the presets': small 64, base and big 256), or a "
                         "--tokenizer run whose config.json has it.")
    if args.vocab_size:
        tokenizer = data.train_corpus_tokenizer(
            corpus, None, args.vocab_size, seed=args.seed,
            model_type=args.tokenizer_type or "bpe")
    settings = {key: value for key, value in vars(args).items()
                if key not in ("overwrite", "verbose")}
    settings["tokenizer_type"] = getattr(tokenizer, "model_type", None)  # what the shards hold
    info = prepare_data(corpus, tokenizer, args.output, args.shards, max_length, beam_args,
                        parts=args.parts, overwrite=args.overwrite,
                        settings=settings | {"beam_options": beam_args})
    report = data.LengthReport(**info["train"])
    print(f"Wrote {args.shards} shards to {args.output}: {report}.")

