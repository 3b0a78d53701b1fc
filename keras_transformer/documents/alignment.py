"""Which part of a translation came from which part of its source: what puts
a document's inline markup (HTML's `<b>`, a .docx run's bold) around the
words it marked, after the sentence was translated without it.

An `Alignment` pairs spans of the translation (its subword pieces) with
spans of the source. Runtimes that can read the model's encoder-decoder
attention give one (`runtimes.Runtime.align`: each target piece aligned to
the source piece it attends to most); the others get `proportional`: each
word of the translation aligned to the source word at the same relative
place, which keeps every tag, in the right order, around about the right
words.
"""

import bisect
import dataclasses
import re

_WORD = re.compile(r"\S+")


@dataclasses.dataclass(frozen=True)
class Alignment:
    """Spans of a translation and the spans of its source they come from.

    Attributes:
        pairs: `((target_start, target_end, source_start, source_end), ...)`,
            character offsets into the translation and the source, in the
            translation's order.
    """

    pairs: tuple

    def target_span(self, start, end):
        """The part of the translation that comes from the source's
        characters `[start, end)`: `(start, end)` of the translation, from
        the first to the last of its pieces aligned into those characters
        (of a piece whose source only partly lies there, the same share);
        None when none is."""
        found = []
        for target_start, target_end, source_start, source_end in self.pairs:
            low, high = max(start, source_start), min(end, source_end)
            if low >= high:
                continue
            scale = (target_end - target_start) / (source_end - source_start)
            found.append((target_start + round((low - source_start) * scale),
                          target_start + round((high - source_start) * scale)))
        if not found:
            return None
        return min(low for low, _ in found), max(high for _, high in found)


def proportional(source, translation):
    """The alignment without the model: each word of `translation` aligned
    to the word of `source` at the same relative place (by characters)."""
    source_words = [match.span() for match in _WORD.finditer(source)]
    if not source_words:
        return Alignment(())
    starts = [start for start, _ in source_words]
    pairs = []
    for match in _WORD.finditer(translation):
        middle = (match.start() + match.end()) / 2 / max(len(translation), 1)
        index = min(bisect.bisect_right(starts, middle * len(source)) - 1, len(starts) - 1)
        source_start, source_end = source_words[max(index, 0)]
        pairs.append((match.start(), match.end(), source_start, source_end))
    return Alignment(tuple(pairs))


def marked(split, spans):
    """For each sentence of `split` (`sentences.Sentences` of a text), whether
    one of `spans` (`(start, end)` in the text) starts or ends inside it.
    Only there does where the markup goes depend on the alignment: markup
    around whole sentences goes around their translations whichever
    alignment places it. So only these sentences need the model's
    attention read again; the others are aligned by position (`joined`)."""
    boundaries = sorted({boundary for span in spans for boundary in span})
    found = []
    for start, end in split.ranges():
        after = bisect.bisect_right(boundaries, start)
        found.append(after < len(boundaries) and boundaries[after] < end)
    return found


def joined(split, results):
    """`(translated text, Alignment)` of a text whose sentences (`split`,
    `sentences.Sentences`) were translated: `results` holds `(translation,
    alignment)` for each sentence, an alignment of None made by
    `proportional`; the translations are joined with the text's whitespace
    and the alignments' offsets moved into the whole texts."""
    pairs, parts = [], [split.gaps[0]]
    source_at = target_at = len(split.gaps[0])
    for sentence, gap, (translation, alignment) in zip(split.sentences, split.gaps[1:], results):
        if alignment is None:
            alignment = proportional(sentence, translation)
        pairs += [(target_start + target_at, target_end + target_at,
                   source_start + source_at, source_end + source_at)
                  for target_start, target_end, source_start, source_end in alignment.pairs]
        parts += [translation, gap]
        source_at += len(sentence) + len(gap)
        target_at += len(translation) + len(gap)
    return "".join(parts), Alignment(tuple(pairs))


def from_tokens(links, source_offsets, target_offsets):
    """The `Alignment` of token-level `links` (`(target_index, source_index)`
    pairs) given each token's character span in the source and in the
    translation (`(start, end)`; tokens of no characters, such as the end
    token, are left out)."""
    pairs = []
    for target, source in links:
        if target >= len(target_offsets) or source >= len(source_offsets):
            continue
        target_start, target_end = target_offsets[target]
        source_start, source_end = source_offsets[source]
        if target_end > target_start and source_end > source_start:
            pairs.append((target_start, target_end, source_start, source_end))
    return Alignment(tuple(sorted(pairs)))


def place(spans, alignment, source_length, length):
    """Where each of `spans` (`(start, end)` in a source of `source_length`
    characters, nested or disjoint, in document order: an element's span
    before those of the elements inside it) goes in its translation of
    `length` characters: one `(start, end)` each.

    Each span goes where the alignment takes its characters, cut to its
    parent's span and to the part no earlier sibling holds (siblings may
    change order with the words, never overlap), so that the markup keeps
    the source's nesting and stays well formed; a span whose characters the
    alignment does not reach is placed empty where the source had it,
    relatively."""
    placed = []
    stack = [[source_length, 0, length, []]]  # open: [source end, start, end, siblings' spans]
    for start, end in spans:
        while len(stack) > 1 and stack[-1][0] <= start and not (start == end == stack[-1][0]):
            stack.pop()
        _, low, high, taken = stack[-1]
        found = alignment.target_span(start, end)
        if found is None:
            at = round(start / max(source_length, 1) * length)
            found = (at, at)
        target_start = min(max(found[0], low), high)
        target_end = min(max(found[1], target_start), high)
        target_start, target_end = _free(target_start, target_end, taken)
        taken.append((target_start, target_end))
        placed.append((target_start, target_end))
        stack.append([end, target_start, target_end, []])
    return placed


def _free(start, end, taken):
    """The longest part of `[start, end)` that no span of `taken` overlaps
    (the first of equals), or an empty span at `start` moved out of any
    span it falls inside."""
    pieces, at = [], start
    for taken_start, taken_end in sorted(taken):
        if taken_end <= at or taken_start >= end:
            continue
        if taken_start > at:
            pieces.append((at, taken_start))
        at = max(at, taken_end)
    if at < end:
        pieces.append((at, end))
    if pieces:
        return max(pieces, key=lambda piece: (piece[1] - piece[0], -piece[0]))
    for taken_start, taken_end in taken:
        if taken_start < start < taken_end:
            start = taken_end
    return start, start


def compose(first, second):
    """The alignment of a translation made through a pivot language: `first`
    aligns the pivot text with the source, `second` the translation with
    the pivot text; each piece of the translation is aligned to the source
    characters its pivot piece came from."""
    pairs = []
    for target_start, target_end, pivot_start, pivot_end in second.pairs:
        sources = [(source_start, source_end)
                   for start, end, source_start, source_end in first.pairs
                   if start < pivot_end and pivot_start < end]
        if sources:
            pairs.append((target_start, target_end, min(start for start, _ in sources),
                          max(end for _, end in sources)))
    return Alignment(tuple(pairs))
