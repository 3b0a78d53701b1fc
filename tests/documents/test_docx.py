"""`documents.docx`: .docx files built here with python-docx, translated by
fake translators whose output is easy to check, read back with python-docx."""

import io
import re
import time
import zipfile

import docx
import pytest
from docx.enum.text import WD_BREAK
from docx.opc.constants import RELATIONSHIP_TYPE
from docx.opc.packuri import PackURI
from docx.oxml import OxmlElement, parse_xml
from docx.oxml.ns import nsdecls, qn
from docx.shared import Pt
from docx.text.hyperlink import Hyperlink
from docx.text.paragraph import Paragraph

from keras_transformer.documents import alignment as alignments
from keras_transformer.documents import sentences as splitting
from keras_transformer.documents.docx import MAX_MEMBERS, MAX_UNZIPPED_BYTES, DocxDocument

URL = "https://example.com/docs"

SENTENCES = [
    "A title for the test",
    "The first sentence is plain.",
    "This one is bold and this is italic, this in twelve points.",
    "A strong ending.",
    "Visit our web site for more.",
    "A cell of the outer table.",
    "A cell of the nested table.",
    "Before the break.",
    "After the break.",
    "The first page's header.",
    "The running header.",
    "Page",
    "of the document.",
]
"""The sentences of `_build`'s document, in the order `DocxDocument` reads
them: the body, then the headers and footers."""


def _add_hyperlink(paragraph, url, text):
    """A hyperlink to `url` around a new underlined run of `text` (python-docx
    has no call that adds one)."""
    hyperlink = OxmlElement("w:hyperlink")
    hyperlink.set(qn("r:id"), paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK,
                                                       is_external=True))
    run = paragraph.add_run(text)
    run.underline = True
    hyperlink.append(run._r)
    paragraph._p.append(hyperlink)


def _add_field(paragraph, code, result):
    """A field of `code` showing `result`, as Word writes one: runs of its
    begin, code, separator, result and end."""
    def character(kind):
        element = OxmlElement("w:fldChar")
        element.set(qn("w:fldCharType"), kind)
        paragraph.add_run()._r.append(element)

    character("begin")
    instruction = OxmlElement("w:instrText")
    instruction.set(qn("xml:space"), "preserve")
    instruction.text = f" {code} "
    paragraph.add_run()._r.append(instruction)
    character("separate")
    paragraph.add_run(result)
    character("end")


