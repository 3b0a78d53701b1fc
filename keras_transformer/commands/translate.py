"""Translates text, a line at a time, from standard input or a file; or an
HTML or .docx file whole.

    echo "Guten Morgen! Wie geht es dir?" | keras-transformer translate runs/ding
    keras-transformer translate runs/ding --input de.txt --output en.txt --beam-size 4
    keras-transformer translate runs/ding --input page.html --output page.en.html
    keras-transformer translate runs/ding --input letter.docx --output letter.en.docx

Defaults are the model's, the paper's unless its run chose otherwise (the
demo chooses the length penalty): beam 4, length penalty 0.6, output up to
the input length + 50 tokens. --sampling-topk K draws each translation from the
model's distribution instead (the K most likely tokens, 0 for all), as
back-translation wants it. Every input line gives one output line: a line of
several sentences is split into them (by the rules of the model's source
language, --source-language to choose), they are translated and joined back
with the line's own spacing (--no-split, or --n-best, takes each line as one
input); empty and blank lines give empty lines; bytes that are not UTF-8 are
replaced, and sentences longer than the model accepts are cut, each with a
warning naming their lines (--overlong error refuses them instead, before
translating). --output is written whole, only when everything is
translated, and never replaces a file without --overwrite.

An --input ending in .html or .htm (or --format html) is translated as one
HTML document: the text of its blocks, its tags, attributes, comments and
entities kept, its inline tags around the words they marked; one ending in
.docx as a Word document (--output required): every paragraph, table cell,
header and footer, each run's formatting kept (docs/serving-clients.md).

Files of any size: text is read --window lines at a time, the sentences of
each window sorted by length, cut into batches of --batch-tokens source
tokens and translated, and its lines written in their order, so that memory
does not grow with the file. A progress line (lines, tokens per second,
time left) shows on standard error when it is a terminal.

--glossary FILE (DeepL's TSV or CSV, or TBX: docs/glossaries.md) makes every
sentence that holds one of its source terms use its target term: the search
places each term (lexically constrained beam search, a beam of at least 4),
and warns, naming the line, where the output limit came first. The keras
runtime takes it; the exports' engines run searches of their own.

--format jsonl writes, for each input line, one JSON object: its
`translation`, its `confidence` (the probability that it is good, from the
model's own signals and the run's calibrator: docs/trust.md; the least of
its sentences'; null without a calibrator) and its `flags` (repetition,
runaway, copy, untranslated, omission: what is wrong with it, where it
shows). A translation that loops or runs away is searched again with the
n-grams it repeats banned (the guard; --no-guard turns it off); one that
every try repeats is cut before its loop and keeps its flag.

Lines typed at a terminal are translated one at a time as they come, each
by the faster search of a lone sentence (on onnxruntime, as serve searches
a lone request).

--runtime translates an export (keras-transformer export) with one of its
formats, as serve does: saved_model, ctranslate2, onnx or litert
(keras_transformer/runtimes says what each needs).

    keras-transformer translate exports/ding --runtime litert --input de.txt
"""

import argparse
import itertools
import json
import os
import sys

from keras_transformer import cli, documents, run_folder, runtimes, textfiles, trust
from keras_transformer.glossary import Glossary
from keras_transformer.batch_defaults import DEFAULT_WINDOW, decoding_kernels, share_cores
from keras_transformer.names import OVERLONG, RUNTIMES

DOCUMENT_EXTENSIONS = {".html": "html", ".htm": "html", ".docx": "docx"}
"""Inputs translated as one document, by extension."""

cli.use_tensorflow_backend()


def windows(lines, size):
    """`(start, list)`: the lines in lists of `size`, with the index of the first."""
    lines = iter(lines)
    for start in itertools.count(0, size):
        window = list(itertools.islice(lines, size))
        if not window:
            return
        yield start, window


def jsonl_line(document, assessed):
    """One output line of `--format jsonl`: the line's translation (its
    sentences' joined), the least confidence of its sentences (null where
    one has none) and the flags of any of them (`trust.combined`)."""
    return json.dumps({"translation": document.render([text for text, _ in assessed])}
                      | trust.combined([quality for _, quality in assessed]).as_dict(),
                      ensure_ascii=False)


def n_best_line(hypotheses):
    """One output line of `--n-best`: each translation and its score, tab
    separated."""
    return "\t".join(f"{text}\t{score:.4f}" for text, score in hypotheses)


