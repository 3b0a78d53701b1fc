"""Translates many text files with an export or a run, on Apache Beam (back-translation).

    keras-transformer export runs/en-de --output exports/en-de
    keras-transformer translate-corpus exports/en-de --input 'mono/news.*.en' \\
        --output bt/news --parallel-corpus

    # CTranslate2, two local worker processes
    keras-transformer translate-corpus exports/en-de --input 'mono/*.en' --output bt/news \\
        --runtime ctranslate2 --direct_running_mode=multi_processing --direct_num_workers=2

Writes translations-*.jsonl (one {"file", "line", "translation"} record an
input line, blank lines giving "") and, with --parallel-corpus,
corpus/train.tsv ("translation TAB source" lines) that train.py and
prepare_data.py read once a validation.tsv is beside it; then
translate_corpus.json (files, line counts, settings). --sampling-topk K
draws each translation from the model's distribution instead of beam search
(Edunov et al. 2018: sampled back-translations train better models).
Input files are read
as translate reads them: a line of several sentences is split into them and
joined back with its own spacing (--no-split takes a line as one input),
bytes that are not UTF-8 are replaced and sentences longer than the model
accepts are cut, each with a warning naming the lines. A local --output appears whole, only when every line is translated:
after a kill, run the same command again. Arguments this command does not
know are Apache Beam pipeline options (--runner, --project, ...).
"""

import argparse

from keras_transformer import cli
from keras_transformer.names import RUNTIMES
from keras_transformer.runtimes import Decoding
from keras_transformer.textfiles import Lines

cli.use_tensorflow_backend()


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("export_dir", metavar="MODEL",
                   help="a folder written by keras-transformer export, or a run folder")
    p.add_argument("--input", required=True, metavar="GLOB",
                   help="the files to translate (quote the glob); .gz files are decompressed")
    p.add_argument("--output", required=True, help="the folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    p.add_argument("--runtime", choices=RUNTIMES,
                   help="default: keras for a run folder; an export's saved_model, else "
                        "ctranslate2, else onnx")
    cli.add_search_arguments(p)
    p.add_argument("--batch-size", type=cli.positive_int,
                   help="most sentences in a search (default: no limit but --batch-tokens)")
    p.add_argument("--batch-tokens", type=cli.positive_int,
                   help="most source tokens in a search (default: translate's, 2048 for beam "
                        "search, 4096 for greedy search and sampling)")
    p.add_argument("--shards", type=cli.non_negative_int, default=0,
                   help="translation files to write (0: the runner chooses)")
    p.add_argument("--parallel-corpus", action="store_true",
                   help="also write corpus/train.tsv: translation TAB source")
    p.add_argument("--no-split", action="store_true",
                   help="translate each line as one input, not sentence by sentence")
    p.add_argument("--source-language",
                   help="the language whose rules split sentences (default: the model's source "
                        "language where its folder says it, else English)")
    p.add_argument("--threads", type=cli.positive_int,
                   help="CPU threads of a CTranslate2, ONNX or LiteRT model")
    p.add_argument("--glossary", metavar="FILE",
                   help="terms every translation uses: a .tsv or .csv (DeepL's) or .tbx file "
                        "(docs/glossaries.md; the keras runtime); local or remote (gs://)")
    cli.add_sampling_arguments(p)
    cli.add_verbose_argument(p)
    return p


def main(argv=None):
    """Runs the command on `argv` (default: the command line)."""
    p = parser()
    args, beam_args = p.parse_known_args(argv)
    cli.check_sampling(p, args)
    # After parsing: Apache Beam and TensorFlow load once the options are known good.
    from keras_transformer.pipelines.runner import pipeline_options

    pipeline_options(beam_args)  # a misspelt option stops here, before any work
    from keras_transformer.pipelines.translate_corpus import translate_corpus

    manifest = translate_corpus(
        args.export_dir, args.input, args.output, runtime=args.runtime,
        decoding=Decoding(args.beam_size, args.alpha, args.decode_margin, args.sampling_topk,
                          args.sampling_temperature, args.seed),
        batch_size=args.batch_size, batch_tokens=args.batch_tokens, shards=args.shards,
        parallel_corpus=args.parallel_corpus, beam_args=beam_args, overwrite=args.overwrite,
        threads=args.threads, language=args.source_language, split=not args.no_split,
        glossary=args.glossary)
    for path, notes in manifest["inputs"].items():
        for note in Lines(path, [], notes["replaced"], notes["nul"]).warnings():
            cli.warn(note)
        cli.overlong_lines(path, notes["overlong"], manifest["max_source_tokens"], refuse=False)
    lines = sum(notes["lines"] for notes in manifest["inputs"].values())
    print(f"Translated {lines} lines of {len(manifest['inputs'])} file(s) into {args.output}.")

