""".docx files translated in place: the text of every paragraph is translated,
and each run (a stretch of text with its own formatting: bold, italic, a
font, a character style) keeps its formatting around the words it marked.

What is translated: every paragraph with text in the body, in table cells
(nested tables included), in content controls and text boxes, and in every
section's headers and footers (the first-page and even-page ones too, where
the document has them; one linked to the previous section's is that one).
The text of a hyperlink is part of its paragraph's text. Empty paragraphs
and paragraphs of whitespace alone are left as they are, and so are
footnotes, endnotes, comments, charts and SmartArt.

A paragraph is read like a unit of `html`: its text is the concatenation
of its runs' texts (a tab is "\\t", a line break "\\n"), each run a span of
it, and each element that holds runs (a hyperlink, a content control) a
span around theirs. The text is split into sentences
(`sentences.split_sentences`), each translated, and joined back with the
whitespace between them; the translation's alignment places each span
(`alignment.place`), and the runs are put in the order of their places,
each run given the translation from its placed start to the next run's
placed start (the first run from the start, the last to the end), so that
no character of the translation is lost or doubled. The whitespace
between two runs' words goes to the side the source had it on: to the
later run where it began with a space (" and this"), else to the earlier
one where it ended with one. Runs change only their
text and their order: their formatting, and the paragraph's style, stay.

So formatting follows the words it marked when the translation moves
them: "alpha " + bold "beta" translated "BETA ALPHA" (BETA aligned to beta)
becomes bold "BETA " + "ALPHA", and a hyperlink moves with its text.
A run never leaves its hyperlink: the hyperlink moves as a whole among
its siblings, its runs among themselves. Where a hyperlink or content
control also holds content that bounds the text (see below), it cannot
move, and it and its siblings keep their order: each starts where its place
does or, where that comes before the start of the one before it, there
(leaving that one empty), so that "alpha " + a hyperlink of bold "beta"
and a field, translated "BETA ALPHA", becomes "" + bold "BETA ALPHA".

A run that holds anything besides text (an image, a footnote mark, a page
or column break, a symbol, a field: its codes and its result), and content
other than runs (an equation, a simple field), is kept as written, and the
text on either side of it is translated apart, as `html` does at an `img`
or `br`. Tracked deletions are kept and skipped.

Limits: a file is refused, with a `ValueError` of one line and before
anything is translated, when it is not a zip file, when it is not a Word
document (no `word/document*.xml`, or python-docx cannot open it), when its
members unzip to more than `max_unzipped_bytes` in all (`MAX_UNZIPPED_BYTES`
by default), or when it holds more than `MAX_MEMBERS` members. Sizes are
those the zip's directory declares, checked before anything is unzipped:
Python's `zipfile` reads no more than a member's declared size, so a zip
bomb is refused without being decompressed.
"""

import io
import re
import zipfile

import docx
from docx.oxml.ns import qn
from docx.oxml.parser import OxmlElement
from docx.text.paragraph import Paragraph
from docx.text.run import Run

from keras_transformer.documents import alignment as alignments
from keras_transformer.documents import sentences as splitting

MAX_UNZIPPED_BYTES = 64 * 2**20
"""The most bytes a .docx file's members may unzip to, in all, by default."""

MAX_MEMBERS = 10_000
"""The most members a .docx file's zip may hold."""

_MAIN_PART = re.compile(r"word/document\d*\.xml")
"""The main part's name: `word/document.xml`, or `word/document2.xml` as
Word Online writes it."""

_P, _R = qn("w:p"), qn("w:r")
_FIELD_CHARACTER, _FIELD_TYPE = qn("w:fldChar"), qn("w:fldCharType")
_BREAK, _BREAK_TYPE = qn("w:br"), qn("w:type")
_TEXT = frozenset(qn(f"w:{tag}") for tag in (
    "rPr", "t", "tab", "cr", "noBreakHyphen", "softHyphen", "lastRenderedPageBreak"))
