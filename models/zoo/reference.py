"""onnxruntime as the reference: its post-training quantizer for the zoo's QDQ path, and
the session every comparison and benchmark runs a model in.

The zoo's QDQ models come from ``onnxruntime.quantization.quantize_static`` (QDQ format,
per-channel QInt8 weights, QInt8 activations, MinMax calibration): the form Tessera's importer
was written for, and the yardstick for Tessera's own quantizer (``sw_driver.quantize``).
"""

import logging
import tempfile
from pathlib import Path

__all__ = ["onnxruntime_session", "quantize_with_onnxruntime"]


def onnxruntime_session(model, *, optimized=False, threads=1):
    """A quiet onnxruntime CPU session for ``model`` (path, bytes or ``ModelProto``).

    ``optimized=False`` turns graph optimizations off (DequantizeLinear -> float op ->
    QuantizeLinear): the QDQ reference, the same on every CPU. ``optimized=True`` is
    onnxruntime's own default, which fuses QDQ groups into int8 kernels whose results
    depend on the CPU (``bench.ort_cpu``). ``threads`` is the intra-op thread count.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif not isinstance(model, bytes):
        model = str(model)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def quantize_with_onnxruntime(float_path, qdq_path, calibration, input_name="input",
                              batch=64):
    """Write the onnxruntime QDQ version of a float model.

    Parameters
    ----------
    float_path, qdq_path : str or Path
        The float model to read and the QDQ model to write.
    calibration : numpy.ndarray
        Float32 inputs ``[N, ...]`` for the single model input, fed ``batch`` at a time.
    input_name : str
        The model's input name.
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(range(0, len(calibration), batch))

        def get_next(self):
            start = next(self._it, None)
            return None if start is None else {input_name: calibration[start:start + batch]}

    # quantize_static logs "consider pre-processing" advice on every call: noise here.
    logging.getLogger().setLevel(logging.ERROR)
    qdq_path = Path(qdq_path)
    with tempfile.TemporaryDirectory() as tmp:
        # It may write helper files (augmented models) next to its output: keep them out.
        tmp_out = Path(tmp) / qdq_path.name
        quantize_static(str(float_path), str(tmp_out), Reader(),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
        qdq_path.parent.mkdir(parents=True, exist_ok=True)
        qdq_path.write_bytes(tmp_out.read_bytes())
    return qdq_path
