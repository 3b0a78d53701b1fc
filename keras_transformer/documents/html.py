"""HTML translated in place: the text of each block is translated, every tag,
attribute, comment and entity outside it is kept as written, and the inline
tags inside a sentence go around the words they marked.

The document is read by the standard library's event parser
(`html.parser.HTMLParser`, which keeps each tag's source text, never
recurses, and reads any input), and written back event by event:

- Block elements (`p`, `li`, `td`, `h1`, ...) bound the units of text: a
  unit is the text between two block boundaries, with the inline elements
  inside it (`b`, `em`, `a href`, `span`, ...). It is split into sentences
  (`sentences.split_sentences`), translated, and its inline tags placed by the
  translation's alignment (`alignment.place`).
- The contents of `script`, `style`, `code`, `pre`, `textarea`, `svg`,
  `math`, of any element with `translate="no"`, comments, void elements
  (`br`, `img`, ...) and declarations are copied as written, and bound units
  too.
- The output is well formed, with the input's tags in the input's nesting:
  an element left open is closed at the end, a `p` before a block is closed
  there (as HTML's own rules close it), an end tag that closes nothing is
  dropped, and an inline element that holds a block becomes a container
  whose tags are copied around its translated contents.

`HtmlDocument(html, language)` reads a document: its `sentences` are what
to translate, and `render` writes it back with their translations and
alignments (`documents.translate_documents` does both, for many documents
in one call of the model).

`Markup` changes which tags are which, as DeepL's `tag_handling`,
`ignore_tags`, `non_splitting_tags` and `splitting_tags` ask: XML, whose
tags are all inline unless named splitting, and elements copied with
their contents as written (an ignored tag inside a sentence moves with the
words around it, as one placeholder: Weblate's `<x id="1"></x>`).
"""

import dataclasses
import html
import html.parser

from keras_transformer.documents import alignment as alignments
from keras_transformer.documents import sentences as splitting

VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
KEPT = frozenset("script style code pre textarea svg math".split())
"""Elements whose contents are copied untranslated."""
INLINE = frozenset("a abbr b bdi bdo cite data del dfn em font i ins kbd label mark q s samp "
                   "small span strong sub sup time u var".split())
"""Elements that mark words inside a sentence; every other is a block."""
CLOSES_P = frozenset("address article aside blockquote details dialog div dl fieldset "
                     "figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr main "
                     "menu nav ol p pre section table ul".split())
"""Starts that close an open `p` (HTML's implied end tags)."""
CLOSES_SAME = {"li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "tr": {"tr", "td", "th"},
               "td": {"td", "th"}, "th": {"td", "th"}, "option": {"option"}}
"""Starts that close an open element of these names (HTML's implied end tags)."""


@dataclasses.dataclass(frozen=True)
class Markup:
    """How a document's tags are read (the default: HTML's rules above).

    Attributes:
        xml: every element is inline unless in `splitting_tags`, and none
            is void or kept by its name; text is escaped without HTML's
            named entities.
        ignore_tags: elements copied with their contents as written; one
            inside a sentence is a placeholder that moves with the words.
        non_splitting_tags: elements that are inline whatever HTML says.
        splitting_tags: elements that bound the units of text.
    Tag names are compared in lower case, as the parser reads them.
    """

    xml: bool = False
    ignore_tags: frozenset = frozenset()
    non_splitting_tags: frozenset = frozenset()
    splitting_tags: frozenset = frozenset()

    def inline(self, tag):
        if tag in self.splitting_tags:
            return False
        return self.xml or tag in self.non_splitting_tags or tag in INLINE

    def kept(self, tag, attrs):
        return tag in self.ignore_tags or (not self.xml and (tag in KEPT or any(
            name == "translate" and (value or "").lower() == "no" for name, value in attrs)))

    def void(self, tag):
        return not self.xml and tag in VOID


HTML = Markup()


class HtmlDocument:
    """An HTML document (str) read for translation from `language`.

    Attributes:
        sentences: the sentences of its text, in document order.
        marked: for each sentence, whether an inline tag starts or ends
            inside it (`alignment.marked`): the sentences whose alignment
            places markup.
        text: the text that is translated, without tags (a line for each
            unit): what tells the document's language.
    """

    aligned = True
    """`render` places inline markup: it needs the translations' alignments."""

    def __init__(self, document, language, markup=HTML):
        writer = _Writer(language, markup)
        parser = _Parser(writer)
        parser.feed(document)
        parser.close()
        self._parts = writer.finish()
        self._xml = markup.xml
        units = [part for part in self._parts if isinstance(part, _Unit)]
        self.sentences = [sentence for unit in units for sentence in unit.split.sentences]
        self.marked = [marked for unit in units for marked in unit.marked]
        self.text = "\n".join(unit.text for unit in units)

    def render(self, results):
        """The document with each sentence replaced by its translation:
        `results` holds `(translation, Alignment)` for each of `sentences`
        (an alignment of None: by position, `alignment.proportional`)."""
        results, out = iter(results), []
        for part in self._parts:
            if isinstance(part, _Unit):
                out.append(part.render([next(results) for _ in part.split.sentences],
                                       self._xml))
            else:
                out.append(part)
        return "".join(out)


