"""Whether onnxruntime's fused int8 kernels give exact sums on this CPU, and why.

onnxruntime's default session fuses QDQ groups into QLinearConv / QGemm, which run on MLAS's
int8 GEMMs. On x86 without VNNI those multiply with ``vpmaddubsw``, which adds pairs of
u8 x s8 products into 16 bits with saturation, so a sum can clip before it reaches 32 bits:
the same model gives other answers on other CPUs (onnxruntime issues 5849, 6004, 14642).
With AVX512-VNNI or AVX-VNNI the products go straight into 32-bit sums and are exact. The
unfused graph (graph optimizations off: DequantizeLinear -> float op -> QuantizeLinear) does
not use those kernels and is the same on every CPU, so Tessera's tests assert against it and
assert the fused session only where :func:`fused_int8_gemm_is_exact` says so.
"""

import os
import platform
from functools import cache

__all__ = ["EXACT_GEMM_FLAGS", "FORCE_ENV", "cpu_features", "fused_int8_gemm_is_exact"]

#: CPU flags (as in /proc/cpuinfo) under which MLAS's int8 GEMM accumulates in 32 bits.
EXACT_GEMM_FLAGS = ("avx512_vnni", "avx_vnni")
#: ``1`` asserts the fused comparison whatever the CPU, ``0`` never (to see what a CPU
#: without VNNI runs, or to measure one with it); unset: decided from the CPU flags.
FORCE_ENV = "TESSERA_ASSERT_FUSED"
#: Flags worth recording beside a measurement of the fused kernels.
REPORTED_FLAGS = ("sse4_1", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
                  "amx_int8")


@cache
def cpu_features():
    """The CPU's model name, architecture and the int8-relevant flags, as a dict."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if key.strip() == "flags":
                    break
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or "unknown"
    flags = set(fields.get("flags", "").split())
    return {"model": model, "machine": platform.machine(),
            "flags": [f for f in REPORTED_FLAGS if f in flags]}


def fused_int8_gemm_is_exact():
    """``(True, why)`` where fused QLinearConv / QGemm are known exact, else ``(False, why)``."""
    forced = os.environ.get(FORCE_ENV, "")
    if forced in ("0", "1"):
        return forced == "1", f"{FORCE_ENV}={forced}"
    features = cpu_features()
    if features["machine"] not in ("x86_64", "AMD64"):
        return False, (f"not known for {features['machine']}: only x86-64 with VNNI is known "
                       f"to give exact int8 sums in onnxruntime's fused kernels")
    vnni = [f for f in EXACT_GEMM_FLAGS if f in features["flags"]]
    if vnni:
        return True, f"{features['model']} has {', '.join(vnni)}: 32-bit int8 dot products"
    return False, (f"{features['model']} has no VNNI ({', '.join(features['flags'])}): "
                   f"onnxruntime's int8 GEMM may saturate 16-bit pair sums (vpmaddubsw)")
