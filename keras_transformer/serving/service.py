"""What every API of the server translates with, whatever its request
shapes: the models and the pairs they reach (directly or through English),
one `Batcher` a model, language detection, texts and files read as
documents, translated and written back, and the translated files kept for
download. The APIs (`libretranslate`) turn their fields into calls of
`Service` and its answers and refusals (`errors.Refused`) into their own
bodies.
"""

import asyncio
import contextlib
import os
import re
import tempfile
import unicodedata
import uuid

from keras_transformer import documents, trust
from keras_transformer.batch_defaults import default_batch_tokens
from keras_transformer.documents.alignment import compose
from keras_transformer.documents.detection import NONE, Detector
from keras_transformer.documents.docx import DocxDocument
from keras_transformer.glossary import GlossaryError
from keras_transformer.serving.batcher import Batcher, QueueFull
from keras_transformer.serving.errors import Refused
from keras_transformer.serving.metrics import Metrics

PIVOT = "en"
"""The language a request goes through where no model translates its pair."""

LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish",
    "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian",
    "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}
"""Names of the languages `/languages` lists (LibreTranslate's, in English);
other codes are listed by their code."""

FILE_FORMATS = {".txt": "text", ".html": "html", ".htm": "html", ".docx": "docx"}
"""The files the server translates, by extension."""


def language_name(code):
    return LANGUAGE_NAMES.get(code, code)


def translatable(text):
    """Whether `text` holds anything to translate: a letter of any script.
    Emoji, digits, punctuation and symbols alone are answered as they are
    (LibreTranslate echoes emoji; a model given "42" or "🙂" can only make
    something up)."""
    return any(unicodedata.category(character).startswith("L") for character in text)


def obeys_glossaries(runtime):
    """Whether a model's `runtimes.Runtime` obeys a glossary: the keras
    runtime's batches do; the exports' engines and continuous batching
    (slots) run searches of their own."""
    return runtime.takes_glossary and not runtime.slots


class _Routes:
    """Which models translate a language pair: the one that translates it,
    else the two that go through `PIVOT`; and the pairs a glossary applies
    to (`glossaries`: one model translates them, and obeys glossaries)."""

    def __init__(self, models):
        self.direct = {(model.source, model.target): model for model in models}
        self.glossaries = {pair for pair, model in self.direct.items()
                           if obeys_glossaries(model.runtime)}
        self.sources = sorted({model.source for model in models})
        self.languages = sorted({code for model in models for code in (model.source,
                                                                        model.target)})

    def route(self, source, target):
        """The models a text goes through, in order; None where none do."""
        if (source, target) in self.direct:
            return [self.direct[source, target]]
        if (source, PIVOT) in self.direct and (PIVOT, target) in self.direct:
            return [self.direct[source, PIVOT], self.direct[PIVOT, target]]
        return None

    def targets(self, source):
        return sorted(target for target in self.languages
                      if target != source and self.route(source, target))


