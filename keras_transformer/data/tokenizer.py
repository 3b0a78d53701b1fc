"""A shared subword vocabulary, as in the paper (section 5.1): SentencePiece
BPE trained on both languages with the `sentencepiece` package, applied inside
the TensorFlow graph by `tensorflow_text.SentencepieceTokenizer`, so that the
same model file tokenises training data and the exported SavedModel's input.

Every tokenizer the package uses (this one, and the imported models' in
`keras_transformer.pretrained`) offers the same interface: `tokenize` and
`tokenize_target` (strings -> ragged ids, no special tokens), `detokenize`
(target ids -> strings), `pieces` and `target_pieces`, `save(directory)`,
the special ids `pad_id`, `unk_id`, `bos_id` (the decoder's start token)
and `eos_id`, `vocab_size` / `target_vocab_size`, and `in_graph`: whether
it runs as TensorFlow ops that a SavedModel can hold (fairseq's Moses
tokenization cannot). `run_folder.load_tokenizer(directory)` opens the one a
run folder holds; input pipelines tokenize with `input_tokenizer(tokenizer)`,
which for ours gives the same ids faster.
"""

import itertools
import os
import tempfile

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.data.python_tokenize import python_tokenize
from keras_transformer.names import TOKENIZER_TYPES
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.textfiles import clean_text
from keras_transformer.vocabularies import sentencepiece_proto
from keras_transformer.vocabularies.sentencepiece_text import (
    MODEL_FILE,
    SentencePieceText,
)


def clean_texts(texts):
    """String tensor -> the text the model reads: invalid UTF-8 becomes
    U+FFFD and NUL a space (the graph form of `textfiles.clean_text`; the
    training data, the Translator and the SavedModel all go through it)."""
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                         replacement_char=0xFFFD)
    return tf.strings.regex_replace(texts, "\\x00", " ")


def encode_sources(tokenizer, texts, max_tokens):
    """Strings -> padded source ids ending in the end token, cut to
    `max_tokens` (a model's `config.max_source_tokens`), as every search
    reads them; and a mask of the blank ones. Any tokenizer of the
    package's (ours, or an imported model's)."""
    return _ended(tokenizer, tokenizer.tokenize(clean_texts(texts))[:, :max_tokens])


def encode_targets(tokenizer, texts, max_tokens):
    """`encode_sources` of translations, by the tokenizer's target side (a
    model's `config.max_length - 1` tokens at most): the ids a search would
    have written for them, and a mask of the blank ones."""
    return _ended(tokenizer, tokenizer.tokenize_target(clean_texts(texts))[:, :max_tokens])


def _ended(tokenizer, ids):
    """Ragged ids -> padded ids, each row ending in the end token; and a
    mask of the empty rows."""
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    # The end id written into a padded column, not concatenated to the
    # ragged rows: the ragged concatenation's int64 ops made oneDNN log an
    # error line when run eagerly.
    padded = tf.pad(ids.to_tensor(default_value=tokenizer.pad_id), [[0, 0], [0, 1]],
                    constant_values=tokenizer.pad_id)
    columns = tf.range(tf.shape(padded)[1])
    return tf.where(columns[None] == lengths[:, None], tokenizer.eos_id, padded), lengths == 0


def train_tokenizer(texts, model_path, vocab_size, max_sentences=2_000_000,
                    model_type="bpe"):
    """Trains a SentencePiece model on `texts` and writes `model_path`.

    Args:
        texts: an iterable of strings (both languages for a shared
            vocabulary).
        model_path: the `.model` file to write (a `.vocab` file is written
            next to it), or None to write no file: the `Tokenizer` holds
            the model's bytes (a worker that needs the model but not the
            file).
        vocab_size: number of pieces including the four special ids (the
            paper's EN-DE vocabulary has about 37,000).
        max_sentences: SentencePiece samples at most this many lines.
        model_type: one of `TOKENIZER_TYPES`, or "word" (each
            whitespace-separated word a piece: the benchmarks' tokenizers,
            whose token counts they control exactly).

    Returns:
        A `Tokenizer` on the new model.
    """
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8; got {vocab_size}.")
    if model_type not in TOKENIZER_TYPES + ("word",):
        raise ValueError(f"model_type must be one of {TOKENIZER_TYPES + ('word',)}; "
                         f"got {model_type!r}.")
    folder = None  # the system's temporary folder, without a model_path
    if model_path is not None:
        model_path = os.fspath(model_path)
        if not model_path.endswith(".model"):
            raise ValueError(f"model_path must end in .model; got {model_path!r}.")
        folder = os.path.dirname(model_path) or "."
        os.makedirs(folder, exist_ok=True)
    # Train into a temporary prefix and move into place, so that an
    # interrupted run never leaves a half-written model behind.
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        prefix = os.path.join(scratch, "spm")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(clean_text(text) for text in texts),
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
        if model_path is None:
            return Tokenizer(prefix + ".model")  # read before the folder goes
        os.replace(prefix + ".vocab", model_path[: -len(".model")] + ".vocab")
        os.replace(prefix + ".model", model_path)
    return Tokenizer(model_path)


