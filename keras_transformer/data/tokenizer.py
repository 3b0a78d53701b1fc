"""A shared subword vocabulary, as in the paper (section 5.1): SentencePiece
BPE trained on both languages with the `sentencepiece` package, applied inside
the TensorFlow graph by `tensorflow_text.SentencepieceTokenizer`, so that the
same model file tokenises training data and the exported SavedModel's input.
"""

import os
import tempfile

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def train_tokenizer(texts, model_path, vocab_size, max_sentences=2_000_000,
                    model_type="bpe"):
    """Trains a SentencePiece model on `texts` and writes `model_path`.

    Args:
        texts: an iterable of strings (both languages for a shared
            vocabulary).
        model_path: the `.model` file to write (a `.vocab` file is written
            next to it).
        vocab_size: number of pieces including the four special ids (the
            paper's EN-DE vocabulary has about 37,000).
        max_sentences: SentencePiece samples at most this many lines.
        model_type: "bpe" (the paper) or "unigram".

    Returns:
        A `Tokenizer` on the new model.
    """
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8; got {vocab_size}.")
    model_path = os.fspath(model_path)
    if not model_path.endswith(".model"):
        raise ValueError(f"model_path must end in .model; got {model_path!r}.")
    os.makedirs(os.path.dirname(model_path) or ".", exist_ok=True)
    # Train into a temporary prefix and move into place, so that an
    # interrupted run never leaves a half-written model behind.
    with tempfile.TemporaryDirectory(dir=os.path.dirname(model_path) or ".") as scratch:
        prefix = os.path.join(scratch, "spm")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(text.decode() if isinstance(text, bytes) else text for text in texts),
            model_prefix=prefix,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            minloglevel=2,
        )
        os.replace(prefix + ".vocab", model_path[: -len(".model")] + ".vocab")
        os.replace(prefix + ".model", model_path)
    return Tokenizer(model_path)


class Tokenizer(tf.Module):
    """SentencePiece tokenisation as TensorFlow ops (tf-text).

    Args:
        model: path of a `.model` file, or its bytes.

    Create tokenizers after seeding: `tf.random.set_seed` (which
    `keras.utils.set_random_seed` calls) clears TensorFlow's kernel cache,
    and with it tf-text's kernel-owned SentencePiece resource of a tokenizer
    made before.

    Raises:
        ValueError: the file is missing or is not a SentencePiece model.
    """

    def __init__(self, model):
        super().__init__(name="tokenizer")
        if isinstance(model, (str, os.PathLike)):
            if not tf.io.gfile.exists(model):
                raise ValueError(f"Tokenizer model {os.fspath(model)!r} does not exist.")
            with tf.io.gfile.GFile(model, "rb") as file:
                model = file.read()
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model)
        except (RuntimeError, OSError, TypeError) as error:
            raise ValueError(f"Not a SentencePiece model ({error}).") from None
        if (processor.pad_id(), processor.bos_id(), processor.eos_id()) != (PAD_ID, BOS_ID, EOS_ID):
            raise ValueError(
                "This SentencePiece model does not use pad=0, bos=2, eos=3; train it "
                "with keras_transformer.data.train_tokenizer."
            )
        self.model_proto = model
        self.vocab_size = processor.vocab_size()
        self._processor = processor
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)

    def tokenize(self, texts):
        """Strings `(batch,)` -> ragged int32 ids `(batch, None)`, no specials."""
        return self._sentencepiece.tokenize(texts)

    def pieces(self, ids):
        """The subword strings of some ids (for display)."""
        return [self._processor.id_to_piece(int(i)) for i in ids]

    def detokenize(self, ids):
        """Ids `(batch, length)` (dense or ragged) -> strings.

        Everything from the first end-of-sentence id on is dropped, and so are
        padding and start ids.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor()
        ids = tf.cast(ids, tf.int32)
        before_end = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=-1, exclusive=True) == 0
        keep = before_end & (ids != EOS_ID) & (ids != PAD_ID) & (ids != BOS_ID)
        return self._sentencepiece.detokenize(tf.ragged.boolean_mask(ids, keep))
