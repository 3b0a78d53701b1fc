"""Text of several sentences and paragraphs, cut into the sentences the
model translates and joined back with the text's own whitespace.

A model trained on sentences translates a paragraph badly when it reads it
as one input, and cuts it at its length limit. So a text is cut at its line
breaks (always a boundary) and, within a line, into sentences by sentencex
(Wikimedia's splitter: the rules of some 300 languages, their abbreviations
included, falling back from a language to its relatives), which keeps every
character: its segments join back into the line. Each sentence is stripped
of the whitespace around it, which goes back in place around its
translation.

sentencex rather than Moses' rules (`sentence-splitter`), as measured on
Ding's German (`benchmarks/serve_documents.py --splitters`): the two cut
paragraphs into their sentences about as often (95.9% and 96.5%).
sentencex cuts after some ordinal numbers that Moses' rules keep ("ins 21.
| Jahrhundert": 17 of 11,188 boundaries) and misses a few more boundaries
(25 against 17), but it has rules for some 300 languages where Moses' have
23 (and refuse the rest), is maintained, and is some 30x as fast (both
far below a sentence's translation time).
"""

import dataclasses

import sentencex


@dataclasses.dataclass(frozen=True)
class Sentences:
    """A text as sentences and the whitespace around them: the text is
    `gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1]`.

    Attributes:
        sentences: the sentences, each without whitespace at either end.
        gaps: `len(sentences) + 1` strings of whitespace (line breaks
            included): before the first sentence, between two, after the
            last.
    """

    sentences: tuple
    gaps: tuple

    def join(self, translations):
        """The text with each sentence replaced by its translation, the
        whitespace kept."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} "
                             "sentences.")
        parts = [self.gaps[0]]
        for translation, gap in zip(translations, self.gaps[1:]):
            parts += [translation, gap]
        return "".join(parts)

    def ranges(self):
        """Each sentence's `(start, end)` in the text."""
        ranges, at = [], 0
        for sentence, gap in zip(self.sentences, self.gaps):
            at += len(gap)
            ranges.append((at, at + len(sentence)))
            at += len(sentence)
        return ranges


def split_sentences(text, language, lines=True):
    """`Sentences` of `text` (a str), cut by the rules of `language` (a code
    such as "de"; an unknown one gets sentencex's default rules). A text of
    whitespace alone has no sentence. `lines=False` cuts at punctuation
    only: a line break inside a sentence is a space to it (DeepL's
    `split_sentences=nonewlines`)."""
    sentences, gaps, gap = [], [], ""
    for line in text.splitlines(keepends=True) if lines else [text]:
        for segment in sentencex.segment(language, line):
            core = segment.strip()
            if not core:
                gap += segment
                continue
            start = segment.index(core[0])
            gaps.append(gap + segment[:start])
            sentences.append(core)
            gap = segment[start + len(core):]
    gaps.append(gap)
    return Sentences(tuple(sentences), tuple(gaps))


class TextDocument:
    """Plain text read for translation from `language`, cut into sentences
    (`split_sentences`, at its line breaks too unless `lines=False`), or,
    with `split=False`, taken as one sentence (a line of a corpus whose
    scores are compared with published ones).

    Attributes:
        sentences: what to translate.
    """

    aligned = False
    """`render` needs only the translations."""

    def __init__(self, text, language, split=True, lines=True):
        self._parts = split_sentences(text, language, lines) if split else None
        self.sentences = list(self._parts.sentences) if split else [text]

    def render(self, translations):
        """The text with its sentences translated (`translations`, in order)."""
        return self._parts.join(list(translations)) if self._parts else translations[0]
