"""The zoo's sequence models on ["opencl", "cpu"]: the GEMMs on OpenCL, the sequence layers
refused there with a reason and run on the CPU provider, bit-identical to "cpu" alone."""

import numpy as np
import pytest

from models.zoo.digits import load_digits_split
from sw_driver import InferenceSession
from sw_driver.opencl import NoPlatformError, list_devices

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)


@pytest.mark.parametrize("path", ["models/zoo/vit_qdq.onnx", "models/zoo/rowgru_qdq.onnx"])
def test_sequence_layers_fall_back_to_cpu_with_the_reason(path):
    _, _, x, _ = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)[:64]
    want = InferenceSession(path, providers=["cpu"]).run(None, {"input": x})[0]
    session = InferenceSession(path, providers=["opencl", "cpu"])
    got = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    assert any(r["op"] == "Dense" and r["provider"] == "opencl" for r in rows)
    sequence_rows = [r for r in rows if r["op"] in ("LayerNormalization", "MatMul", "GRU")]
    assert sequence_rows
    for row in sequence_rows:
        assert row["provider"] == "cpu"
        assert row["fell_back_from"] == [
            {"provider": "opencl", "why": f"no OpenCL kernel for {row['op']}"}]
