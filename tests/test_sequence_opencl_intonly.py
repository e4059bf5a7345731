"""The zoo ViT in integer-only mode on ["opencl", "cpu"]: bit-identical to the
integer-only golden model (the CPU provider in integer mode), whichever provider runs the
integer Softmax/LayerNorm/GELU (an OpenCL kernel where one exists, else the host with the
refusal in the profile)."""

import numpy as np
import pytest

from models.zoo.digits import load_digits_split
from sw_driver import InferenceSession
from sw_driver.opencl import NoPlatformError, list_devices

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)

VIT = "models/zoo/vit_qdq.onnx"


def test_vit_integer_mode_on_opencl_is_the_integer_golden():
    _, _, x, _ = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)[:64]
    want = InferenceSession(VIT, providers=["cpu"], sequence_mode="integer") \
        .run(None, {"input": x})[0]
    session = InferenceSession(VIT, providers=["opencl", "cpu"], sequence_mode="integer")
    got = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    assert [r["provider"] for r in rows if r["op"] == "Dense"] == ["opencl"] * 14
    integer = [r for r in rows if r["op"] in ("IntSoftmax", "IntLayerNorm", "IntGelu")]
    assert len(integer) == 9
    for row in integer:
        assert row["semantics"] == "integer-only"
        if row["provider"] == "cpu":  # no kernel (yet): the refusal says so
            refusal = row["fell_back_from"][0]
            assert refusal["provider"] == "opencl" and len(refusal["why"]) > 10
        else:
            assert row["provider"] == "opencl"
