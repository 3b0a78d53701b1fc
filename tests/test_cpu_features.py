"""Whether TensorFlow runs oneDNN here is read from the CPU's flags, as
TensorFlow decides it (real CPUs' flags, and TensorFlow itself on this
one). Where TensorFlow's bfloat16 matmuls would crash (oneDNN capped below
the CPU's AVX-512), or its float16 ones (capped below AVX-512 FP16), that
precision is refused in one line before any matmul runs, and the demo trains
in float32; elsewhere nothing changes."""

import os
import subprocess
import sys

import keras
import pytest

from keras_transformer import cpu_features
from keras_transformer.commands.demo import default_precision
from keras_transformer.models import in_precision, transformer
from keras_transformer.training.distribution import set_precision

from helpers import processes

# The flags of real CPUs, as Linux's /proc/cpuinfo lists them (abridged to
# the instruction-set flags): an AMD EPYC Zen 3 (family 25, model 1; the
# machine this was written on), a Zen 4 EPYC (Genoa), an Intel Xeon of the
# Skylake-SP generation and one of Sapphire Rapids.
_COMMON = ("fpu sse sse2 ssse3 sse4_1 sse4_2 pclmulqdq fma cx16 movbe popcnt aes xsave avx f16c "
           "rdrand bmi1 avx2 bmi2 erms adx rdseed clflushopt xsaveopt xsavec xgetbv1 xsaves ")
ZEN3 = set((_COMMON + "sse4a misalignsse abm clzero sha_ni vaes vpclmulqdq rdpid fsrm").split())
ZEN4 = set((_COMMON + "sse4a abm clzero sha_ni avx512f avx512dq avx512ifma avx512cd avx512bw "
            "avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
            "avx512_bitalg avx512_vpopcntdq rdpid fsrm").split())
SKYLAKE_SP = set((_COMMON + "avx512f avx512dq avx512cd avx512bw avx512vl clwb").split())
SAPPHIRE_RAPIDS = set((_COMMON + "sha_ni avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl "
                       "avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq "
                       "avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm amx_bf16 "
                       "avx512_fp16 amx_tile amx_int8").split())


@pytest.mark.parametrize("flags, default", [(ZEN3, False), (ZEN4, True), (SKYLAKE_SP, False),
                                            (SAPPHIRE_RAPIDS, True), (set(), False)])
def test_onednn_is_on_by_default_only_with_the_neural_network_features(monkeypatch, flags,
                                                                       default):
    for setting, on in ((None, default), ("0", False), ("1", True), ("false", False),
                        ("TRUE", True), ("yes", default)):  # TensorFlow ignores "yes"
        _machine(monkeypatch, None, setting, flags)
        assert cpu_features.onednn_enabled() is on, setting


@pytest.mark.slow
@pytest.mark.parametrize("setting", [None, "0", "1"])
def test_tensorflow_decides_as_the_rule_says_on_this_cpu(setting):
    """TensorFlow itself, imported with TF_ENABLE_ONEDNN_OPTS unset, 0 and
    1, says whether oneDNN is on exactly where `onednn_enabled` does, from
    this CPU's real flags (which ONEDNN_MAX_CPU_ISA does not hide)."""
    env = {k: v for k, v in processes.environment().items()
           if k not in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    result = subprocess.run(
        [sys.executable, "-c", "import tensorflow, sys\n"
         "from keras_transformer import cpu_features\n"
         "print(cpu_features.onednn_enabled(), file=sys.stderr)"],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    said = "oneDNN custom operations are on" in result.stderr
    assert said is (result.stderr.strip().splitlines()[-1] == "True")


def _machine(monkeypatch, isa, onednn, flags):
    for name, value in (("ONEDNN_MAX_CPU_ISA", isa), ("TF_ENABLE_ONEDNN_OPTS", onednn)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: set(flags))


@pytest.mark.parametrize("isa, onednn, flags, crashes", [
    ("AVX2", None, {"avx2", "avx512f", "avx512_bf16"}, True),
    ("avx2", None, {"avx512f", "avx512_vnni"}, True),
    ("AVX2", None, {"avx512f"}, False),  # TensorFlow leaves oneDNN off there
    ("AVX2", "1", {"avx512f"}, True),
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
