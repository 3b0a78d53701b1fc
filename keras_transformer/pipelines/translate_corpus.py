"""Translates many text files with an export or a run folder on Apache Beam
(`keras-transformer translate-corpus`): monolingual text for back-translation
(Sennrich et al. 2016; Edunov et al. 2018), or any corpus too large for one
`keras-transformer translate` run.

The pipeline: `Create(files)` -> each file's lines, read by `textfiles`'
rules and numbered, with their length in tokens (the export's own tokenizer)
-> `Reshuffle` (spread over the workers) -> `SortAndBatchElements` (each
bundle sorted by length and cut into searches of `batch_tokens` tokens,
translate.py's budget by default, and at most `batch_size` sentences, as
CTranslate2 and translate.py batch; the SavedModel runtime's batches hold
two searches, run at once)
-> `RunInference` with `ExportModelHandler` -> JSON-lines shards of
`{"file", "line", "translation", "confidence", "flags"}` (how far to trust
each line's translation, as `translate --format jsonl` writes it), and
optionally a parallel corpus
`corpus/train.tsv` of `translation TAB source` lines (blank lines left out,
in no particular order), which `train.py` and `prepare_data.py` read as a
local corpus folder (add a validation.tsv beside it). `translate_corpus.json`
is written last: the files, their line counts, the settings and what was
repaired or cut, by line.

(Beam's own length-aware batching does not serve here: in 2.77 `BatchElements`
rejects the `max_batch_weight` a `ModelHandler` passes it, and its length
buckets work only on its stateful, timer-driven path.)

A killed run leaves no output (a local output folder appears whole, only
when the job succeeds; on a remote one Beam moves its files into place only
then): run the same command again. Every input line gives exactly one
record.
"""

import codecs
import dataclasses
import json
import os
import typing

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import RunInference

from keras_transformer import run_folder
from keras_transformer.batch_defaults import default_batch_tokens
from keras_transformer.documents import TextDocument
from keras_transformer.pipelines.export_handler import ExportModelHandler
from keras_transformer.pipelines.runner import check_output_folder, output_folder, pipeline_options
from keras_transformer.glossary import GlossaryError
from keras_transformer.runtimes import Decoding, check_runtime, default_runtime
from keras_transformer.textfiles import check_unicode_mark, decode_line

MANIFEST = "translate_corpus.json"
TRANSLATIONS = "translations"
CORPUS = os.path.join("corpus", "train.tsv")
NOTES = ("replaced", "nul", "overlong")


class Line(typing.NamedTuple):
    """An input line: which file (index into the file list), its number
    (from 1), its text, and its length in tokens (at most the model's)."""

    file: int
    number: int
    text: str
    tokens: int


class _ReadLines(beam.DoFn):
    """A file's index -> its `Line`s, and (tagged "notes") `(file, kind,
    line number)` for each line repaired or cut."""

    def __init__(self, files, export_dir, limit, language, split):
        self.files = files
        self.export_dir = export_dir
        self.limit = limit
        self.language, self.split = language, split

    def setup(self):
        self.tokenizer = run_folder.load_text_tokenizer(self.export_dir)

    def process(self, index):
        with FileSystems.open(self.files[index]) as stream:
            number = 0
            while raw := stream.readline():
                number += 1
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]
                text, replaced, nul = decode_line(raw)
                lengths = [len(self.tokenizer.encode(sentence)) for sentence
                           in TextDocument(text, self.language, self.split).sentences]
                overlong = any(length > self.limit for length in lengths)
                for kind, happened in zip(NOTES, (replaced, nul, overlong)):
                    if happened:
                        yield beam.pvalue.TaggedOutput("notes", (index, kind, number))
                yield Line(index, number, text,
                           max(sum(min(length, self.limit) + 1 for length in lengths) - 1, 0))


def _record(result, files):
    line, (translation, quality) = result.example, result.inference
    return json.dumps({"file": files[line.file], "line": line.number, "translation": translation}
                      | quality.as_dict(), ensure_ascii=False)


def _corpus_lines(result):
    source = result.example.text
    if source.strip():
        yield result.inference[0].replace("\t", " ") + "\t" + source