class _Parser(html.parser.HTMLParser):
    """Hands the document's events, with their source text, to a `_Writer`."""

    def __init__(self, writer):
        super().__init__(convert_charrefs=False)
        self.writer = writer

    def handle_starttag(self, tag, attrs):
        self.writer.start(tag, attrs, self.get_starttag_text(), closed=False)

    def handle_startendtag(self, tag, attrs):
        self.writer.start(tag, attrs, self.get_starttag_text(), closed=True)

    def handle_endtag(self, tag):
        self.writer.end(tag)

    def handle_data(self, data):
        self.writer.text(data, html.unescape(data) if self.writer.translating else data)

    def handle_entityref(self, name):
        self.writer.text(f"&{name};", html.unescape(f"&{name};"))

    def handle_charref(self, name):
        self.writer.text(f"&#{name};", html.unescape(f"&#{name};"))

    def handle_comment(self, data):
        self.writer.verbatim(f"<!--{data}-->")

    def handle_decl(self, decl):
        self.writer.verbatim(f"<!{decl}>")

    def handle_pi(self, data):
        self.writer.verbatim(f"<?{data}>")

    def unknown_decl(self, data):
        self.writer.verbatim(f"<![{data}]>")


class _Element:
    __slots__ = ("tag", "inline", "kept", "ignored")

    def __init__(self, tag, inline, kept, ignored=False):
        self.tag, self.inline, self.kept, self.ignored = tag, inline, kept, ignored


class _Writer:
    """Writes the document back as the parser reads it: copied as written
    where nothing is translated, gathered into `_Unit`s where text is."""

    def __init__(self, language, markup):
        self.language, self.markup = language, markup
        self.out = []  # strings copied as written, and `_Unit`s
        self.outside = None  # `out` while an ignored element inside a unit is copied
        self.stack = []  # open `_Element`s
        self.kept = 0  # depth inside elements copied untranslated
        self.unit = []  # ("text", raw, text) | ("open", raw, element) | ("close", raw, element)
        self.opened = set()  # ids of the elements opened in the unit

    @property
    def translating(self):
        return self.kept == 0

    # -- events ---------------------------------------------------------

    def start(self, tag, attrs, raw, closed):
        markup = self.markup
        if self.kept:
            self.out.append(raw)
            if not closed and not markup.void(tag):
                self.stack.append(_Element(tag, False, True))
                self.kept += 1
            return
        if not markup.xml:
            self._implied_ends(tag)
        keeps = markup.kept(tag, attrs)
        ends = closed or markup.void(tag)
        if tag in markup.ignore_tags and self.unit:  # a placeholder inside the unit's text
            element = _Element(tag, True, True, ignored=True)
            if ends:
                self._placeholder(element, raw)
            else:
                self.outside, self.out = self.out, [raw]
                self.stack.append(element)
                self.kept += 1
            return
        if markup.inline(tag) and not keeps and not ends:
            element = _Element(tag, True, False)
            self.unit.append(("open", raw, element))
            self.opened.add(id(element))
            self.stack.append(element)
            return
        self.flush()
        self.out.append(raw)
        if not ends:
            self.stack.append(_Element(tag, False, keeps))
            self.kept += keeps

    def _placeholder(self, element, raw):
        """An ignored element inside a unit, as an empty inline element whose
        opening tag is all of it as written."""
        self.unit += [("open", raw, element), ("close", "", element)]
        self.opened.add(id(element))

    def end(self, tag):
        if not any(element.tag == tag for element in self.stack):
            return  # closes nothing: dropped, so that the output stays well formed
        while True:
            element = self.stack.pop()
            self._close(element, f"</{element.tag}>" if element.tag != tag else f"</{tag}>")
            if element.tag == tag:
                return

    def text(self, raw, text):
        if self.kept:
            self.out.append(raw)
        else:
            self.unit.append(("text", raw, text))

    def verbatim(self, raw):
        if not self.kept:
            self.flush()
        self.out.append(raw)

    def finish(self):
        while self.stack:
            element = self.stack.pop()
            self._close(element, f"</{element.tag}>")
        self.flush()
        return self.out

    # -- the tree -----------------------------------------------------

    def _implied_ends(self, tag):
        """Closes what HTML closes implicitly before a `tag` start: an open
        `p` before a block, a `li` before a `li`, ... (the innermost
        non-inline element only)."""
        containers = [element for element in self.stack if not element.inline]
        if not containers or containers[-1].kept:
            return
        top = containers[-1].tag
        if (top == "p" and tag in CLOSES_P) or top in CLOSES_SAME.get(tag, ()):
            self.end(top)

    def _close(self, element, raw):
        if element.ignored:
            self.kept -= 1
            written, self.out, self.outside = "".join(self.out) + raw, self.outside, None
            self._placeholder(element, written)
        elif element.kept:
            self.kept -= 1
            self.out.append(raw)
        elif element.inline and id(element) in self.opened:
            self.unit.append(("close", raw, element))
        else:
            self.flush()
            self.out.append(raw)

    # -- units ----------------------------------------------------------

    def flush(self):
        """Translates the unit gathered so far and writes it. An inline
        element still open in it (one that holds a block) becomes a
        container: the text before and inside it are units of their own."""
        items, self.unit, self.opened = self.unit, [], set()
        if not items:
            return
        closed = {id(item[2]) for item in items if item[0] == "close"}
        segment = []
        for item in items:
            if item[0] == "open" and id(item[2]) not in closed:
                self._write_unit(segment)
                segment = []
                self.out.append(item[1])
                item[2].inline = False
            else:
                segment.append(item)
        self._write_unit(segment)

    def _write_unit(self, items):
        if items:
            self.out.append(_Unit(items, self.language))


