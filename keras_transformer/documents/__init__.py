"""Documents as the model reads them, and back: text of several sentences and
paragraphs, HTML and .docx files cut into sentences, translated together,
and written back with their whitespace, markup and formatting. Plain Python
(no TensorFlow), for every place text enters: the server, `translate`,
`translate-corpus` and the `Translator` and runtime APIs.

- `sentences`: text cut into sentences (`split_sentences`) and joined back;
  `TextDocument`.
- `html`: `HtmlDocument`, HTML translated in place, inline tags placed by
  the translation's alignment.
- `docx`: `DocxDocument`, a .docx file's paragraphs, table cells, headers
  and footers translated, each run's formatting kept.
- `alignment`: which part of a translation came from which part of the
  source, and placing markup by it.
- `detection`: the language of a text, among the languages served.

Each document offers `sentences` (what to translate) and `render` (the
document written back from their translations, or, where `aligned`, from
`(translation, Alignment)` pairs, with `marked` telling which sentences'
alignments place markup). `translate_documents` translates many in one
call of the model, and reads its attention again only for the marked
sentences.
"""

from keras_transformer.documents.html import HTML, HtmlDocument, Markup
from keras_transformer.documents.sentences import TextDocument

FORMATS = ("text", "html")
"""The formats of text the server and `translate` take (LibreTranslate's
`format`); files are told apart by their extension."""


def read_document(text, language, format="text", split=True, lines=True, markup=None):
    """`text` (str) read as a document of `format` (`FORMATS`, or "xml")
    from `language`; `split=False` takes plain text as one sentence,
    `lines=False` cuts it at punctuation only (`sentences.split_sentences`);
    `markup` (`html.Markup`) tells HTML's or XML's tags apart (default:
    HTML's rules, or XML's)."""
    if format in ("html", "xml"):
        return HtmlDocument(text, language, markup or Markup(xml=format == "xml"))
    if format == "text":
        return TextDocument(text, language, split, lines)
    raise ValueError(f"Unknown format {format!r}; expected one of {FORMATS} or xml.")


def text_of(text, format="text"):
    """What of `text` (of `format`) is translated, without markup: what its
    language is told by (an HTML page's tags and links would mislead a
    detector)."""
    if format in ("html", "xml"):
        return HtmlDocument(text, "en", HTML if format == "html" else Markup(xml=True)).text
    return text


def marked_sentences(documents):
    """The indices, among all the sentences of `documents` in order, of
    those whose alignment places markup (each document's `marked`): the
    only ones whose translation's alignment needs the model."""
    flags = [flag for document in documents for flag in
             (document.marked if document.aligned else [False] * len(document.sentences))]
    return [index for index, flag in enumerate(flags) if flag]


def render_documents(documents, translations, alignments):
    """Each document written back (its `render`) from `translations`, one
    for each of their sentences in order, and `alignments`, a dict from
    the index of a sentence among them to its `Alignment`; the sentences
    it leaves out are aligned by position."""
    rendered, at = [], 0
    for document in documents:
        count = len(document.sentences)
        mine = translations[at:at + count]
        if document.aligned:
            mine = [(translation, alignments.get(at + index))
                    for index, translation in enumerate(mine)]
        rendered.append(document.render(mine))
        at += count
    return rendered


def translate_documents(documents, translate, align=None):
    """The translations of `documents` (what each one's `render` gives):
    their sentences translated in one call of `translate` (`sentences ->
    translations`, str each), and the alignments of those whose markup
    needs one (`marked_sentences`) made in one call of `align`
    (`(sources, translations) -> Alignments`; None: by position)."""
    documents = list(documents)
    sentences = [sentence for document in documents for sentence in document.sentences]
    translations = list(translate(sentences)) if sentences else []
    marked = marked_sentences(documents) if align is not None else []
    found = align([sentences[index] for index in marked],
                  [translations[index] for index in marked]) if marked else []
    return render_documents(documents, translations, dict(zip(marked, found)))
