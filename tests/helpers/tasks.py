"""The synthetic task the training tests use, under short names."""

from keras_transformer.data.synthetic import REVERSE_VOCAB as VOCAB
from keras_transformer.data.synthetic import reverse_task as reverse_dataset

__all__ = ["VOCAB", "reverse_dataset"]
