"""HTML translated in place: blocks' text translated, every tag, attribute,
comment and entity kept, the contents of script, style, code, pre and
translate="no" copied untranslated, inline tags placed by the alignment,
the output well formed in the input's nesting whatever the input."""

import html.parser
import time

import pytest

from keras_transformer.documents import HtmlDocument, translate_documents
from keras_transformer.documents.alignment import Alignment, proportional

PAGE = """<!DOCTYPE html>
<html lang="de"><head><title>Eine Seite</title>
<style>p { color: red; } /* <b>nicht</b> */</style></head>
<body>
<!-- ein Kommentar, <b>unverändert</b> -->
<h1 class="title" data-x='1 &amp; 2'>Willkommen &amp; hallo</h1>
<p>Das ist <b>ein <em>sehr</em> wichtiger</b> Satz. Hier ist <a href="/a?b=1&amp;c=2" title="Link">der Link</a>!</p>
<p>Kein&nbsp;Umbruch und <code>x &lt; y &amp;&amp; z</code> bleiben.</p>
<pre>  Vorformatiert   &lt;bleibt&gt;  </pre>
<div translate="no">Markenname <span>bleibt</span></div>
<ul><li>Eins</li><li>Zwei <i>kursiv</i></li></ul>
<script>var s = "<p>nicht</p>" && 1 < 2;</script>
<img src="a.png" alt="Bild"><br/>
</body></html>"""


def identity(sentences):
    return [(sentence, proportional(sentence, sentence)) for sentence in sentences]


def upper(sentences):
    return [(sentence.upper(), proportional(sentence, sentence.upper())) for sentence in sentences]


def translate(document, translator=upper, language="de"):
    """`document` translated by `translator` (sentences -> `(translation,
    Alignment)` pairs), whose alignments are asked for the marked sentences
    only, as `translate_documents` asks the model's."""
    found = {}

    def run(sentences):
        found.update(zip(sentences, translator(sentences)))
        return [found[sentence][0] for sentence in sentences]

    def align(sources, translations):
        return [found[source][1] for source in sources]

    return translate_documents([HtmlDocument(document, language)], run, align)[0]


