"""What this CPU computes, as TensorFlow sees it: whether TensorFlow runs
oneDNN's kernels here, whether the CPU does bfloat16 natively, and whether
TensorFlow's bfloat16 or float16 matmuls would crash here. Every test and
command whose expectation depends on these asks this module, which reads
the CPU's flags, never one machine's behaviour.

TensorFlow 2.21 on Linux turns oneDNN's custom operations on at its import
only where the CPU has a neural-network feature (`ONEDNN_BY_DEFAULT`:
AVX-512 VNNI or BF16, AVX-VNNI, AMX; Cascade Lake, Zen 4 and later), unless
`TF_ENABLE_ONEDNN_OPTS` says otherwise; an AVX2-only CPU (Zen 3, Haswell to
Comet Lake) and an AVX-512 one without them (Skylake-X) run Eigen's kernels
(`onednn_enabled`). `ONEDNN_MAX_CPU_ISA` cannot show this: it caps the
instructions oneDNN uses, while TensorFlow still decides from the real flags
whether oneDNN runs at all.

Where oneDNN runs, TensorFlow 2.21 picks its bfloat16 kernels from the
CPU's flags (AVX-512), while `ONEDNN_MAX_CPU_ISA` caps the instructions
oneDNN may use. Capped below AVX-512 on a CPU that has it
(`ONEDNN_MAX_CPU_ISA=AVX2`, the setting that imitates an older CPU), the
first bfloat16 matmul ends the process with a segmentation fault (it does
on an AVX-512 BF16 EPYC, where caps of AVX512_CORE and higher run). A CPU
without AVX-512 does not crash, nor does one where oneDNN is off
(`TF_ENABLE_ONEDNN_OPTS=0`, or TensorFlow's default without the flags
above): Eigen's kernels compute bfloat16 there. float16 does the same on a CPU with AVX-512 FP16 (Sapphire Rapids
and later) capped below it: there a float16 matmul crashed under caps up to
AVX512_CORE_BF16 and ran under AVX512_CORE_FP16.
"""

import os

ONEDNN_BY_DEFAULT = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                               "amx_int8", "amx_bf16"})
"""The CPU flags (as Linux's `/proc/cpuinfo` names them) any one of which
makes TensorFlow 2.21 turn oneDNN on by default (`IsMklEnabled` in
tensorflow/core/util/util.cc)."""

_BELOW_AVX512 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
"""oneDNN's `ONEDNN_MAX_CPU_ISA` values that leave out AVX-512."""

_CRASHING_CAPS = {
    "bfloat16": ("avx512f", _BELOW_AVX512),
    "float16": ("avx512_fp16", _BELOW_AVX512 + ("AVX512_CORE", "AVX512_CORE_VNNI",
                                                "AVX512_CORE_BF16")),
}
"""For each half precision: the CPU flag whose kernels TensorFlow picks, and
the caps that hide it."""


def cpu_flags():
    """The CPU's feature flags (`/proc/cpuinfo`); empty where unreadable."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def onednn_enabled(environ=None):
    """Whether TensorFlow, imported with the environment `environ` (default:
    this process's), runs oneDNN's custom operations: `TF_ENABLE_ONEDNN_OPTS`
    where it is 0 or false, 1 or true (any case, as TensorFlow reads it;
    another value it ignores with a warning), else TensorFlow's default for
    this CPU's flags (`ONEDNN_BY_DEFAULT`; off where the flags cannot be
    read)."""
    value = (os.environ if environ is None else environ).get("TF_ENABLE_ONEDNN_OPTS", "").lower()
    if value in ("0", "false", "1", "true"):
        return value in ("1", "true")
    return bool(cpu_flags() & ONEDNN_BY_DEFAULT)


def crashes(precision="bfloat16"):
    """Whether a matmul in `precision` ("bfloat16" or "float16") would crash
    TensorFlow here (see the module docstring)."""
    flag, caps = _CRASHING_CAPS[precision]
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in caps
    return capped and flag in cpu_flags() and onednn_enabled()


def bfloat16_crashes():
    """Whether a bfloat16 matmul would crash TensorFlow here."""
    return crashes("bfloat16")


def check_precision(precision):
    """Raises a one-line ValueError where `precision` ("bfloat16" or
    "float16"; a Keras policy's "mixed_" prefix allowed) would crash
    TensorFlow; does nothing for others."""
    precision = precision.removeprefix("mixed_")
    if precision in _CRASHING_CAPS and crashes(precision):
        raise ValueError(
            f"{precision} cannot run here: ONEDNN_MAX_CPU_ISA="
            f"{os.environ['ONEDNN_MAX_CPU_ISA']} caps oneDNN below this CPU's "
            f"{_CRASHING_CAPS[precision][0]}, and TensorFlow then crashes in {precision} "
            "matmuls; unset it, set TF_ENABLE_ONEDNN_OPTS=0, or use float32.")


def native_bfloat16():
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX) and
    TensorFlow can use it."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"}) and not bfloat16_crashes()
