"""Text <-> ids with one of this package's SentencePiece models, in plain
Python (the `sentencepiece` package): what the runtimes of exported models
tokenize with, where `data.Tokenizer` does it in TensorFlow ops."""

import os

import sentencepiece

from keras_transformer import special_ids

MODEL_FILE = "tokenizer.model"
"""The file our tokenizer is saved as, in a run or export folder (and its
`.vocab` beside it, for reading)."""


class SentencePieceText:
    """Text <-> ids with one of this package's SentencePiece models (special
    ids 0-3): `encode(text)` gives source ids without the end id,
    `decode(ids)` the text of target ids up to the first end id."""

    def __init__(self, model):
        """`model`: the path of a `.model` file, or a
        `SentencePieceProcessor` that holds one already (`data.Tokenizer`'s,
        which checked it)."""
        if isinstance(model, sentencepiece.SentencePieceProcessor):
            self.processor = model
            return
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(model_file=model)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"Cannot load the tokenizer model {model}: {error}") from None

    @classmethod
    def from_directory(cls, directory):
        """The `tokenizer.model` of a run or export folder."""
        return cls(os.path.join(directory, MODEL_FILE))

    def encode(self, text):
        """Source ids, without the end token."""
        return self.processor.encode(text)

    def encode_target(self, text):
        """Target ids, without the end token: the vocabulary is shared."""
        return self.encode(text)

    def pieces(self, ids, target=False):
        """The piece of each id (one vocabulary for both sides)."""
        return [self.processor.id_to_piece(int(index)) for index in ids]

    def decode(self, ids):
        """Target ids up to the first end token -> text."""
        ids = [int(i) for i in ids]
        ids = ids[:ids.index(special_ids.EOS_ID)] if special_ids.EOS_ID in ids else ids
        return self.processor.decode(
            [i for i in ids if i not in (special_ids.PAD_ID, special_ids.BOS_ID)])