def tags(document):
    """The document's start and end tags in order, as a strict reader sees
    them, and whether they balance (void elements aside)."""

    class Reader(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.events, self.stack, self.balanced = [], [], True

        def handle_starttag(self, tag, attrs):
            self.events.append(("start", tag, tuple(attrs)))
            if tag not in ("img", "br", "meta", "link", "hr", "input"):
                self.stack.append(tag)

        def handle_endtag(self, tag):
            self.events.append(("end", tag))
            if not self.stack or self.stack.pop() != tag:
                self.balanced = False

    reader = Reader()
    reader.feed(document)
    reader.close()
    return reader.events, reader.balanced and not reader.stack


def test_a_page_round_trips_through_an_identity_translation():
    assert translate(PAGE, identity) == PAGE


def test_text_is_translated_and_everything_else_kept_as_written():
    out = translate(PAGE)
    for kept in ('<h1 class="title" data-x=\'1 &amp; 2\'>', "<!-- ein Kommentar, <b>unverändert</b> -->",
                 "<style>p { color: red; } /* <b>nicht</b> */</style>",
                 "<code>x &lt; y &amp;&amp; z</code>", "<pre>  Vorformatiert   &lt;bleibt&gt;  </pre>",
                 '<div translate="no">Markenname <span>bleibt</span></div>',
                 '<script>var s = "<p>nicht</p>" && 1 < 2;</script>',
                 '<img src="a.png" alt="Bild"><br/>', '<a href="/a?b=1&amp;c=2" title="Link">'):
        assert kept in out, kept
    for translated in ("WILLKOMMEN &amp; HALLO", "<title>EINE SEITE</title>",
                       "DAS IST <b>EIN <em>SEHR</em> WICHTIGER</b> SATZ.", "DER LINK</a>",
                       "KEIN&nbsp;UMBRUCH UND", "<li>ZWEI <i>KURSIV</i></li>"):
        assert translated in out, translated
    assert tags(out) == tags(PAGE)


def test_inline_tags_follow_the_words_they_marked_where_the_words_move():
    def swap(sentences):
        """"Das ist ein Haus." -> "ein Haus ist Das.", aligned word by word."""
        results = []
        for sentence in sentences:
            words = sentence.rstrip(".").split(" ")
            order = [2, 3, 1, 0] if len(words) == 4 else list(range(len(words)))
            moved = " ".join(words[i] for i in order) + "."
            starts = [sentence.index(word) for word in words]
            pairs, at = [], 0
            for i in order:
                pairs.append((at, at + len(words[i]), starts[i], starts[i] + len(words[i])))
                at += len(words[i]) + 1
            results.append((moved, Alignment(tuple(sorted(pairs)))))
        return results

    out = translate("<p><b>Das</b> ist ein <i>Haus</i>.</p>", swap)
    assert out == "<p>ein <i>Haus</i> ist <b>Das</b>.</p>"


@pytest.mark.parametrize("document, expected", [
    ("<p>Offen <b>fett", "<p>OFFEN <b>FETT</b></p>"),  # unclosed: closed at the end
    ("</b>Ende</i> <i>da</i>", "ENDE <i>DA</i>"),  # end tags that close nothing: dropped
    ("<b><i>falsch</b> geschachtelt</i>", "<b><i>FALSCH</i></b> GESCHACHTELT"),
    ("<div><p>Eins<p>Zwei</div>", "<div><p>EINS</p><p>ZWEI</p></div>"),  # implied ends
    ("<ul><li>a<li>b</ul>", "<ul><li>A</li><li>B</li></ul>"),
    ("<b>fett mit <p>Block</p> darin</b>", "<b>FETT MIT <p>BLOCK</p> DARIN</b>"),
    ("", ""), ("<p></p>", "<p></p>"), ("<p>  </p>", "<p>  </p>"),
    ("a < b & c > d", "A &lt; B &amp; C &gt; D"),
])
def test_any_input_comes_out_well_formed(document, expected):
    out = translate(document)
    assert out == expected
    assert tags(out)[1]


def test_ten_thousand_nested_elements_are_read_without_recursion():
    for tag in ("span", "div"):
        document = f"<{tag}>" * 10_000 + "tief" + f"</{tag}>" * 10_000
        started = time.monotonic()
        out = translate(document)
        assert time.monotonic() - started < 10
        assert out == f"<{tag}>" * 10_000 + "TIEF" + f"</{tag}>" * 10_000


def test_a_document_s_sentences_are_its_blocks_text_split():
    document = HtmlDocument(PAGE, "de")
    assert document.sentences[:4] == ["Eine Seite", "Willkommen & hallo",
                                      "Das ist ein sehr wichtiger Satz.", "Hier ist der Link!"]
    assert "nicht" not in " ".join(document.sentences)
    assert "Markenname" not in " ".join(document.sentences)


def test_only_sentences_with_a_tag_inside_are_aligned_and_the_rest_come_out_alike():
    """The model's attention is read only for sentences that an inline tag
    starts or ends inside; tags around whole sentences are placed the same
    by position."""
    page = "<p>Ganz <b>fett</b> hier. Kein Tag hier. <i>Ganzer Satz.</i></p><p><a>Zwei</a></p>"
    asked = []

    def align(sources, translations):
        asked.extend(sources)
        return [proportional(source, translation)
                for source, translation in zip(sources, translations)]

    document = HtmlDocument(page, "de")
    assert document.marked == [True, False, False, False]
    out, = translate_documents([document], lambda sentences: [s.upper() for s in sentences],
                               align)
    assert asked == ["Ganz fett hier."]
    assert out == ("<p>GANZ <b>FETT</b> HIER. KEIN TAG HIER. <i>GANZER SATZ.</i></p>"
                   "<p><a>ZWEI</a></p>")
    assert translate(page, identity) == page


def test_the_text_a_language_is_told_by_holds_no_markup():
    from keras_transformer.documents import text_of

    post = ('<p>Guten Morgen <a href="https://social.example/tags/weather" class="mention '
            'hashtag" rel="tag">#<span>weather</span></a></p><script>var english = 1;</script>'
            '<p>Wie geht es?</p>')
    assert text_of(post, "html") == "Guten Morgen #weather\nWie geht es?"
    assert text_of(post, "text") == post