"""What a run of text holds: its properties and the elements whose text
python-docx reads and writes (`Run.text`), and hints that rewriting its text
may drop (soft hyphens, where the last rendering broke the page)."""
_CONTAINERS = frozenset(qn(f"w:{tag}") for tag in (
    "hyperlink", "smartTag", "customXml", "ins", "moveTo", "sdt", "sdtContent", "dir", "bdo"))
"""Elements in a paragraph whose runs are text of the paragraph."""
_SKIPPED = frozenset(qn(f"w:{tag}") for tag in ("del", "moveFrom", "pPr", "sdtPr", "sdtEndPr"))
"""Elements in a paragraph that hold no text shown: deleted text, properties."""
_CONTENT = frozenset([_R, qn("m:r"), qn("m:oMath"), qn("w:drawing"), qn("w:pict"),
                      qn("w:object")])
"""What makes any other element of a paragraph content, which bounds its
text (otherwise it is a mark that holds nothing, such as a bookmark)."""


class DocxDocument:
    """A .docx file (its bytes) read for translation from `language`.

    Raises `ValueError` (a one-line message) when `data` is not a .docx
    file that unzips to at most `max_unzipped_bytes` in at most
    `MAX_MEMBERS` members.

    Attributes:
        sentences: the sentences of every paragraph with text, in document
            order: the body's, then each section's headers and footers.
        marked: for each sentence, whether a run or hyperlink starts or
            ends inside it (`alignment.marked`): the sentences whose
            alignment places formatting.
    """

    aligned = True
    """`render` places each run's text: it needs the translations' alignments."""

    def __init__(self, data, language, max_unzipped_bytes=MAX_UNZIPPED_BYTES):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"A .docx file is bytes, not {type(data).__name__}.")
        self._document = _open(bytes(data), max_unzipped_bytes)
        self._units = [unit for paragraph in _paragraphs(self._document)
                       for unit in _units(paragraph, language)]
        self.sentences = [sentence for unit in self._units for sentence in unit.split.sentences]
        self.marked = [marked for unit in self._units for marked in unit.marked]

    def render(self, results):
        """The translated document's bytes (a .docx file): each sentence
        replaced by its translation, `results` holding `(translation,
        Alignment)` for each of `sentences` (an alignment of None: by
        position), its runs' texts placed by the alignment."""
        results = list(results)
        if len(results) != len(self.sentences):
            raise ValueError(f"{len(results)} translations for {len(self.sentences)} sentences.")
        at = 0
        for unit in self._units:
            count = len(unit.split.sentences)
            unit.render(results[at:at + count])
            at += count
        out = io.BytesIO()
        self._document.save(out)
        return out.getvalue()


def _open(data, max_unzipped_bytes):
    """The python-docx `Document` of `data`, once its zip's directory shows
    it small enough to unzip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except Exception as error:  # zipfile raises several types for a damaged zip
        raise ValueError(f"not a .docx file: {_one_line(error)}") from None
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"not a .docx file: its zip holds {len(members)} members, more than "
                         f"{MAX_MEMBERS}")
    unzipped = sum(member.file_size for member in members)
    if unzipped > max_unzipped_bytes:
        raise ValueError(f"too large a .docx file: it unzips to {unzipped} bytes, more than "
                         f"{max_unzipped_bytes}")
    if not any(_MAIN_PART.fullmatch(member.filename) for member in members):
        raise ValueError("not a Word document: its zip holds no word/document.xml")
    try:
        return docx.Document(io.BytesIO(data))
    except Exception as error:  # python-docx raises many types for a damaged document
        raise ValueError(f"not a Word document: {_one_line(error)}") from None


def _one_line(error):
    """`error`'s message on one line, at most 200 characters."""
    message = " ".join(str(error).split()) or type(error).__name__
    return message if len(message) <= 200 else message[:199] + "…"


