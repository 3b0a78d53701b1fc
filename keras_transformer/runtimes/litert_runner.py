"""The litert runtime: an export's `litert/translate.tflite`, run by
`translate_litert` (LiteRT's interpreter with tf-text's kernels, no
TensorFlow). Imported when it is opened (`runtime.open_runtime`)."""

import os
import threading

from keras_transformer import run_folder
from keras_transformer.runtimes import translate_litert
from keras_transformer.runtimes.runtime import Runtime, cleaned


class LiteRTRuntime(Runtime):
    """An export's `litert/translate.tflite`: the search is the file's, with
    the settings it was exported with. A file that takes token ids (a BPE
    model's) gets them from the folder's tokenizer in Python, cut to the
    model's length, with the end id. One call runs at a time (a LiteRT
    interpreter is not safe to share between threads, which a server's and
    Beam's workers are)."""

    name = "litert"

    def __init__(self, path, decoding, threads=None, in_flight=1):
        super().__init__(path, decoding, threads, in_flight)
        self._lock = threading.Lock()
        self.runner = translate_litert.open_file(
            os.path.join(run_folder.export_part(path, "litert"), translate_litert.TRANSLATE_FILE),
            threads)
        self.text_in = translate_litert.takes_text(self.runner)

    def _translate(self, sentences, n_best, seed):
        texts = cleaned(sentences)
        if self.text_in:
            inputs = texts
        else:
            inputs = translate_litert.padded(
                [self.tokenizer.encode(text)[:self.max_source_tokens] + [self.config["eos_id"]]
                 for text in texts], self.config["pad_id"])
        with self._lock:
            translations, scores = translate_litert.translate(self.runner, inputs)
        return [[(text, float(score)) for text, score in zip(texts, row_scores)][:n_best]
                for texts, row_scores in zip(translations, scores)]