class TranslatorEngine:
    """What translates the sentences: the `Translator` on a run folder."""

    def __init__(self, translator, glossary=None):
        self.translator, self.glossary = translator, glossary
        self.limit = translator.model.config.max_source_tokens
        self.quality_note = translator.calibration_note and (
            f"its confidence is null: {translator.calibration_note}")

    def search_lone_faster(self):
        """Lone sentences on onnxruntime (`Translator.search_lone_on_onnxruntime`),
        where the translator's search can be written as its graphs."""
        try:
            self.translator.search_lone_on_onnxruntime()
        except ValueError:  # sampling, a half precision: the traced search serves
            pass

    def translate_assessed(self, sentences, on_batch):
        """`(translation, trust.Quality)` of each sentence."""
        return self.translator.translate(sentences, on_batch=on_batch, quality=True,
                                         on_overlong=lambda indexes, limit: None,
                                         glossary=self.glossary)

    def lengths(self, sentences):
        return self.translator.source_lengths(sentences)

    def translate(self, sentences, n_best, on_batch):
        return self.translator.translate(sentences, n_best=n_best, on_batch=on_batch,
                                         on_overlong=lambda indexes, limit: None,
                                         glossary=self.glossary)

    def translate_aligned(self, sentences, marked):
        """The translations, and the alignments of those at indexes `marked`
        (a dict), all kept by the search where any is asked for."""
        if not marked:
            return self.translate(sentences, None, None), {}
        found = self.translator.translate(sentences, aligned=True,
                                          on_overlong=lambda indexes, limit: None,
                                          glossary=self.glossary)
        return [translation for translation, _ in found], {
            index: alignment for index, (_, alignment) in enumerate(found)}


class RuntimeEngine:
    """What translates the sentences: an export's runtime (`--runtime`),
    batched as the Translator batches (`runtimes.translate_sorted`)."""

    def __init__(self, runtime, batch_tokens, batch_size):
        self.runtime, self.batch_tokens, self.batch_size = runtime, batch_tokens, batch_size
        self.limit = runtime.max_source_tokens
        self.quality_note = runtime.quality_note and (
            f"the {runtime.name} runtime's {runtime.quality_note}")

    def search_lone_faster(self):
        self.runtime.search_lone_faster(self.runtime.threads)

    def translate_assessed(self, sentences, on_batch):
        """`(translation, trust.Quality)` of each sentence (`Runtime.assess`)."""
        translations = self.translate(sentences, None, on_batch)
        return list(zip(translations, self.runtime.assess(sentences, translations)))

    def lengths(self, sentences):
        return self.runtime.source_lengths(sentences)

    def translate(self, sentences, n_best, on_batch):
        results = runtimes.translate_sorted(self.runtime, sentences, n_best or 1,
                                            self.batch_tokens, self.batch_size,
                                            on_batch=on_batch)
        return results if n_best else [row[0][0] for row in results]

    def translate_aligned(self, sentences, marked):
        """The translations, and the alignments of those at indexes `marked`
        (a dict), by the runtime's `align`."""
        found = self.translate(sentences, None, None)
        alignments = self.runtime.align([sentences[i] for i in marked],
                                        [found[i] for i in marked]) if marked else []
        return found, dict(zip(marked, alignments))


def overlong_lines(engine, read, start):
    """The numbers (from 1) of the lines among the documents `read` (those
    of lines `start`, `start + 1`, ...) that hold a sentence longer than the
    model accepts."""
    owners = [start + index + 1 for index, document in enumerate(read)
              for _ in document.sentences]
    lengths = engine.lengths([sentence for document in read for sentence in document.sentences])
    return sorted({line for line, length in zip(owners, lengths) if length > engine.limit})


def translate_lines(args, engine, source, lines, language):
    """Translates text a window of lines at a time: each line's sentences
    (split unless --no-split or --n-best), the window's sentences searched
    together, each line joined back."""
    split = not (args.no_split or args.n_best)

    def read_line(line):
        """A line as a document; a blank one gives an empty line."""
        return documents.TextDocument(line if line.strip() else "", language, split)

    if args.overlong == "error":
        if args.input is None:  # standard input can be read only once
            lines = list(lines)
        for start, window in windows(lines if args.input is None
                                     else textfiles.LineStream(args.input), args.window):
            cli.overlong_lines(source.name, overlong_lines(engine, [read_line(line)
                                                                    for line in window], start),
                               engine.limit, refuse=True)
    progress = cli.Progress(textfiles.count_lines(args.input) if args.input else None)
    with textfiles.line_writer(args.output) as write:
        for start, window in windows(lines, args.window):
            for note in source.new_warnings():
                cli.warn(note)
            read = [read_line(line) for line in window]
            cli.overlong_lines(source.name, overlong_lines(engine, read, start), engine.limit,
                               refuse=False)
            sentences = [sentence for document in read for sentence in document.sentences]
            if args.format == "jsonl":
                results = iter(engine.translate_assessed(sentences, progress.update))
                write([jsonl_line(document, [next(results) for _ in document.sentences])
                       for document in read])
                continue
            results = iter(engine.translate(sentences, args.n_best, progress.update))
            if args.n_best:  # one sentence a line
                write([n_best_line(next(results)) for _ in read])
            else:
                write([document.render([next(results) for _ in document.sentences])
                       for document in read])
    progress.close()