def _build():
    """A document with a heading, runs of several formats, empty paragraphs,
    a hyperlink, a table holding a table, a page break, headers and a footer
    with a field."""
    document = docx.Document()
    document.add_heading("A title for the test", level=1)
    paragraph = document.add_paragraph("The first sentence is plain. ")
    for text, bold, italic, size, style in (
            ("This one is bold", True, None, None, None),
            (" and this is italic,", None, True, None, None),
            (" this in twelve points.", None, None, Pt(12), None),
            (" A strong ending.", None, None, None, "Strong")):
        run = paragraph.add_run(text, style)
        run.bold, run.italic, run.font.size = bold, italic, size
    document.add_paragraph("")
    document.add_paragraph("  ")
    paragraph = document.add_paragraph("Visit ")
    _add_hyperlink(paragraph, URL, "our web site")
    paragraph.add_run(" for more.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "A cell of the outer table."
    table.cell(0, 1).add_table(rows=1, cols=1).cell(0, 0).text = "A cell of the nested table."
    paragraph = document.add_paragraph("Before the break.")
    paragraph.add_run().add_break(WD_BREAK.PAGE)
    paragraph.add_run("After the break.")
    section = document.sections[0]
    section.header.paragraphs[0].text = "The running header."
    section.different_first_page_header_footer = True
    section.first_page_header.paragraphs[0].text = "The first page's header."
    paragraph = section.footer.paragraphs[0]
    paragraph.text = "Page "
    _add_field(paragraph, "PAGE", "1")
    paragraph.add_run(" of the document.")
    return _save(document)


def _save(document):
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _open(data):
    return docx.Document(io.BytesIO(data))


def _upper(sentence):
    """`sentence` upper-cased, aligned by `alignment.proportional`: every
    word stays in place."""
    return sentence.upper(), alignments.proportional(sentence, sentence.upper())


def _reverse_words(sentence):
    """`sentence`'s words upper-cased in reverse order, each aligned to the
    word it came from: words move, and runs must move with them."""
    words = [match.span() for match in re.finditer(r"\S+", sentence)]
    parts, pairs, at = [], [], 0
    for start, end in reversed(words):
        pairs.append((at, at + end - start, start, end))
        parts.append(sentence[start:end].upper())
        at += end - start + 1
    return " ".join(parts), alignments.Alignment(tuple(pairs))


def _translate(data, translator):
    """`data` translated by `translator` (sentence -> `(translation,
    Alignment)`), read back."""
    document = DocxDocument(data, "en")
    return _open(document.render([translator(sentence) for sentence in document.sentences]))


def _paragraphs(document):
    """Every paragraph of the body (tables' cells included, nested tables
    too), of the first section's headers and of its footer, found through
    python-docx's own containers."""
    def inside(container):
        for block in container.iter_inner_content():
            if isinstance(block, Paragraph):
                yield block
            else:
                for row in block.rows:
                    for cell in row.cells:
                        yield from inside(cell)

    section = document.sections[0]
    for container in (document, section.first_page_header, section.header, section.footer):
        yield from inside(container)


def _runs(paragraph):
    """The paragraph's runs, those of its hyperlinks included."""
    for item in paragraph.iter_inner_content():
        yield from item.runs if isinstance(item, Hyperlink) else [item]


def _formats(paragraph):
    return [(run.bold, run.italic, run.font.size, run.style.name, run.underline)
            for run in _runs(paragraph)]


def _has_page_break(paragraph):
    return bool(paragraph._p.xpath(".//w:br[@w:type='page']"))


def _has_field(paragraph):
    return bool(paragraph._p.xpath(".//w:fldChar"))


def _expected(text, translator):
    """`text` with each of its sentences translated, its whitespace kept."""
    split = splitting.split_sentences(text, "en")
    return split.join([translator(sentence)[0] for sentence in split.sentences])


def test_sentences_are_every_paragraphs_in_document_order():
    document = DocxDocument(_build(), "en")
    assert document.aligned is True
    assert document.sentences == SENTENCES


@pytest.mark.parametrize("translator", [_upper, _reverse_words])
def test_every_paragraph_with_text_is_translated_and_keeps_its_runs_and_styles(translator):
    data = _build()
    before, after = list(_paragraphs(_open(data))), list(_paragraphs(_translate(data, translator)))
    assert len(before) == len(after)
    translated = 0
    for source, target in zip(before, after):
        assert target.style.name == source.style.name
        if translator is _upper:  # words stay in place: so do the runs
            assert _formats(target) == _formats(source)
        else:  # runs move with their words: the same runs, in another order
            assert sorted(_formats(target), key=repr) == sorted(_formats(source), key=repr)
        if not source.text.strip():
            assert target.text == source.text
            continue
        translated += 1
        assert target.text != source.text
        if not (_has_page_break(source) or _has_field(source)):  # checked below
            # Nothing lost, nothing doubled: the runs hold the joined translation.
            assert "".join(run.text for run in _runs(target)) == _expected(source.text, translator)
    assert translated == 9
    assert [paragraph.style.name for paragraph in after[:2]] == ["Heading 1", "Normal"]


def test_runs_keep_their_formatting_around_their_words():
    data = _build()
    paragraph = list(_paragraphs(_translate(data, _upper)))[1]
    assert [(run.text, run.bold, run.italic, run.font.size, run.style.name)
            for run in paragraph.runs] == [
        ("THE FIRST SENTENCE IS PLAIN. ", None, None, None, "Default Paragraph Font"),
        ("THIS ONE IS BOLD", True, None, None, "Default Paragraph Font"),
        (" AND THIS IS ITALIC,", None, True, None, "Default Paragraph Font"),
        (" THIS IN TWELVE POINTS.", None, None, Pt(12), "Default Paragraph Font"),
        (" A STRONG ENDING.", None, None, None, "Strong")]


def test_reversed_words_move_runs_with_them():
    paragraphs = list(_paragraphs(_translate(_build(), _reverse_words)))
    assert [(run.text, run.bold, run.italic, run.font.size, run.style.name)
            for run in paragraphs[1].runs] == [
        ("PLAIN. IS SENTENCE FIRST THE", None, None, None, "Default Paragraph Font"),
        (" POINTS. TWELVE IN THIS", None, None, Pt(12), "Default Paragraph Font"),
        (" ITALIC, IS THIS AND ", None, True, None, "Default Paragraph Font"),
        ("BOLD IS ONE THIS", True, None, None, "Default Paragraph Font"),
        (" ENDING. STRONG A", None, None, None, "Strong")]
    # The hyperlink moved as a whole, between the runs around it.
    assert [run.text for run in _runs(paragraphs[4])] == ["MORE. FOR ", "SITE WEB OUR ", "VISIT"]
    assert [(link.text, link.address) for link in paragraphs[4].hyperlinks] == [
        ("SITE WEB OUR ", URL)]
    assert [run.underline for run in _runs(paragraphs[4])] == [None, True, None]


def test_hyperlink_header_footer_and_nested_table_are_translated():
    document = _translate(_build(), _upper)
    link = next(paragraph for paragraph in _paragraphs(document) if paragraph.hyperlinks)
    assert link.text == "VISIT OUR WEB SITE FOR MORE."
    assert [(hyperlink.text, hyperlink.address) for hyperlink in link.hyperlinks] == [
        ("OUR WEB SITE", URL)]
    section = document.sections[0]
    assert section.header.paragraphs[0].text == "THE RUNNING HEADER."
    assert section.first_page_header.paragraphs[0].text == "THE FIRST PAGE'S HEADER."
    nested = document.tables[0].cell(0, 1).tables[0].cell(0, 0)
    assert nested.paragraphs[0].text == "A CELL OF THE NESTED TABLE."
    assert document.tables[0].cell(0, 0).text == "A CELL OF THE OUTER TABLE."


def test_a_page_break_and_a_field_are_kept_and_bound_the_text():
    document = _translate(_build(), _reverse_words)
    broken = next(paragraph for paragraph in _paragraphs(document) if _has_page_break(paragraph))
    assert [run.text for run in broken.runs] == ["BREAK. THE BEFORE", "", "BREAK. THE AFTER"]
    assert broken.runs[1]._r.xpath("w:br/@w:type") == ["page"]
    footer = document.sections[0].footer.paragraphs[0]
    assert [run.text for run in footer.runs] == ["PAGE ", "", "", "", "1", "", " DOCUMENT. THE OF"]
    assert [element.get(qn("w:fldCharType")) for element in footer._p.xpath(".//w:fldChar")] == [
        "begin", "separate", "end"]
    assert footer._p.xpath("string(.//w:instrText)") == " PAGE "


def _paragraph(*runs):
    """A document of one paragraph of `runs`: `(text, bold)`, or "link" and
    the runs inside a hyperlink, or "field" for a PAGE field."""
    document = docx.Document()
    paragraph = document.add_paragraph()

    def add(target, runs):
        for run in runs:
            if run == "field":
                _add_field(paragraph, "PAGE", "1")
                for r in paragraph._p.r_lst[-5:]:
                    target.append(r)
            elif run[0] == "link":
                hyperlink = OxmlElement("w:hyperlink")
                hyperlink.set(qn("r:id"), paragraph.part.relate_to(
                    URL, RELATIONSHIP_TYPE.HYPERLINK, is_external=True))
                target.append(hyperlink)
                add(hyperlink, run[1:])
            else:
                added = paragraph.add_run(run[0])
                added.bold = run[1]
                target.append(added._r)

    add(paragraph._p, runs)
    return _save(document)


def _run_texts(paragraph):
    return [(run.text, run.bold) for run in _runs(paragraph)]


@pytest.mark.parametrize("runs,translation,pairs,expected", [
    # Words in the source's order: each in its own run.
    ([("alpha ", None), ("beta", True)], "ALPHA BETA", ((0, 5, 0, 5), (6, 10, 6, 10)),
     [("ALPHA ", None), ("BETA", True)]),
    # A piece that holds the space before its word (as SentencePiece's do):
    # the space stays on the side the source had it on.
    ([("alpha ", None), ("beta", True)], "ALPHA BETA", ((0, 5, 0, 5), (5, 10, 6, 10)),
     [("ALPHA ", None), ("BETA", True)]),
    ([("alpha", None), (" beta", True)], "ALPHA BETA", ((0, 5, 0, 5), (6, 10, 6, 10)),
     [("ALPHA", None), (" BETA", True)]),
    # The bold word moved before the plain one: the bold run moves with it.
    ([("alpha ", None), ("beta", True)], "BETA ALPHA", ((0, 4, 6, 10), (5, 10, 0, 5)),
     [("BETA ", True), ("ALPHA", None)]),
    # Adjective after the noun: the bold run moves to the end; " car" keeps
    # the space before its words.
    ([("the ", None), ("red", True), (" car", None)], "la voiture ROUGE",
     ((0, 2, 0, 3), (3, 10, 8, 11), (11, 16, 4, 7)),
     [("la", None), (" voiture ", None), ("ROUGE", True)]),
    # A hyperlink moves as a whole, its runs among themselves.
    ([("see ", None), ("link", ("one ", None), ("two", True))], "TWO ONE SEE",
     ((0, 3, 8, 11), (4, 7, 4, 7), (8, 11, 0, 3)),
     [("TWO ", True), ("ONE ", None), ("SEE", None)]),
])
def test_runs_move_with_their_words(runs, translation, pairs, expected):
    document = DocxDocument(_paragraph(*runs), "en")
    assert len(document.sentences) == 1
    paragraph = _open(document.render([(translation, alignments.Alignment(pairs))])).paragraphs[0]
    assert _run_texts(paragraph) == expected
    assert paragraph.text == translation


def test_a_hyperlink_that_holds_a_field_keeps_its_place():
    # The hyperlink also holds a field, which bounds the text: it cannot
    # move, so neither can the run before it; that run, placed after the
    # bold one, starts where the bold one does and is left empty.
    document = DocxDocument(_paragraph(("alpha ", None), ("link", ("beta", True), "field")),
                            "en")
    assert document.sentences == ["alpha beta"]
    paragraph = _open(document.render(
        [("BETA ALPHA", alignments.Alignment(((0, 4, 6, 10), (5, 10, 0, 5))))])).paragraphs[0]
    assert _run_texts(paragraph)[:2] == [("", None), ("BETA ALPHA", True)]
    assert paragraph.hyperlinks[0].text == "BETA ALPHA1"
    assert paragraph._p.xpath("string(.//w:instrText)") == " PAGE "


def test_a_document_without_text_has_no_sentences_and_renders():
    document = docx.Document()
    document.add_paragraph("")
    document.add_paragraph(" \n ")
    read = DocxDocument(_save(document), "en")
    assert read.sentences == []
    assert [paragraph.text for paragraph in _open(read.render([])).paragraphs] == ["", " \n "]


def test_data_that_is_not_bytes_is_refused():
    with pytest.raises(TypeError, match="A .docx file is bytes, not int"):
        DocxDocument(10**9, "en")


def test_a_wrong_number_of_results_is_refused():
    document = DocxDocument(_paragraph(("alpha ", None), ("beta", True)), "en")
    with pytest.raises(ValueError, match="0 translations for 1 sentences"):
        document.render([])


def test_word_onlines_document2_xml_is_read():
    document = docx.Document()
    document.add_paragraph("Written by Word Online.")
    document.part.partname = PackURI("/word/document2.xml")
    data = _save(document)
    assert "word/document2.xml" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    read = DocxDocument(data, "en")
    assert read.sentences == ["Written by Word Online."]


def _zip(members, **options):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", **options) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize("data,message", [
    (bytes(range(256)) * 8, "not a .docx file: File is not a zip file"),
    (b"", "not a .docx file: File is not a zip file"),
    (_zip([("hello.txt", "hello")]), "not a Word document: its zip holds no word/document.xml"),
    (_zip([("word/document.xml", "<w:document/>")]), "not a Word document: "),
    (_zip([(f"member{index}", b"") for index in range(MAX_MEMBERS + 1)]),
     f"not a .docx file: its zip holds {MAX_MEMBERS + 1} members, more than {MAX_MEMBERS}"),
])
def test_bad_input_is_refused_with_a_one_line_message(data, message):
    with pytest.raises(ValueError) as raised:
        DocxDocument(data, "en")
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_a_zip_bomb_is_refused_at_once():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("word/document.xml", "<w:document/>")
        with archive.open("zeros", "w") as member:
            chunk = bytes(2**20)
            for _ in range(200):
                member.write(chunk)
    data = out.getvalue()
    assert len(data) < 2**20
    start = time.perf_counter()
    with pytest.raises(ValueError) as raised:
        DocxDocument(data, "en", max_unzipped_bytes=MAX_UNZIPPED_BYTES)
    assert time.perf_counter() - start < 2
    assert str(raised.value) == (f"too large a .docx file: it unzips to {200 * 2**20 + 13} "
                                 f"bytes, more than {64 * 2**20}")
    small = _paragraph(("alpha ", None), ("beta", True))
    assert DocxDocument(small, "en", max_unzipped_bytes=10**6).sentences == ["alpha beta"]
    with pytest.raises(ValueError, match="^too large a .docx file"):
        DocxDocument(small, "en", max_unzipped_bytes=1000)