class Service:
    """The models of `settings` (`app.Settings`), their queues, detection
    and files, for the APIs to call."""

    def __init__(self, settings):
        self.settings = settings
        self.routes = _Routes(settings.models)
        self.batchers = {model.name: Batcher(
            model.runtime,
            settings.batch_tokens or default_batch_tokens(model.runtime.decoding.beam_size),
            settings.max_wait, settings.max_queue, settings.workers)
            for model in settings.models}
        self.metrics = Metrics(self.batchers, settings.libretranslate_metrics)
        for name, batcher in self.batchers.items():
            batcher.observe = self.metrics.observer(name)
        self.detector = Detector(self.routes.sources)
        for model in settings.models:  # what flags a translation left in its source language
            model.runtime.detect = self.detector.language
        self.files_dir = settings.files_dir or tempfile.mkdtemp(prefix="keras-transformer-files-")
        self.most_alternatives = max(min(model.runtime.decoding.beam_size
                                         for model in settings.models) - 1, 0)
        """The alternatives every model can give (its beam size less one)."""

    def start(self):
        for batcher in self.batchers.values():
            batcher.start()

    async def stop(self):
        await asyncio.gather(*(asyncio.to_thread(batcher.stop)
                               for batcher in self.batchers.values()))

    # ------------------------------------------------------------ languages

    def languages(self):
        """LibreTranslate's `/languages`: each language, its name and the
        targets it reaches."""
        return [{"code": code, "name": language_name(code),
                 "targets": self.routes.targets(code)} for code in self.routes.languages]

    def models(self):
        """Each model's name, runtime, pair, alternatives, whether it aligns
        by attention and takes a glossary, what searches a lone sentence
        where it is not the runtime's own search (`Runtime.lone`), and its
        queue."""
        found = []
        for model in self.settings.models:
            found.append({"model": model.name, "runtime": model.runtime.name,
                          "languages": [model.source, model.target],
                          "max_alternatives": max(model.runtime.decoding.beam_size - 1, 0),
                          "aligns": model.runtime.aligns,
                          "glossaries": obeys_glossaries(model.runtime),
                          "lone": model.runtime.lone,
                          "queued_sentences": self.batchers[model.name].queued})
        return found

    def glossaries(self):
        """Each served glossary's name, pair and entries."""
        return [{"name": name, "languages": [served.source, served.target],
                 "entries": len(served.glossary)}
                for name, served in self.settings.glossaries.items()]

    def route(self, source, target):
        """The models from `source` to `target` (none for the same
        language), or a 400 naming what is not served."""
        if source not in self.routes.languages:
            raise Refused(400, f"{source} is not supported")
        if target not in self.routes.languages:
            raise Refused(400, f"{target} is not supported")
        if source == target:
            return []
        route = self.routes.route(source, target)
        if route is None:
            raise Refused(400, f"{language_name(target)} ({target}) is not available as a "
                               f"target language from {language_name(source)} ({source})")
        return route

    def glossary_route(self, source, target):
        """Raises a 400 unless one model translates `source` to `target` (a
        glossary's terms are the last model's target, found in the first's
        source)."""
        if source == "auto":
            raise Refused(400, "Invalid request: a glossary needs its source language; give "
                               "source (not auto)")
        if len(self.route(source, target)) > 1:  # (none: the same language, as it is)
            raise Refused(400, f"Invalid request: a glossary applies where one model translates "
                               f"the pair; {source} to {target} goes through {PIVOT}")

    def detect(self, text, text_format="text"):
        """`(language, detection)` of a text (LibreTranslate's
        `detectedLanguage` entry): among the served sources, from its words
        without markup; text with nothing to translate has none."""
        words = documents.text_of(text, text_format)
        if not translatable(words):
            return None, dict(NONE)
        found = self.detector.detect(words)[0]
        return found["language"], found

    # ------------------------------------------------------------ translating

    async def _translate_sentences(self, route, sentences, n_best, glossary=None):
        """The n-best hypotheses of each sentence along `route`, and each
        hop's `(model, sources, best translations)`. Sentences with nothing
        to translate (`translatable`) are their own translation. `glossary`
        (a route of one model only) is obeyed."""
        hypotheses = [[(sentence, 0.0)] for sentence in sentences]
        wanted = [index for index, sentence in enumerate(sentences) if translatable(sentence)]
        hops, current = [], list(sentences)
        for index, model in enumerate(route):
            n = n_best if index == len(route) - 1 else 1
            try:
                found = await self.batchers[model.name].translate(
                    [current[i] for i in wanted], n_best=n, glossary=glossary)
            except GlossaryError as error:
                raise Refused(400, f"Invalid request: {error}") from None
            except QueueFull:
                raise Refused(503, "The server is busy (its queue is full); try again shortly",
                              {"Retry-After": str(self.settings.retry_after)}) from None
            for at, hypotheses_of in zip(wanted, found):
                hypotheses[at] = hypotheses_of
            best = [found_of[0][0] for found_of in hypotheses]
            hops.append((model, current, best))
            current = best
        return hypotheses, hops

    async def _align_marked(self, hops, marked):
        """The alignments of the sentences at indices `marked` with their
        final translations, each hop's made by its model and composed
        through the pivot."""
        alignments = None
        for model, sources, best in hops:
            hop = await asyncio.to_thread(model.runtime.align, [sources[i] for i in marked],
                                          [best[i] for i in marked])
            alignments = hop if alignments is None else [
                compose(first, second) for first, second in zip(alignments, hop)]
        return dict(zip(marked, alignments or ()))

    async def _assess(self, hops, sentences):
        """The `trust.Quality` of each sentence's final translation along the
        `hops` (`_translate_sentences`): each hop's model's (`Runtime.assess`),
        the least confidence and the flags of any (`trust.combined`); None
        for a sentence with nothing to translate."""
        wanted = [index for index, sentence in enumerate(sentences) if translatable(sentence)]
        found = [None] * len(sentences)
        if not wanted or not hops:
            return found
        each_hop = [await asyncio.to_thread(model.runtime.assess, [sources[i] for i in wanted],
                                            [best[i] for i in wanted])
                    for model, sources, best in hops]
        for index, qualities in zip(wanted, zip(*each_hop)):
            found[index] = trust.combined(qualities)
        return found

    async def translate_documents(self, route, read, n_best=1, glossary=None, assess=False):
        """Translates the documents `read` along `route`, obeying
        `glossary`: their renderings, for plain text the alternatives of
        each (lists of str, the best's duplicates and blanks left out, as
        LibreTranslate leaves them out), and with `assess` the
        `trust.Quality` of each (`trust.combined` of its sentences'; else
        None)."""
        sentences = [sentence for document in read for sentence in document.sentences]
        if len(sentences) > self.settings.max_queue:
            raise Refused(413, f"{len(sentences)} sentences are more than this server queues "
                               f"({self.settings.max_queue}); send fewer at a time")
        hypotheses, hops = await self._translate_sentences(route, sentences, n_best, glossary)
        assessed = await self._assess(hops, sentences) if assess else None
        marked = documents.marked_sentences(read)
        alignments = await self._align_marked(hops, marked) if marked and hops else {}
        rendered = documents.render_documents(read, [found[0][0] for found in hypotheses],
                                              alignments)
        alternatives, qualities, at = [], [], 0
        for document, text in zip(read, rendered):
            mine = hypotheses[at:at + len(document.sentences)]
            if assess:
                qualities.append(trust.combined(assessed[at:at + len(document.sentences)]))
            at += len(document.sentences)
            others = [] if document.aligned else [
                document.render([found[min(k, len(found) - 1)][0] for found in mine])
                for k in range(1, n_best)]
            alternatives.append([other for index, other in enumerate(others)
                                 if other.strip() and other != text
                                 and other not in others[:index]])
        return rendered, alternatives, qualities if assess else [None] * len(read)

    async def translate_texts(self, texts, source, target, text_format="text", n_best=1,
                              glossary=None, reading=None, assess=False):
        """`(translations, alternatives, detections, qualities)` of `texts` (str each,
        `text_format` one of `documents.FORMATS`) from `source` ("auto":
        each text's language detected) into `target`: each text read as a
        document, its sentences translated in their model's batches, and
        written back; its alternatives (n_best - 1 at most, text only);
        and each text's detection (None unless "auto"). Texts with nothing
        to translate, and texts already in `target`, are answered as they
        are. `glossary` (with a given `source`, a pair one model
        translates: `glossary_route`) is obeyed. `reading` holds the
        options of `documents.read_document` (`split`, `lines`, `markup`).
        With `assess`, each text's `trust.Quality` (a text not translated:
        confidence None, no flags); else None each."""
        found = [self.detect(text, text_format) if source == "auto" else (source, None)
                 for text in texts]
        groups = {}
        for index, (language, _) in enumerate(found):
            if language is not None and language != target and translatable(texts[index]):
                groups.setdefault(language, []).append(index)
        for language, detection in found:  # every text routed, or refused, before any work
            if language is None:
                continue
            if detection is not None and detection["confidence"] == 0:
                if self.routes.route(language, target) is None and language != target:
                    raise Refused(400, "The language of a text could not be detected among "
                                       f"those served ({', '.join(self.routes.sources)}); give "
                                       "its source")
            self.route(language, target)
        translations, alternatives = list(texts), [[] for _ in texts]
        qualities = [trust.Quality(None) if assess else None for _ in texts]

        async def translate_group(language, indexes):
            read = [documents.read_document(texts[i], language, text_format, **(reading or {}))
                    for i in indexes]
            rendered, others, assessed = await self.translate_documents(
                self.route(language, target), read, n_best, glossary, assess)
            for slot, index in enumerate(indexes):
                translations[index], alternatives[index] = rendered[slot], others[slot]
                qualities[index] = assessed[slot] if assess else None

        await asyncio.gather(*(translate_group(language, indexes)
                               for language, indexes in groups.items()))
        return translations, alternatives, [detection for _, detection in found], qualities

    # ------------------------------------------------------------ files

    async def translate_file(self, name, data, source, target, glossary=None):
        """Translates the file `name` (its extension one of `FILE_FORMATS`)
        of bytes `data` from `source` ("auto": detected from its text) into
        `target`, obeying `glossary`; returns the translated file's bytes
        and the characters of its text."""
        extension = os.path.splitext(name)[1].lower()
        if extension not in FILE_FORMATS:
            raise Refused(400, "Invalid request: file format not supported (give "
                               f"{', '.join(FILE_FORMATS)})")
        if not data:
            raise Refused(400, "Invalid request: empty file")
        try:
            document, language = await asyncio.to_thread(self._read_file, data,
                                                         FILE_FORMATS[extension], source)
        except ValueError as error:  # a file that cannot be read: its one-line reason
            raise Refused(400, f"Invalid request: {' '.join(str(error).split())}") from None
        rendered, _, _ = await self.translate_documents(self.route(language, target), [document],
                                                     glossary=glossary)
        output = rendered[0].encode("utf-8") if isinstance(rendered[0], str) else rendered[0]
        return output, sum(len(sentence) for sentence in document.sentences)

    def _read_file(self, data, kind, source):
        """The uploaded file as a document and its language ("auto": detected
        from its text)."""
        text = (" ".join(DocxDocument(data, "en").sentences) if kind == "docx"
                else data.decode("utf-8", errors="replace"))
        if source == "auto":
            source = self.detector.detect(documents.text_of(text, kind)[:5000])[0]["language"]
        document = (DocxDocument(data, source) if kind == "docx"
                    else documents.read_document(text, source, kind))
        return document, source

    async def keep_file(self, name, data):
        """Keeps the translated file `name` of bytes `data` for download
        (`stored_file`); returns the name it is kept under."""
        stored = f"{uuid.uuid4().hex}.{re.sub(r'[^A-Za-z0-9._-]', '_', name)}"
        await asyncio.to_thread(self._store, stored, data)
        return stored

    def _store(self, name, data):
        """Writes a translated file for download, and removes the oldest beyond
        `settings.kept_files`."""
        with open(os.path.join(self.files_dir, name), "wb") as file:
            file.write(data)
        stored = sorted((entry for entry in os.scandir(self.files_dir) if entry.is_file()),
                        key=lambda entry: entry.stat().st_mtime)
        for entry in stored[:-self.settings.kept_files]:
            with contextlib.suppress(OSError):
                os.remove(entry.path)

    def stored_file(self, name):
        """The path of a translated file kept for download, or a 404."""
        path = os.path.join(self.files_dir, name)
        if not re.fullmatch(r"[0-9a-f]{32}\.[A-Za-z0-9._-]+", name) or not os.path.isfile(path):
            raise Refused(404, "No such file: it was never translated here, or is no longer "
                               "kept")
        return path