def translate_document(args, engine, language, kind):
    """Translates the whole --input as one HTML or .docx document and writes
    --output (standard output for HTML without it)."""
    data = textfiles.read_bytes(args.input) if args.input else sys.stdin.buffer.read()
    name = args.input or "standard input"
    if kind == "docx":
        try:  # the serve extra's: imported where its absence gets one line
            from keras_transformer.documents.docx import DocxDocument
        except ImportError as error:
            raise ImportError(f"translating a .docx needs {error.name}: pip install "
                              "\"keras-transformer[serve]\"") from None
        document = DocxDocument(data, language)
    else:
        text, notes = textfiles.decode_text(data, name)
        for note in notes:
            cli.warn(note)
        document = documents.HtmlDocument(text, language)
    lengths = engine.lengths(document.sentences)
    too_long = sum(length > engine.limit for length in lengths)
    if too_long and args.overlong == "error":
        raise ValueError(f"{name}: {too_long} sentence(s) exceeded the model's {engine.limit} "
                         "tokens; shorten or split them, or leave out --overlong error to cut them.")
    if too_long:
        cli.warn(f"{name}: {too_long} sentence(s) exceeded the model's {engine.limit} tokens; "
                 "only their first tokens were translated.")

    translations, alignments = engine.translate_aligned(document.sentences,
                                                        documents.marked_sentences([document]))
    result, = documents.render_documents([document], translations, alignments)
    textfiles.write_output(args.output, result)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=cli.HelpFormatter)
    parser.add_argument("run_dir", help="a training output folder (or an export, with --runtime)")
    parser.add_argument("--input", help="the text, a line at a time, or an .html, .htm or .docx "
                                        "file translated whole (default: standard input)")
    parser.add_argument("--output", help="the translations, one a line, or the translated "
                                         "document (default: standard output)")
    parser.add_argument("--format", choices=("text", "html", "jsonl"),
                        help="how to read the input and write the output; jsonl reads text and "
                             "writes a JSON object a line: translation, confidence and flags "
                             "(default: html for an .html or .htm --input, else text)")
    parser.add_argument("--no-split", action="store_true",
                        help="translate each line as one input, not sentence by sentence")
    parser.add_argument("--source-language",
                        help="the language whose rules split sentences (default: the model's "
                             "source language where its folder says it, else English)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--model-file", help="the weights in the run folder (default: "
                                                "averaged.keras, else model.keras)")
    cli.add_search_arguments(parser)
    cli.add_guard_argument(parser)
    parser.add_argument("--n-best", type=cli.positive_int,
                        help="print the n best, TAB-separated with scores (default: the best "
                             "only, without scores)")
    parser.add_argument("--batch-tokens", type=cli.positive_int,
                        help="source tokens per batch, padding included (default: 2048 for "
                             "beam search, 4096 for greedy)")
    parser.add_argument("--batch-size", type=cli.positive_int,
                        help="at most this many lines per batch (default: no limit)")
    parser.add_argument("--window", type=cli.positive_int, default=DEFAULT_WINDOW,
                        help="lines read ahead and sorted together")
    cli.add_precision_argument(parser)
    parser.add_argument("--overlong", choices=OVERLONG, default="truncate",
                        help="lines longer than the model accepts: cut them (with a warning "
                             "naming them) or stop before translating")
    cli.add_sampling_arguments(parser)
    parser.add_argument("--runtime", choices=RUNTIMES,
                        help="translate an export with this runtime (default: keras, the "
                             "Translator on the folder's .keras model)")
    parser.add_argument("--threads", type=cli.positive_int,
                        help="CPU threads of a CTranslate2, ONNX or LiteRT model (default: the "
                             "runtime's own choice)")
    parser.add_argument("--glossary", metavar="FILE",
                        help="terms every translation uses: a .tsv or .csv (DeepL's) or .tbx "
                             "file (docs/glossaries.md; default: none)")
    cli.add_verbose_argument(parser)
    args = parser.parse_args()
    cli.check_sampling(parser, args)
    if args.sampling_topk is not None and args.n_best:
        parser.error("--sampling-topk draws one translation; leave out --n-best")
    by_runtime = args.runtime not in (None, "keras")
    if by_runtime and (args.model_file or args.precision):
        parser.error("--model-file and --precision are the keras runtime's; leave them out with "
                     f"--runtime {args.runtime}")
    if not by_runtime and args.threads:
        parser.error("--threads is for the ctranslate2, onnx and litert runtimes (TensorFlow "
                     "takes TF_NUM_INTRAOP_THREADS); give --runtime or leave it out")
    if by_runtime and not args.guard:
        parser.error("--no-guard is the keras runtime's (the exports' engines run their own "
                     f"searches); leave it out with --runtime {args.runtime}")
    if args.glossary and (by_runtime or args.sampling_topk is not None):
        parser.error("--glossary is obeyed by the keras runtime's beam search; leave out "
                     f"{'--runtime ' + args.runtime if by_runtime else '--sampling-topk'}")

    kind = DOCUMENT_EXTENSIONS.get(os.path.splitext(args.input or "")[1].lower(), "text")
    if kind == "docx" and (args.format or not args.output):
        parser.error("a .docx --input is translated whole into a .docx: give --output FILE.docx, "
                     "and no --format")
    kind = args.format or kind
    if kind in ("html", "docx") and (args.n_best or args.no_split):
        parser.error("--n-best and --no-split are for text; an HTML or .docx input is "
                     "translated sentence by sentence")
    if kind == "jsonl" and (args.n_best or args.sampling_topk is not None):
        parser.error("--format jsonl gives the best translation's confidence; leave out "
                     f"{'--n-best' if args.n_best else '--sampling-topk'}")
    language = args.source_language or (run_folder.languages(args.run_dir) or ("en",))[0]

    # Everything that can be wrong with the files is found before the model
    # is loaded.
    if args.output:
        textfiles.check_output(args.output, args.overwrite)
    if args.glossary:
        args.glossary = Glossary.read(args.glossary, language,
                                      (run_folder.languages(args.run_dir) or (None, None))[1])
    if kind in ("html", "docx"):
        engine = open_engine(args, by_runtime)
        translate_document(args, engine, language, kind)
        return
    source = textfiles.LineStream(args.input)
    lines = iter(source)
    first = next(lines, None)
    if first is None:
        cli.warn(f"{source.name} is empty; there is nothing to translate")
        textfiles.write_lines([], args.output)
        return
    lines = itertools.chain([first], lines)
    # Lines typed at a terminal: each translated as it comes, alone, by the
    # faster search of a lone sentence.
    typed = args.input is None and sys.stdin.isatty() and args.window == DEFAULT_WINDOW
    if typed:
        args.window = 1
    engine = open_engine(args, by_runtime)
    if typed:
        engine.search_lone_faster()
    if kind == "jsonl" and engine.quality_note:
        cli.warn(f"{args.run_dir}: {engine.quality_note}")
    translate_lines(args, engine, source, lines, language)


