"""The mark for tests that compute in bfloat16 on TensorFlow."""

import pytest

from keras_transformer.cpu_features import bfloat16_crashes

needs_bfloat16 = pytest.mark.skipif(
    bfloat16_crashes(),
    reason="ONEDNN_MAX_CPU_ISA caps oneDNN below this CPU's AVX-512: TensorFlow 2.21 crashes in "
           "bfloat16 matmuls (keras_transformer.cpu_features); a CPU without AVX-512 runs them")