def test_content_controls_insertions_and_marks_are_read_and_deletions_kept():
    document = docx.Document()
    paragraph = document.add_paragraph()
    paragraph._p.append(parse_xml(
        f'<w:root {nsdecls("w")}>'
        '<w:bookmarkStart w:id="0" w:name="here"/><w:r><w:t xml:space="preserve">one </w:t></w:r>'
        '<w:proofErr w:type="spellStart"/>'
        '<w:sdt><w:sdtPr><w:alias w:val="control"/></w:sdtPr><w:sdtContent>'
        '<w:r><w:t xml:space="preserve">two </w:t></w:r></w:sdtContent></w:sdt>'
        '<w:del w:id="1" w:author="a"><w:r><w:delText>gone </w:delText></w:r></w:del>'
        '<w:ins w:id="2" w:author="a"><w:r><w:t xml:space="preserve">three </w:t></w:r></w:ins>'
        '<w:bookmarkEnd w:id="0"/><w:r><w:t>four.</w:t></w:r></w:root>'))
    root = paragraph._p[-1]
    for child in list(root):
        paragraph._p.append(child)
    paragraph._p.remove(root)
    read = DocxDocument(_save(document), "en")
    assert read.sentences == ["one two three four."]
    result = _open(read.render([_upper("one two three four.")])).paragraphs[0]._p
    assert "".join(result.xpath(".//w:t/text()")) == "ONE TWO THREE FOUR."
    assert result.xpath("string(.//w:sdt//w:t)") == "TWO "
    assert result.xpath("string(.//w:ins//w:t)") == "THREE "
    assert result.xpath("string(.//w:delText)") == "gone "
    assert len(result.xpath("w:bookmarkStart | w:bookmarkEnd | w:proofErr")) == 3