def language_detector(run_dir):
    """`text -> language code` among the run's two languages, which flags
    translations left in the source language (`--format jsonl`), where the
    serve extra's detector is installed and the run says its languages;
    else None."""
    languages = run_folder.languages(run_dir)
    try:  # the serve extra's; without it that flag is not checked
        from keras_transformer.documents.detection import Detector
    except ImportError:
        return None
    return Detector(languages).language if languages else None


def open_engine(args, by_runtime):
    """The `TranslatorEngine` or `RuntimeEngine` the options ask for."""
    decoding_kernels(args.precision)
    detect = language_detector(args.run_dir) if args.format == "jsonl" else None
    if by_runtime:
        decoding = runtimes.Decoding(args.beam_size, args.alpha, args.decode_margin,
                                     args.sampling_topk, args.sampling_temperature, args.seed)
        runtime = runtimes.open_runtime(args.run_dir, args.runtime, decoding, args.threads)
        runtime.detect = detect
        return RuntimeEngine(runtime, args.batch_tokens, args.batch_size)
    share_cores()
    # After parsing: the TensorFlow side loads once the options are known good.
    from keras_transformer.decoding import Sampling, Translator

    sampling = None if args.sampling_topk is None else Sampling(
        args.sampling_topk, args.sampling_temperature, args.seed)
    return TranslatorEngine(Translator.from_directory(
        args.run_dir, model_file=args.model_file, beam_size=args.beam_size, alpha=args.alpha,
        decode_margin=args.decode_margin, batch_tokens=args.batch_tokens,
        batch_size=args.batch_size, precision=args.precision, overlong=args.overlong,
        sampling=sampling, guard=args.guard, detect=detect), args.glossary)
