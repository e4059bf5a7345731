"""Random layer configurations for the soak: one pure function of ``(seed, index)``.

:func:`draw_case` returns a :class:`SoakCase`: a :mod:`sw_driver.graph` layer whose integer
fields are derived from float32 scales exactly as :mod:`sw_driver.importer` derives them
(``quantize_multiplier(s_x * s_w[c] / s_y)`` in float64, ``activation_range`` for a fused
ReLU/ReLU6, pass-through parameters for MaxPool, float scales kept for the pools and Add),
its int8 inputs, and the float quantization parameters the one-node ONNX QDQ model needs.
The same ``(seed, index)`` always gives the same case, so any case is reproduced alone.

What is drawn (:data:`KIND_WEIGHTS`, sizes in :data:`.values.SIZE_CLASSES`): Conv with
kernels 1-7 (square and not), strides 1-2 (unequal too), ONNX pads (symmetric, asymmetric,
none), dilation 1-3, groups 1, grouped and depthwise (multiplier 1 or 2), 1-80 channels and
1-40 pixel sides, mostly small, sometimes with power-of-two scales (frequent rounding ties);
Dense (Gemm with bias, MatMul without, 2-D and 3-D inputs); MaxPool and AveragePool (2x2,
3x3, rectangular windows, strides 1-3, pads smaller than the window, ``count_include_pad``
both ways, output scale equal to the input's or not); GlobalAveragePool; Add of two
tensors or a tensor and an int8 constant, broadcast or not. Zero points are drawn from the
whole int8 range with extra weight on -128 and 127, and output scales from "most outputs
in range" to "most outputs clip" (saturation); a fused ReLU or ReLU6 on Conv, Dense and Add.
The drawing is split by layer family: :mod:`.draw_requantized`, :mod:`.draw_pools`,
:mod:`.draw_add`, over the value helpers of :mod:`.values`.
"""

import numpy as np

from .case import Quantization, SoakCase
from .draw_add import draw_add
from .draw_pools import draw_average_pool, draw_global_average_pool, draw_max_pool
from .draw_requantized import draw_conv, draw_dense

__all__ = ["KINDS", "KIND_WEIGHTS", "Quantization", "SoakCase", "draw_case"]

#: Soak kinds and how often each is drawn.
KIND_WEIGHTS = {
    "Conv": 0.30,
    "DepthwiseConv": 0.12,
    "GroupedConv": 0.06,
    "Dense": 0.14,
    "MaxPool": 0.09,
    "AveragePool": 0.13,
    "GlobalAveragePool": 0.06,
    "Add": 0.10,
}
KINDS = tuple(KIND_WEIGHTS)

_DRAW = {
    "Conv": draw_conv,
    "DepthwiseConv": draw_conv,
    "GroupedConv": draw_conv,
    "Dense": draw_dense,
    "MaxPool": draw_max_pool,
    "AveragePool": draw_average_pool,
    "GlobalAveragePool": draw_global_average_pool,
    "Add": draw_add,
}
_PROBABILITIES = np.array(list(KIND_WEIGHTS.values())) / sum(KIND_WEIGHTS.values())


def draw_case(seed, index):
    """The soak configuration number ``index`` of run ``seed``.

    A pure function: its random generator is seeded with ``(seed, index)`` alone, so a case
    is reproduced without drawing the ones before it.

    Parameters
    ----------
    seed, index : int
        Non-negative.

    Returns
    -------
    SoakCase
    """
    for name, value in (("seed", seed), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    rng = np.random.default_rng([int(seed), int(index)])
    kind = KINDS[int(rng.choice(len(KINDS), p=_PROBABILITIES))]
    return _DRAW[kind](rng, int(seed), int(index), kind)