def _paragraphs(document):
    """Every paragraph of `document`'s body, then of each section's headers
    and footers, each once.

    Found as every `w:p` element under the story's root, rather than through
    python-docx's paragraphs and tables, which hold a container's own
    paragraphs only and miss those of content controls and text boxes."""
    stories = [(document, document.element.body)]
    seen = set()
    for section in document.sections:
        for story in (section.first_page_header, section.header, section.even_page_header,
                      section.first_page_footer, section.footer, section.even_page_footer):
            if story.is_linked_to_previous or id(story.part) in seen:
                continue
            seen.add(id(story.part))
            stories.append((story, story.part.element))
    for parent, root in stories:
        for p in root.iter(_P):
            yield Paragraph(p, parent)


def _units(paragraph, language):
    """The `_Unit`s of `paragraph`: its runs of text, cut where content
    other than text bounds them.

    Read from the paragraph's XML, rather than `Paragraph.iter_inner_content`,
    which yields its own runs and hyperlinks only: the text of a content
    control or a tracked insertion would be missed, and the text on either
    side of it joined."""
    reader = _Reader(paragraph, language)
    reader.read(paragraph._p)
    reader.finish()
    return reader.units


class _Container:
    """An element of a paragraph that holds runs (a hyperlink, a content
    control): its `_Entry` in the unit being read, and whether content that
    bounds the text lies in it (`split`: it then holds more than one unit's
    text, or content outside any, and cannot move)."""

    __slots__ = ("element", "entry", "split")

    def __init__(self, element):
        self.element, self.entry, self.split = element, None, False


class _Entry:
    """A run of a unit, or a container of its runs: the element, the
    python-docx `Run` (None for a container), its span in the unit's text,
    the index of the entry holding it (None: the paragraph) and, for a
    container, its `_Container`."""

    __slots__ = ("element", "run", "start", "end", "parent", "container")

    def __init__(self, element, run, start, end, parent, container=None):
        self.element, self.run, self.start, self.end = element, run, start, end
        self.parent, self.container = parent, container


class _Reader:
    """Reads a paragraph's runs, element by element, into `_Unit`s."""

    def __init__(self, paragraph, language):
        self.paragraph, self.language = paragraph, language
        self.units, self.entries, self.texts, self.length = [], [], [], 0
        self.open = []  # the `_Container`s the reading is inside
        self.fields = 0  # fields open: their codes and results are kept as written

    def read(self, element):
        for child in element:
            if not isinstance(child.tag, str) or child.tag in _SKIPPED:
                continue  # comments, processing instructions, deleted text, properties
            if child.tag == _R:
                self.run(child)
            elif child.tag in _CONTAINERS:
                container = _Container(child)
                self.open.append(container)
                self.read(child)
                self.open.pop()
                if container.entry is not None:
                    self.entries[container.entry].end = self.length
            elif any(True for _ in child.iter(*_CONTENT)):
                self.bound()

    def run(self, r):
        characters = r.findall(_FIELD_CHARACTER)
        if characters or self.fields or not _is_text(r):
            self.bound()
        else:
            run = Run(r, self.paragraph)
            text = run.text
            if text:  # an empty run shows nothing: left alone, to take no text
                self.add(r, run, text)
        for character in characters:
            kind = character.get(_FIELD_TYPE)
            self.fields = self.fields + 1 if kind == "begin" else max(
                self.fields - (kind == "end"), 0)

    def add(self, r, run, text):
        """Adds a run of `text`, and the containers it is in to the unit
        where they are not yet."""
        parent = None
        for container in self.open:
            if container.entry is None:
                container.entry = len(self.entries)
                self.entries.append(_Entry(container.element, None, self.length, self.length,
                                           parent, container))
            parent = container.entry
        self.entries.append(_Entry(r, run, self.length, self.length + len(text), parent))
        self.texts.append(text)
        self.length += len(text)

    def bound(self):
        """Ends the unit at content that is not text."""
        for container in self.open:
            container.split = True
            if container.entry is not None:
                self.entries[container.entry].end = self.length
            container.entry = None
        self.finish()

    def finish(self):
        if self.entries:
            unit = _Unit(self.entries, "".join(self.texts), self.language)
            if unit.split.sentences:
                self.units.append(unit)
        self.entries, self.texts, self.length = [], [], 0


