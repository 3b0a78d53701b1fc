"""Where TensorFlow's bfloat16 matmuls would crash (oneDNN capped below the
CPU's AVX-512), or its float16 ones (capped below AVX-512 FP16), that
precision is refused in one line before any matmul runs, and the demo trains
in float32; elsewhere nothing changes."""

import os

import keras
import pytest

from keras_transformer import cpu_features
from keras_transformer.commands.demo import default_precision
from keras_transformer.models import in_precision, transformer
from keras_transformer.training.distribution import set_precision


def _machine(monkeypatch, isa, onednn, flags):
    for name, value in (("ONEDNN_MAX_CPU_ISA", isa), ("TF_ENABLE_ONEDNN_OPTS", onednn)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: set(flags))


@pytest.mark.parametrize("isa, onednn, flags, crashes", [
    ("AVX2", None, {"avx2", "avx512f", "avx512_bf16"}, True),
    ("avx2", None, {"avx512f"}, True),
    ("AVX2", "0", {"avx512f", "avx512_bf16"}, False),
    ("AVX512_CORE", None, {"avx512f", "avx512_bf16"}, False),
    (None, None, {"avx512f", "avx512_bf16"}, False),
    ("AVX2", None, {"avx2", "fma"}, False),
])
def test_bfloat16_crashes_only_where_the_cap_hides_the_cpus_avx512(monkeypatch, isa, onednn,
                                                                  flags, crashes):
    _machine(monkeypatch, isa, onednn, flags)
    assert cpu_features.bfloat16_crashes() is crashes
    assert cpu_features.native_bfloat16() is ("avx512_bf16" in flags and not crashes)


@pytest.mark.parametrize("isa, flags, crashes", [
    ("AVX2", {"avx512f", "avx512_bf16", "avx512_fp16"}, True),
    ("AVX512_CORE_BF16", {"avx512f", "avx512_bf16", "avx512_fp16"}, True),
    ("AVX512_CORE_FP16", {"avx512f", "avx512_bf16", "avx512_fp16"}, False),
    ("AVX2", {"avx512f", "avx512_bf16"}, False),  # no FP16 kernels to pick
    (None, {"avx512f", "avx512_fp16"}, False),
])
def test_float16_crashes_only_where_the_cap_hides_the_cpus_avx512_fp16(monkeypatch, isa, flags,
                                                                       crashes):
    _machine(monkeypatch, isa, None, flags)
    assert cpu_features.crashes("float16") is crashes
    if crashes:
        with pytest.raises(ValueError, match=f"float16 cannot run here: ONEDNN_MAX_CPU_ISA={isa}"):
            set_precision("mixed_float16")
    assert keras.config.dtype_policy().name == "float32"


def test_bfloat16_is_refused_in_one_line_where_it_would_crash(monkeypatch, tiny_config):
    model = transformer(tiny_config, 40)
    _machine(monkeypatch, "AVX2", None, {"avx2", "avx512f", "avx512_bf16"})
    for request in (lambda: in_precision(model, "bfloat16"),
                    lambda: set_precision("mixed_bfloat16")):
        with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN") as error:
            request()
        assert "\n" not in str(error.value)
    assert keras.config.dtype_policy().name == "float32"
    assert default_precision() == "float32"
    _machine(monkeypatch, None, None, {"avx2", "avx512f", "avx512_bf16"})
    assert default_precision() == "mixed_bfloat16"


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads Linux's /proc/cpuinfo")
def test_this_machine_reads_its_flags():
    assert "sse2" in cpu_features.cpu_flags()  # every x86-64 CPU has SSE2
