"""Text of several sentences and paragraphs: cut into sentences by the
language's rules, every character kept, joined back with its own
whitespace around the translations."""

import hypothesis
import hypothesis.strategies as st
import pytest

from keras_transformer.documents import TextDocument, read_document, translate_documents
from keras_transformer.documents.sentences import split_sentences

POST = ("Guten Morgen!  Wie geht es Ihnen?\n\nDr. Müller wohnt in der Hauptstr. 5. "
        "Er kommt z.B. morgen.\nEine Zeile ohne Punkt\n  eingerückt\n")


def test_a_post_is_cut_at_sentences_and_line_breaks_and_joins_back():
    parts = split_sentences(POST, "de")
    assert parts.sentences == ("Guten Morgen!", "Wie geht es Ihnen?",
                               "Dr. Müller wohnt in der Hauptstr. 5.", "Er kommt z.B. morgen.",
                               "Eine Zeile ohne Punkt", "eingerückt")
    assert parts.gaps == ("", "  ", "\n\n", " ", "\n", "\n  ", "\n")
    assert parts.join(list(parts.sentences)) == POST
    assert parts.join([s.upper() for s in parts.sentences]) == POST.upper()
    with pytest.raises(ValueError, match="2 translations for 6 sentences"):
        parts.join(["a", "b"])


@hypothesis.given(st.text(max_size=300))
@hypothesis.settings(max_examples=200, deadline=None)
def test_any_text_joins_back_to_itself_and_sentences_hold_no_outer_whitespace(text):
    parts = split_sentences(text, "en")
    assert parts.join(list(parts.sentences)) == text
    assert all(sentence and sentence == sentence.strip() for sentence in parts.sentences)
    assert all(not gap.strip() for gap in parts.gaps)


def test_documents_translate_in_one_call_and_unsplit_text_is_one_sentence():
    calls = []

    def translate(sentences):
        calls.append(list(sentences))
        return [sentence[::-1] for sentence in sentences]

    texts = ["Eins. Zwei!", "", "Drei", "  \n "]
    found = translate_documents([read_document(text, "de") for text in texts], translate)
    assert found == [".sniE !iewZ", "", "ierD", "  \n "]
    assert calls == [["Eins.", "Zwei!", "Drei"]]
    assert translate_documents([TextDocument("Eins. Zwei!", "de", split=False)],
                               translate) == ["!iewZ .sniE"]
    with pytest.raises(ValueError, match="Unknown format 'pdf'"):
        read_document("x", "de", "pdf")
