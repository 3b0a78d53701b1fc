"""Text <-> ids without TensorFlow, for the runners of exported models (the
onnxruntime and CTranslate2 translators): this package's SentencePiece
tokenizer with the `sentencepiece` package, or an imported model's
plain-Python tokenizer (Marian's `MarianVocabulary`, FSMT's
`FsmtVocabulary`). Each offers `encode(text)` (source ids, without the end
id) and `decode(ids)` (target ids up to the first end id -> text)."""

import os

import sentencepiece

from keras_transformer import special_ids


class SentencePieceText:
    """Text <-> ids with one of this package's SentencePiece models (special
    ids 0-3)."""

    def __init__(self, path):
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(model_file=path)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"Cannot load the tokenizer model {path}: {error}") from None

    def encode(self, text):
        """Source ids, without the end token."""
        return self.processor.encode(text)

    def decode(self, ids):
        """Target ids up to the first end token -> text."""
        ids = [int(i) for i in ids]
        ids = ids[:ids.index(special_ids.EOS_ID)] if special_ids.EOS_ID in ids else ids
        return self.processor.decode(
            [i for i in ids if i not in (special_ids.PAD_ID, special_ids.BOS_ID)])


def text_tokenizer(directory):
    """The tokenizer files of an export folder: ours (`tokenizer.model`) or an
    imported model's (Marian's `vocab.json`, FSMT's `vocab-src.json`, ...)."""
    if os.path.exists(os.path.join(directory, "vocab.json")):
        from keras_transformer.pretrained.marian_vocabulary import MarianVocabulary

        return MarianVocabulary.from_directory(directory)
    if os.path.exists(os.path.join(directory, "vocab-src.json")):
        from keras_transformer.pretrained.fsmt_vocabulary import FsmtVocabulary

        return FsmtVocabulary.from_directory(directory)
    return SentencePieceText(os.path.join(directory, "tokenizer.model"))
