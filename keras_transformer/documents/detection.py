"""The language of a text, among the languages a server translates from: what
`"source": "auto"` and `POST /detect` answer.

lingua (`lingua-language-detector`, offline, its language models in the
package) is restricted to the served source languages, so that a text is
never detected as a language nothing translates, and short texts, where
detectors most often fail, are told apart among a few candidates. Its
confidences (each language's share, summing to 1) are given on
LibreTranslate's scale, 0 to 100. A text in none of them (another script,
digits alone) gets no language: LibreTranslate then answers English with
confidence 0, and so does `detect`.
"""

import lingua

NONE = {"language": "en", "confidence": 0.0}
"""LibreTranslate's answer for a text whose language it cannot tell."""


class Detector:
    """Tells the language of texts among `codes` (ISO 639-1 codes, such as
    "de"; those lingua does not know are never detected).

    The language models load when the first text is detected (about a
    second for a few languages)."""

    def __init__(self, codes):
        self.codes = tuple(dict.fromkeys(codes))
        self._languages = {}
        for code in self.codes:
            try:
                language = lingua.Language.from_iso_code_639_1(
                    getattr(lingua.IsoCode639_1, code.upper()))
            except AttributeError:
                continue
            self._languages[language] = code
        self._detector = None

    def detect(self, text, candidates=3):
        """Up to `candidates` `{"language", "confidence"}` dicts for `text`,
        most likely first (confidence 0-100, one decimal); `[NONE]` where
        no served language is found in it."""
        if not self._languages:
            return [dict(NONE)]
        if self._detector is None:
            languages = list(self._languages)
            if len(languages) == 1:  # lingua tells two or more apart: one more, never answered
                languages.append(lingua.Language.ENGLISH if languages[0] != lingua.Language.ENGLISH
                                 else lingua.Language.GERMAN)
            self._detector = lingua.LanguageDetectorBuilder.from_languages(
                *languages).with_preloaded_language_models().build()
        values = self._detector.compute_language_confidence_values(text)
        if not values or values[0].language not in self._languages:
            return [dict(NONE)]
        found = [{"language": self._languages[value.language],
                  "confidence": round(value.value * 100, 1)}
                 for value in values if value.value > 0 and value.language in self._languages]
        return found[:candidates] or [dict(NONE)]

    def language(self, text):
        """The code of `text`'s most likely language among `codes`, or None
        where none is found in it (what flags an `untranslated`
        translation: `trust.text_flags`)."""
        found = self.detect(text, candidates=1)[0]
        return found["language"] if found["confidence"] > 0 else None

    def detect_many(self, texts, candidates=3):
        """Languages of several texts taken together, as LibreTranslate's
        `/detect` answers a list: each language's confidence averaged over
        the texts, weighted by their lengths, most likely first."""
        totals, length = {}, 0
        for text in texts:
            length += len(text)
            for found in self.detect(text, candidates=len(self._languages) or 1):
                if found["confidence"] > 0:
                    totals[found["language"]] = (totals.get(found["language"], 0.0)
                                                 + found["confidence"] * len(text))
        if not totals or not length:
            return [dict(NONE)]
        ranked = sorted(totals.items(), key=lambda item: -item[1])[:candidates]
        return [{"language": code, "confidence": round(total / length, 1)}
                for code, total in ranked]