def _is_text(r):
    """Whether the run `r` (a `w:r` element) holds only text, which setting
    its `Run.text` rewrites without losing anything else: python-docx
    removes every element of a run but its properties when it sets its
    text."""
    return all(child.tag in _TEXT or (child.tag == _BREAK and child.get(_BREAK_TYPE)
                                      in (None, "textWrapping"))
               for child in r if isinstance(child.tag, str))


class _Unit:
    """Consecutive runs of text of a paragraph, translated together: their
    text, the `_Entry` of each non-empty run and of each container of
    them, and the text's sentences."""

    def __init__(self, entries, text, language):
        self.entries, self.text = entries, text
        self.split = splitting.split_sentences(text, language)
        self.marked = alignments.marked(self.split, [(entry.start, entry.end)
                                                     for entry in entries])

    def render(self, results):
        """Writes the unit's translation (`results`: `(translation,
        Alignment)` for each of its sentences) into its runs: each run,
        in the order of their places, given the translation from its placed
        start to the next run's."""
        translated, alignment = alignments.joined(self.split, results)
        placed = alignments.place([(entry.start, entry.end) for entry in self.entries],
                                  alignment, len(self.text), len(translated))
        order = self._order(placed)
        cuts = [0]
        for before, index in zip(order, order[1:]):
            cut = max(placed[index][0], cuts[-1])
            # Whitespace between two runs' words goes to the side the source
            # had it on, wherever the alignment's pieces put the cut.
            if self._source(index)[:1].isspace():
                while cut > cuts[-1] and translated[cut - 1].isspace():
                    cut -= 1
            elif self._source(before)[-1:].isspace():
                while cut < len(translated) and translated[cut].isspace():
                    cut += 1
            cuts.append(cut)
        cuts.append(len(translated))
        for index, start, end in zip(order, cuts, cuts[1:]):
            self.entries[index].run.text = _XML_INVALID.sub("", translated[start:end])

    def _source(self, index):
        """The source text of the entry at `index`."""
        entry = self.entries[index]
        return self.text[entry.start:entry.end]

    def _order(self, placed):
        """The indices of the runs in the order they are put in: each
        element's runs and containers moved into the order of their places
        (`placed`), as `alignment.place` lets siblings change order with the
        words, unless one of them is a container that cannot move."""
        children = {None: []}
        for index, entry in enumerate(self.entries):
            children.setdefault(index, [])
            children[entry.parent].append(index)
        for siblings in children.values():
            if len(siblings) < 2 or any(self.entries[index].container is not None
                                        and self.entries[index].container.split
                                        for index in siblings):
                continue
            siblings.sort(key=lambda index: (placed[index][0], placed[index][1], index))
            _reorder([self.entries[index].element for index in siblings])
        order, stack = [], [iter(children[None])]
        while stack:
            index = next(stack[-1], None)
            if index is None:
                stack.pop()
            elif self.entries[index].run is None:
                stack.append(iter(children[index]))
            else:
                order.append(index)
        return order


def _reorder(elements):
    """Puts sibling `elements` in this order, in the places they hold
    together now; their other siblings stay where they are.

    Moved with lxml: python-docx can add and remove runs, not move them."""
    parent = elements[0].getparent()
    places = sorted(elements, key=parent.index)
    if places == elements:
        return
    holders = [OxmlElement("w:proofErr") for _ in places]  # any element, replaced at once
    for element, holder in zip(places, holders):
        parent.replace(element, holder)
    for holder, element in zip(holders, elements):
        parent.replace(holder, element)


_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
"""Characters XML cannot hold, dropped from a translation (lxml refuses them)."""