def _write_manifest(_, folder, manifest, lines, notes, outputs):
    by_file = {path: {"lines": lines.get(index, 0)} | {kind: [] for kind in NOTES}
               for index, path in enumerate(manifest["files"])}
    for index, kind, number in sorted(notes):
        by_file[manifest["files"][index]][kind].append(number)
    manifest = manifest | {"inputs": by_file,
                           "outputs": sorted(os.path.relpath(path, folder) for path in outputs)}
    path = os.path.join(folder, MANIFEST)
    with FileSystems.create(path + ".partial") as file:
        file.write((json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    FileSystems.rename([path + ".partial"], [path])


def input_files(pattern):
    """The files a glob (local or remote) matches, sorted; each checked not
    to be UTF-16 or UTF-32.

    Raises:
        ValueError: nothing matches, or a file is UTF-16/32.
    """
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as error:  # Beam raises BeamIOError (an IOError) or ValueError
        raise ValueError(f"Cannot list {pattern}: {str(error).splitlines()[0]}") from None
    files = sorted(item.path for item in matched if not item.path.endswith("/"))
    if not files:
        raise ValueError(f"No file matches {pattern!r}; check the path (quote a glob so that "
                         "the shell leaves it to this command).")
    for path in files:
        with FileSystems.open(path) as stream:
            check_unicode_mark(stream.read(4), path, path)
    return files


def translate_corpus(export_dir, pattern, output, runtime=None, decoding=Decoding(),
                     batch_size=None, batch_tokens=None, shards=0, parallel_corpus=False,
                     beam_args=(), overwrite=False, threads=None, language=None, split=True,
                     glossary=None):
    """Runs the pipeline and returns the manifest it wrote
    (`translate_corpus.json`).

    Args:
        export_dir: a folder written by `keras-transformer export`, or a
            run folder.
        pattern: the input files, a glob (local, or remote such as gs://).
        output: the folder to write.
        runtime: one of `runtimes.RUNTIMES` (`ExportModelHandler`; default:
            keras for a run folder, an export's saved_model, else
            ctranslate2, else onnx).
        decoding: a `Decoding` (defaults: the model's).
        batch_size: most sentences in a search (default: no limit but
            `batch_tokens`).
        batch_tokens: most source tokens in a search, end tokens included
            (default: `translate`'s, `batch_defaults.default_batch_tokens`).
            Beam sums the lengths; in batches sorted by length that is
            about the count with padding that `translate` uses. The
            SavedModel runtime's batches hold `DEFAULT_IN_FLIGHT` searches,
            run at once (`ExportModelHandler`).
        shards: output files of translations (0: the runner chooses).
        parallel_corpus: also write `corpus/train.tsv`.
        beam_args: Beam pipeline options.
        overwrite: replace an existing output.
        threads: CPU threads of a CTranslate2 model.
        language: the language whose rules split a line into sentences
            (default: the model's source language where its folder says,
            else English's).
        split: translate each line sentence by sentence, joined back with its
            own spacing; False takes a line as one input.
        glossary: the path of a glossary file every translation obeys (the
            keras runtime; `glossary.FORMATS`, by its extension), read here
            and by each worker.

    Raises:
        ValueError, FileExistsError, FileNotFoundError: bad options,
            inputs or export, found before any work.
    """
    options = pipeline_options(beam_args)
    export_dir, output = os.fspath(export_dir), os.fspath(output)
    runtime = runtime or default_runtime(export_dir)
    check_runtime(export_dir, runtime, decoding)
    config = run_folder.model_config(export_dir)
    limit = config["max_length"] - 1
    files = input_files(pattern)
    check_output_folder(output, overwrite, MANIFEST)
    if glossary is not None:
        try:
            with FileSystems.open(glossary) as file:
                glossary = (file.read(), os.path.splitext(glossary)[1].lstrip(".").lower())
        except (OSError, ValueError) as error:  # Beam's filesystems: either, in one line
            raise GlossaryError(f"Cannot read the glossary {glossary}: "
                                f"{' '.join(str(error).split())[:300]}") from None
    handler = ExportModelHandler(export_dir, runtime, decoding, threads, language=language,
                                 split=split, glossary=glossary)
    if batch_tokens is None:
        sampling = handler.decoding.sampling_topk is not None
        batch_tokens = default_batch_tokens(1 if sampling else handler.decoding.beam_size)
    manifest = {"export": export_dir, "runtime": runtime,
                "decoding": dataclasses.asdict(handler.decoding), "max_source_tokens": limit,
                "files": files}
    with output_folder(output, MANIFEST) as folder:
        with beam.Pipeline(options=options) as pipeline:
            read = (pipeline
                    | "Files" >> beam.Create(range(len(files)))
                    | "SpreadFiles" >> beam.Reshuffle()
                    | "Read" >> beam.ParDo(_ReadLines(files, export_dir, limit, handler.language,
                                                      handler.split))
                    .with_outputs("notes", main="lines"))
            translated = (read.lines
                          | "SpreadLines" >> beam.Reshuffle()
                          | "Batch" >> beam.SortAndBatchElements(
                              min_batch_size=1,
                              max_batch_size=(batch_size or batch_tokens) * handler.in_flight,
                              max_batch_weight=batch_tokens * handler.in_flight,
                              element_size_fn=lambda line: line.tokens + 1)
                          | "Translate" >> RunInference(handler.with_no_batching()))
            outputs = [translated
                       | "Records" >> beam.Map(_record, files)
                       | "WriteTranslations" >> beam.io.WriteToText(
                           os.path.join(folder, TRANSLATIONS), file_name_suffix=".jsonl",
                           num_shards=shards)]
            if parallel_corpus:
                outputs.append(translated
                               | "CorpusLines" >> beam.FlatMap(_corpus_lines)
                               | "WriteCorpus" >> beam.io.WriteToText(
                                   os.path.join(folder, CORPUS), num_shards=1,
                                   shard_name_template=""))
            line_counts = (read.lines
                           | "FileOfLine" >> beam.Map(lambda line: line.file)
                           | "LinesPerFile" >> beam.combiners.Count.PerElement())
            written = outputs | "AllOutputs" >> beam.Flatten()
            _ = (pipeline
                 | "Once" >> beam.Create([None])
                 | "Manifest" >> beam.Map(
                     _write_manifest, folder=folder, manifest=manifest,
                     lines=beam.pvalue.AsDict(line_counts), notes=beam.pvalue.AsList(read.notes),
                     outputs=beam.pvalue.AsList(written)))
        with FileSystems.open(os.path.join(folder, MANIFEST)) as file:
            return json.loads(file.read().decode("utf-8"))


def read_translations(output):
    """`{(file, line): translation}` of a finished output folder.

    Raises:
        ValueError: a line has two records (which a finished job never
            writes).
    """
    matched = FileSystems.match([os.path.join(output, f"{TRANSLATIONS}*.jsonl")])[0].metadata_list
    translations = {}
    for item in matched:
        with FileSystems.open(item.path) as file:
            for line in file.read().decode("utf-8").splitlines():
                record = json.loads(line)
                key = record["file"], record["line"]
                if key in translations:
                    raise ValueError(f"{output} translates line {key[1]} of {key[0]} twice.")
                translations[key] = record["translation"]
    return translations
