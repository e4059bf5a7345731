"""Calibration for :mod:`sw_driver.quantize`: checked inputs in, float ranges out.

The float model is executed by onnxruntime with the tensors of interest added as graph
outputs -- onnxruntime here is only a float interpreter; every quantization decision
(ranges, scales, zero points, rounding, graph rewrite) is Tessera's own.

Methods
-------
``"minmax"``
    The smallest and largest value seen over all calibration data.
``"percentile"``
    The ``percentile`` and ``100 - percentile`` percentiles of the values seen (outliers
    clipped, finer resolution for the bulk). Values are subsampled to at most
    :data:`PERCENTILE_SAMPLES` per tensor, with a fixed seed, so memory stays bounded and
    the result is reproducible.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

from .errors import TesseraError

__all__ = ["METHODS", "PERCENTILE_SAMPLES", "CalibrationError", "check_calibration",
           "collect_ranges"]

METHODS = ("minmax", "percentile")
#: Upper bound on the values kept per tensor for the percentile method.
PERCENTILE_SAMPLES = 1 << 20


class CalibrationError(TesseraError, ValueError):
    """Calibration data that is empty, of the wrong shape or type, or not finite; or an
    unknown calibration method."""


def check_calibration(data, inputs):
    """Calibration data as ``{input name: float32 array [N, ...]}``, checked.

    Parameters
    ----------
    data : numpy.ndarray or dict of str -> numpy.ndarray
        One array for a single-input model, or one per input name; the first axis is the
        sample axis and every other axis must match the model's fixed dimensions.
    inputs : list of onnx.ValueInfoProto
        The model's (non-initializer) inputs.

    Raises
    ------
    CalibrationError
        Naming the input, the shape received and the shape expected.
    """
    names = [i.name for i in inputs]
    if not isinstance(data, dict):
        if len(names) != 1:
            raise CalibrationError(f"the model has {len(names)} inputs {names}; give "
                                   f"calibration data as a dict of input name -> array")
        data = {names[0]: data}
    unknown, missing = sorted(set(data) - set(names)), [n for n in names if n not in data]
    if unknown or missing:
        raise CalibrationError(f"calibration data does not match the model's inputs {names}: "
                               f"unknown {unknown}, missing {missing}")
    checked, count = {}, None
    for info in inputs:
        value = data[info.name]
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise CalibrationError(f"calibration data for {info.name!r} is not an array: "
                                   f"{exc}") from exc
        if array.dtype.kind not in "fiu":
            raise CalibrationError(f"calibration data for {info.name!r} has dtype "
                                   f"{array.dtype}; expected float32 values")
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in info.type.tensor_type.shape.dim]
        expected = ["N", *dims[1:]] if dims else None
        if array.size == 0:
            raise CalibrationError(f"calibration data for {info.name!r} is empty (shape "
                                   f"{list(array.shape)}); give at least one sample of shape "
                                   f"{expected}")
        if dims and (array.ndim != len(dims) or any(
                d is not None and d != s for d, s in zip(dims[1:], array.shape[1:], strict=True))):
            raise CalibrationError(f"calibration data for {info.name!r} has shape "
                                   f"{list(array.shape)}; the model expects {expected} "
                                   f"(N samples first)")
        if not np.all(np.isfinite(array)):
            raise CalibrationError(f"calibration data for {info.name!r} holds NaN or Inf")
        if count is not None and len(array) != count:
            raise CalibrationError(f"calibration inputs have different sample counts "
                                   f"({count} and {len(array)} for {info.name!r})")
        count = len(array)
        checked[info.name] = np.ascontiguousarray(array, dtype=np.float32)
    return checked


def collect_ranges(model, tensors, data, method="minmax", percentile=99.99, batch=64,
                   seed=0):
    """The calibrated float range ``(lo, hi)`` of each tensor in ``tensors``.

    Parameters
    ----------
    model : onnx.ModelProto
        The float model.
    tensors : list of str
        Graph inputs or node outputs to observe.
    data : dict of str -> numpy.ndarray
        As returned by :func:`check_calibration`.
    method : {"minmax", "percentile"}
    percentile : float
        For ``"percentile"``: keep ``[100 - p, p]`` percent of the values, ``50 < p <= 100``.
    batch : int
        Samples per onnxruntime call.
    seed : int
        Seeds the percentile subsampling.

    Returns
    -------
    dict of str -> (float, float)
    """
    if method not in METHODS:
        raise CalibrationError(f"unknown calibration method {method!r}; known: "
                               f"{', '.join(METHODS)}")
    if method == "percentile" and not 50 < percentile <= 100:
        raise CalibrationError(f"percentile must be in (50, 100], not {percentile!r}")
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    graph_outputs = {o.name for o in probe.graph.output}
    for name in tensors:
        if name not in graph_outputs:
            probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                                    None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    count = len(next(iter(data.values())))
    batches = -(-count // batch)
    keep = -(-PERCENTILE_SAMPLES // batches)
    rng = np.random.default_rng(seed)
    lows = {n: np.inf for n in tensors}
    highs = {n: -np.inf for n in tensors}
    samples = {n: [] for n in tensors}
    for start in range(0, count, batch):
        feed = {k: v[start:start + batch] for k, v in data.items()}
        for name, value in zip(tensors, session.run(list(tensors), feed), strict=True):
            value = np.asarray(value, dtype=np.float32).reshape(-1)
            if method == "minmax":
                lows[name] = min(lows[name], float(value.min()))
                highs[name] = max(highs[name], float(value.max()))
            else:
                if value.size > keep:
                    value = rng.choice(value, keep, replace=False)
                samples[name].append(value)
    if method == "percentile":
        for name in tensors:
            values = np.concatenate(samples[name])
            lows[name] = float(np.percentile(values, 100 - percentile))
            highs[name] = float(np.percentile(values, percentile))
    return {name: (lows[name], highs[name]) for name in tensors}