def train_corpus_tokenizer(corpus, model_path, vocab_size, max_sentences=1_000_000, seed=1234,
                           model_type="bpe"):
    """Trains the shared SentencePiece model on both sides of the first
    `max_sentences` pairs of `corpus`'s training split (a `Corpus`), with
    SentencePiece's sampling seeded, so that every process that does it
    builds the same model (see `train_tokenizer`; `model_type` is one of
    `TOKENIZER_TYPES`)."""
    sentencepiece.set_random_generator_seed(seed)
    pairs = corpus.pairs("train").take(max_sentences).as_numpy_iterator()
    print(f"Training a {vocab_size}-piece SentencePiece {model_type} model on "
          f"{corpus.source_language} and {corpus.target_language} training text ...")
    return train_tokenizer(itertools.chain.from_iterable(pairs), model_path, vocab_size,
                           model_type=model_type)


class Tokenizer(tf.Module):
    """SentencePiece tokenisation as TensorFlow ops (tf-text).

    Args:
        model: path of a `.model` file, or its bytes.

    Attributes:
        model_type: the SentencePiece algorithm ("bpe", "unigram", ...), as
            the model file records it.
        vocabulary: the same model in plain Python (`SentencePieceText`),
            as an imported model's tokenizer holds its vocabulary.

    Create tokenizers after seeding: `tf.random.set_seed` (which
    `keras.utils.set_random_seed` calls) clears TensorFlow's kernel cache,
    and with it tf-text's kernel-owned SentencePiece resource of a tokenizer
    made before.

    Raises:
        ValueError: the file is missing or is not a SentencePiece model.
    """

    in_graph = True

    def __init__(self, model):
        super().__init__(name="tokenizer")
        where = "the given bytes"
        if isinstance(model, (str, os.PathLike)):
            where = os.fspath(model)
            if not tf.io.gfile.exists(model):
                raise ValueError(f"Tokenizer model {where!r} does not exist.")
            try:
                with tf.io.gfile.GFile(model, "rb") as file:
                    model = file.read()
            except tf.errors.OpError as error:  # a folder, or not readable
                raise ValueError(f"Cannot read the tokenizer model {where}: {error.message}") from None
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model)
        except (RuntimeError, OSError, TypeError) as error:
            raise ValueError(f"Not a SentencePiece model: {where} ({error}); the file is damaged: "
                             "copy it again from the run that trained it.") from None
        if (processor.pad_id(), processor.bos_id(), processor.eos_id()) != (PAD_ID, BOS_ID, EOS_ID):
            raise ValueError(
                "This SentencePiece model does not use pad=0, bos=2, eos=3; train it "
                "with keras_transformer.data.train_tokenizer."
            )
        self.model_proto = model
        self.model_type = sentencepiece_proto.model_type(model)
        self.vocab_size = self.target_vocab_size = processor.vocab_size()
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
        # The same model in plain Python, as the imported tokenizers hold
        # theirs: what a lone sentence is tokenized with (`Translator`).
        self.vocabulary = SentencePieceText(processor)
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)

    @classmethod
    def from_directory(cls, directory):
        """The `tokenizer.model` of a run or export folder."""
        return cls(os.path.join(directory, MODEL_FILE))

    def tokenize(self, texts):
        """Strings `(batch,)` -> ragged int32 ids `(batch, None)`, no specials."""
        return self._sentencepiece.tokenize(texts)

    def tokenize_target(self, texts):
        """The same as `tokenize`: the vocabulary is shared by both languages."""
        return self.tokenize(texts)

    def save(self, directory):
        """Writes `tokenizer.model` into `directory` (a run or export folder)."""
        with tf.io.gfile.GFile(os.path.join(directory, MODEL_FILE), "wb") as file:
            file.write(self.model_proto)

    def pieces(self, ids):
        """The subword strings of some ids (for display)."""
        return self.vocabulary.pieces(ids)

    def target_pieces(self, ids):
        """The same as `pieces`: one vocabulary serves both languages."""
        return self.pieces(ids)

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


def input_tokenizer(tokenizer):
    """What input pipelines (`data.encode_pairs`) tokenize with for
    `tokenizer`: for ours the same ids at more tokens a CPU second than
    tf-text's op (`_InputTokenizer`); an imported model's tokenizer as it is."""
    return _InputTokenizer(tokenizer) if isinstance(tokenizer, Tokenizer) else tokenizer


class _InputTokenizer:
    """`Tokenizer.tokenize` for input pipelines: a batch of strings goes
    through the `sentencepiece` package's own encoder (`python_tokenize`),
    one string through tf-text's op.

    Our own path rather than tf-text's op because it is faster: the same
    model gives the same ids (tested) at more tokens a CPU second, and the
    package releases the GIL while it encodes, so tf.data's parallel calls
    run side by side. Training's first pass and `prepare-data` both run
    faster for it (docs/benchmarks.md, "Training input"). Each call encodes on
    its own thread (`num_threads=1`): tf.data, or a Beam worker's one
    thread, decides how many run. A single string stays with tf-text: a
    `numpy_function` call costs more than the op's whole work for one pair.
    A SavedModel holds tf-text's op, never this."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        processor = tokenizer.vocabulary.processor  # the same model: one set of ids
        self._encode = lambda texts: processor.encode(texts, num_threads=1)

    def tokenize(self, texts):
        """Strings `(batch,)` -> ragged int32 ids `(batch, None)`; one string
        -> ids `(None,)`; no special ids, as `Tokenizer.tokenize`."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self._tokenizer.tokenize(texts)
        return python_tokenize(texts, self._encode, name="sentencepiece_tokenize")

    def tokenize_target(self, texts):
        """The same as `tokenize`: the vocabulary is shared by both languages."""
        return self.tokenize(texts)
