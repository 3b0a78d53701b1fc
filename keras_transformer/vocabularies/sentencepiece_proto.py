"""The few fields of a SentencePiece model file (`ModelProto`) this package
reads or rewrites: the model type (unigram or BPE: which encoders tokenize
it exactly) and the pieces.

sentencepiece ships `sentencepiece_model_pb2`, but generated for protobuf 7,
which TensorFlow 2.21 does not allow; this describes just those fields with
protobuf's descriptor API. Fields it does not describe are kept as unknown
fields, so that a model whose pieces are replaced keeps its normalizer and
trainer settings.
"""

import functools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
"""`TrainerSpec.ModelType` numbers (sentencepiece_model.proto)."""
PIECE_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "byte": 6, "unused": 5}
"""`SentencePiece.Type` numbers (sentencepiece_model.proto)."""

_PACKAGE = "keras_transformer_sentencepiece"


@functools.cache
def _model_class():
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE,
                                              syntax="proto2")
    piece = file.message_type.add(name="SentencePiece")
    piece.field.add(name="piece", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    piece.field.add(name="score", number=2, type=field.TYPE_FLOAT, label=field.LABEL_OPTIONAL)
    piece.field.add(name="type", number=3, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    trainer = file.message_type.add(name="TrainerSpec")
    trainer.field.add(name="model_type", number=3, type=field.TYPE_INT32,
                      label=field.LABEL_OPTIONAL, default_value="1")
    model = file.message_type.add(name="ModelProto")
    model.field.add(name="pieces", number=1, type=field.TYPE_MESSAGE,
                    type_name=f".{_PACKAGE}.SentencePiece", label=field.LABEL_REPEATED)
    model.field.add(name="trainer_spec", number=2, type=field.TYPE_MESSAGE,
                    type_name=f".{_PACKAGE}.TrainerSpec", label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.ModelProto"))


def model_type(model_proto):
    """"unigram", "bpe", "word" or "char": the algorithm a SentencePiece
    model (the bytes of its .model file) was trained with."""
    number = _model_class().FromString(model_proto).trainer_spec.model_type
    return MODEL_TYPES.get(number, f"type {number}")


def with_pieces(model_proto, pieces):
    """The model with its pieces replaced by `pieces`, a list of
    `(piece, type)` (a `PIECE_TYPES` name), id i being the i-th; every other
    setting kept."""
    model = _model_class().FromString(model_proto)
    del model.pieces[:]
    for text, kind in pieces:
        model.pieces.add(piece=text, score=0.0, type=PIECE_TYPES[kind])
    return model.SerializeToString()
