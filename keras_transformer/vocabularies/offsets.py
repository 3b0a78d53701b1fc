"""Where each subword piece of a text is in it: the character spans that
align a translation with its source (`documents.alignment`).

The tokenizers give pieces, not offsets (and Marian's and FSMT's wrap
theirs), so the pieces are found in the text, in order: a piece stripped of
its word markers (SentencePiece's "▁", BPE's "</w>" and "@@") is looked for
from where the last one ended. A piece the text does not hold as written
(normalized by the tokenizer, an unknown piece, a special token) gets an
empty span there, so that it aligns nothing rather than the wrong words.
"""

MARKERS = ("\u2581", "</w>", "@@")


def piece_offsets(text, pieces):
    """`(start, end)` in `text` of each of `pieces`, in order."""
    offsets, at = [], 0
    lowered = None
    for piece in pieces:
        surface = piece
        for marker in MARKERS:
            surface = surface.replace(marker, "")
        surface = surface.strip()
        start = text.find(surface, at) if surface else -1
        if start < 0 and surface:  # a lower-casing tokenizer (FSMT's option)
            lowered = lowered or text.lower()
            start = lowered.find(surface.lower(), at)
        if start < 0 or text[at:start].strip():
            offsets.append((at, at))  # not here as written: no characters
            continue
        offsets.append((start, start + len(surface)))
        at = start + len(surface)
    return offsets
