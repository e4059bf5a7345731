"""Error of the integer-only nonlinearities against the float ops
(``bench/results/intonly_error.json``).

For each of ``models.intonly``'s softmax, GELU and LayerNorm, on a large seeded sample at
typical transformer scales: the largest and the mean absolute error in output LSB against
the float op (float64, unrounded, clamped to the output range), beside the bound the module
states (the ``target``), and the share of outputs equal to the float op quantized the same
way (round half to even), i.e. what the ORT-compatible mode would give. Errors, not speed:
the bounds are asserted by ``tests/test_models_intonly.py``; here they are only recorded.
"""

import math

import numpy as np

from bench.common import metric, write_results
from models import intonly

SEED = 16
#: Sample sizes at ``scale=1``; the test runs a small fraction.
SOFTMAX_ROWS, SOFTMAX_LENGTH = 16384, 64
GELU_ELEMENTS = 1 << 20
LAYERNORM_ROWS, LAYERNORM_LENGTH = 4096, 256

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _figures(name, y, real_lsb, lo, hi, bound):
    """Max / mean error in LSB, and agreement with the float op rounded half to even."""
    target = np.clip(real_lsb, lo, hi)
    err = np.abs(y.astype(np.float64) - target)
    rounded = np.rint(target)
    agree = float((y.astype(np.float64) == rounded).mean())
    # The peer: the float op itself quantized (rounded half to even), whose error is the
    # rounding alone, measured on the same outputs.
    floor_err = np.abs(rounded - target)
    note = f"{y.size} outputs, seed {SEED}"
    return [
        metric(f"{name}_max_abs_error", round(float(err.max()), 4), "LSB",
               peer="float_op_rounded", peer_value=round(float(floor_err.max()), 4),
               target=round(bound, 4), note=note + "; target = the stated bound"),
        metric(f"{name}_mean_abs_error", round(float(err.mean()), 4), "LSB",
               peer="float_op_rounded", peer_value=round(float(floor_err.mean()), 4),
               note=note),
        metric(f"{name}_equal_to_rounded_float", round(agree, 5), "fraction",
               note="outputs equal to the float op quantized the same way"),
    ]


def _softmax(rng, scale):
    rows = max(1, SOFTMAX_ROWS // scale)
    x = rng.integers(-128, 128, size=(rows, SOFTMAX_LENGTH))
    x_scale = 0.08  # attention scores of a few units: the softmax is neither flat nor one-hot
    y = intonly.softmax(x, intonly.softmax_params(x_scale))
    v = x * x_scale
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return _figures(f"softmax_n{SOFTMAX_LENGTH}", y, p * 256, 0, 255,
                    intonly.softmax_error_bound(SOFTMAX_LENGTH))


def _gelu(rng, scale):
    x = rng.integers(-128, 128, size=max(1, GELU_ELEMENTS // scale))
    x_scale, x_zero, y_scale, y_zero = 0.04, 0, 0.025, -100
    y = intonly.gelu(x, intonly.gelu_params(x_scale, x_zero, y_scale, y_zero))
    v = x_scale * (x - x_zero)
    real = v / 2 * (1 + _erf(v / math.sqrt(2)))
    return _figures("gelu_int8", y, y_zero + real / y_scale, -128, 127,
                    intonly.gelu_error_bound(y_scale, float(np.abs(v).max())))


def _layernorm(rng, scale):
    rows = max(1, LAYERNORM_ROWS // scale)
    gamma = rng.uniform(0.5, 1.5, LAYERNORM_LENGTH)
    beta = rng.uniform(-0.5, 0.5, LAYERNORM_LENGTH)
    x = rng.integers(-128, 128, size=(rows, LAYERNORM_LENGTH))
    x_scale, y_scale, y_zero, eps = 0.05, 0.03, 0, 1e-5
    params = intonly.layernorm_params(x_scale, gamma, beta, y_scale, y_zero, eps)
    y = intonly.layernorm(x, params)
    v = x_scale * x
    mean = v.mean(axis=-1, keepdims=True)
    real = (v - mean) / np.sqrt(((v - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    return _figures(f"layernorm_n{LAYERNORM_LENGTH}", y, y_zero + (real * gamma + beta) / y_scale,
                    -128, 127, intonly.layernorm_error_bound(gamma, y_scale))


def main(scale=1):
    """Measure and write ``bench/results/intonly_error.json``; ``scale`` divides the samples."""
    rng = np.random.default_rng(SEED)
    metrics = _softmax(rng, scale) + _gelu(rng, scale) + _layernorm(rng, scale)
    return write_results("intonly_error", metrics, seed=SEED, sample_divisor=scale)


if __name__ == "__main__":
    main()
