"""The marks for tests that compute in bfloat16 or float16 on TensorFlow."""

import pytest

from keras_transformer.cpu_features import crashes

needs_bfloat16 = pytest.mark.skipif(
    crashes("bfloat16"),
    reason="ONEDNN_MAX_CPU_ISA caps oneDNN below this CPU's AVX-512: TensorFlow 2.21 crashes in "
           "bfloat16 matmuls (keras_transformer.cpu_features); a CPU without AVX-512 runs them")

needs_float16 = pytest.mark.skipif(
    crashes("float16"),
    reason="ONEDNN_MAX_CPU_ISA caps oneDNN below this CPU's AVX-512 FP16: TensorFlow 2.21 "
           "crashes in float16 matmuls (keras_transformer.cpu_features); other CPUs run them")
