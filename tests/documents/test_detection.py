"""Language detection among the served languages (lingua), on
LibreTranslate's 0-100 scale, with LibreTranslate's answer where no served
language is found."""

import pytest

from keras_transformer.documents.detection import NONE, Detector

SHORT = {
    "de": ["Guten Morgen!", "Wo ist der Bahnhof?", "Ich habe keine Zeit.", "Danke schön"],
    "en": ["Good morning!", "Where is the station?", "I have no time.", "Thank you very much"],
    "fr": ["Bonjour à tous !", "Où est la gare ?", "Je n'ai pas le temps.", "Merci beaucoup"],
}


@pytest.mark.parametrize("language", sorted(SHORT))
def test_short_texts_are_told_apart_among_the_served_languages(language):
    detector = Detector(["de", "en", "fr"])
    for text in SHORT[language]:
        found = detector.detect(text)
        assert found[0]["language"] == language, (text, found)
        assert 50 < found[0]["confidence"] <= 100
        assert [entry["confidence"] for entry in found] == sorted(
            (entry["confidence"] for entry in found), reverse=True)
        assert {entry["language"] for entry in found} <= {"de", "en", "fr"}


def test_text_in_no_served_language_gets_libretranslate_s_answer():
    detector = Detector(["de", "en"])
    for text in ("你好，世界", "مرحبا بالعالم", "12345", "", "   "):
        assert detector.detect(text) == [NONE] == [{"language": "en", "confidence": 0.0}]
    lone = Detector(["de"])
    assert lone.detect("Wie geht es dir heute?")[0]["language"] == "de"
    assert lone.detect("How are you doing today, my friend?") == [NONE]
    assert Detector(["xx"]).detect("Guten Morgen") == [NONE]  # a code lingua does not know


def test_a_list_is_detected_as_a_whole_weighted_by_length():
    detector = Detector(["de", "en"])
    found = detector.detect_many(["Guten Morgen, wie geht es dir heute?", "Good morning"])
    assert found[0]["language"] == "de" and len(found) == 2
    assert detector.detect_many(["你好"]) == [NONE]