class _Unit:
    """The text between two block boundaries, with its inline elements:
    their spans in its text, their tags, and which holds which."""

    def __init__(self, items, language):
        plain, self.spans, self.tags, self.parents, stack = [], [], [], [], []
        length = 0
        for kind, raw, payload in items:
            if kind == "text":
                plain.append(payload)
                length += len(payload)
            elif kind == "open":
                self.parents.append(stack[-1] if stack else None)
                stack.append(len(self.spans))
                self.spans.append([length, length])
                self.tags.append([raw, ""])
            else:
                index = stack.pop()
                self.spans[index][1] = length
                self.tags[index][1] = raw
        self.text = "".join(plain)
        self.split = splitting.split_sentences(self.text, language)
        self.marked = alignments.marked(self.split, self.spans)

    def render(self, results, xml=False):
        """The unit translated (`results`: `(translation, Alignment or None)`
        for each of its sentences), its tags placed by the alignment, its
        text escaped for XML or HTML."""
        if not self.split.sentences:
            return _rebuild(self.text, self.spans, self.tags, self.parents, xml)
        translated, alignment = alignments.joined(self.split, results)
        placed = alignments.place([tuple(span) for span in self.spans], alignment,
                                  len(self.text), len(translated))
        return _rebuild(translated, placed, self.tags, self.parents, xml)


def _rebuild(text, placed, tags, parents, xml=False):
    """`text` (escaped) with each span's open and close tags around its
    placed `(start, end)`; `parents` gives each span's enclosing span. The
    spans are emitted as the tree they form, children in the order of their
    places, with a stack rather than recursion (documents nest deeply)."""
    escape = _escape_xml if xml else _escape
    children = {None: []}
    for index, parent in enumerate(parents):
        children.setdefault(index, [])
        children[parent].append(index)
    for siblings in children.values():
        siblings.sort(key=lambda index: (placed[index][0], placed[index][1], index))
    out, at = [], 0
    stack = [(None, iter(children[None]))]
    while stack:
        node, pending = stack[-1]
        child = next(pending, None)
        if child is None:
            stack.pop()
            if node is not None:
                out.append(escape(text[at:placed[node][1]]))
                at = max(at, placed[node][1])
                out.append(tags[node][1])
            continue
        out.append(escape(text[at:placed[child][0]]))
        at = max(at, placed[child][0])
        out.append(tags[child][0])
        stack.append((child, iter(children[child])))
    out.append(escape(text[at:]))
    return "".join(out)


def _escape(text):
    """Text for HTML: `&`, `<`, `>` escaped, and no-break spaces written as
    the `&nbsp;` documents mostly spell them with."""
    return html.escape(text, quote=False).replace("\xa0", "&nbsp;")


def _escape_xml(text):
    """Text for XML: `&`, `<`, `>` escaped (XML has no `&nbsp;`)."""
    return html.escape(text, quote=False)
