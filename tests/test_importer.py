"""The importer: QDQ ONNX -> integer layers with every quantization parameter folded.

The folded values are recomputed here from the model's own initializers, independently of
the importer's code path, and the graph shapes quantize_static can leave (Relu removed and
zero point -128, or a Relu / Clip kept before the QuantizeLinear) are both covered.
"""

import numpy as np
import onnx
import pytest
import qdq_models
from onnx import helper, numpy_helper

from bench.ort_cpu import fused_int8_gemm_is_exact
from models.requant import activation_range, quantize_multiplier
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.errors import PlacementError, UnknownProviderError
from sw_driver.importer import import_model
from sw_driver.providers import PROVIDERS, Provider, Refusal

SEEDS = {"lenet": 11, "residual": 22, "separable": 33}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qdq")
    return {name: qdq_models.build(name, seed, tmp) for name, seed in SEEDS.items()}


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_layer_kinds(built):
    kinds = {name: [layer.op for layer in import_model(path).layers]
             for name, (_, path, _) in built.items()}
    assert kinds["lenet"] == ["Quantize", "Conv", "MaxPool", "Conv", "GlobalAveragePool",
                              "Flatten", "Dense", "Dequantize"]
    assert kinds["residual"] == ["Quantize", "Conv", "Conv", "Conv", "Add", "AveragePool",
                                 "Flatten", "Dense", "Dequantize"]
    assert kinds["separable"] == ["Quantize", "Conv", "Conv", "Conv", "GlobalAveragePool",
                                  "Flatten", "Dense", "Reshape", "Dequantize", "Softmax",
                                  "Quantize", "Dequantize"]


def test_conv_parameters_are_folded(built):
    _, path, _ = built["lenet"]
    model = onnx.load(path)
    init = _inits(model)
    conv = next(layer for layer in import_model(path).layers if layer.name == "conv1")
    # The QDQ names quantize_static uses: <tensor>_quantized, <tensor>_scale, ...
    w_scale = init["conv1_W_scale"].astype(np.float64)
    np.testing.assert_array_equal(conv.weight, init["conv1_W_quantized"])
    np.testing.assert_array_equal(conv.bias, init["conv1_B_quantized"])
    assert conv.weight.dtype == np.int8 and conv.bias.dtype == np.int32
    assert conv.x_zero_point == int(init["x_zero_point"])
    q_out = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
                 and n.output[0] == conv.output)
    y_scale, y_zp = init[q_out.input[1]], int(init[q_out.input[2]])
    m, n = quantize_multiplier(np.float64(init["x_scale"]) * w_scale / np.float64(y_scale))
    np.testing.assert_array_equal(conv.multiplier, m)
    np.testing.assert_array_equal(conv.shift, n)
    assert conv.y_zero_point == y_zp == -128  # quantize_static removed the Relu
    assert (conv.lo, conv.hi) == (-128, 127)
    assert conv.padding == (1, 1, 1, 1) and conv.stride == (1, 1) and conv.groups == 1


def test_depthwise_and_matmul(built):
    _, path, _ = built["separable"]
    layers = {layer.name: layer for layer in import_model(path).layers}
    assert layers["dw"].groups == 8 and layers["dw"].weight.shape == (8, 1, 3, 3)
    assert layers["stem"].stride == (2, 2)
    # MatMul's (K, O) weight, quantized along axis 1, is stored as (O, K).
    init = _inits(onnx.load(path))
    np.testing.assert_array_equal(layers["fc"].weight, init["fc_W_quantized"].T)
    assert isinstance(layers["softmax"], g.Softmax) and layers["softmax"].axis == 1
    assert layers["reshape"].shape == (-1, 10)


def _insert_activation(path, conv_name, op, zero_point, clip_lsb=None):
    """Re-insert a Relu/Clip between ``conv_name`` and its QuantizeLinear and give that a
    new zero point, as a quantizer that keeps activations would. The scale stays (the next
    layer's bias scale depends on it). ``Clip`` gets bounds ``(0, clip_lsb * scale)``.

    Returns the model bytes and the output scale."""
    model = onnx.load(path)
    nodes = list(model.graph.node)
    index, conv = next((i, n) for i, n in enumerate(nodes) if n.name == conv_name)
    out = conv.output[0]
    conv.output[0] = out + "_pre"
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == out)
    scale = float(_inits(model)[q.input[1]])
    extra = []
    if op == "Clip":
        extra = ["clip_min", "clip_max"]
        model.graph.initializer.extend([
            numpy_helper.from_array(np.array(0.0, np.float32), "clip_min"),
            numpy_helper.from_array(np.array(clip_lsb * scale, np.float32), "clip_max")])
    act = helper.make_node(op, [out + "_pre", *extra], [out], name=f"{conv_name}_{op}")
    model.graph.node.insert(index + 1, act)
    for t in model.graph.initializer:
        if t.name == q.input[2]:
            t.CopyFrom(numpy_helper.from_array(np.array(zero_point, np.int8), t.name))
    onnx.checker.check_model(model)
    return model.SerializeToString(), scale


def _agree(data, shape, seed, what, optimized):
    """The session of ``data``, after checking it against onnxruntime's unfused graph (the
    same on every CPU) or its fused kernels, which are exact only on some CPUs: there the
    test skips with the reason."""
    if optimized:
        exact, why = fused_int8_gemm_is_exact()
        if not exact:
            pytest.skip(f"onnxruntime's fused int8 kernels are not exact on this CPU: {why}")
    x = np.random.default_rng(seed).standard_normal((16, *shape)).astype(np.float32)
    session = InferenceSession(data)
    (ours,) = session.run(None, {"x": x})
    scale = session.graph.layers[-1].scale
    (theirs,) = qdq_models.ort_session(data, optimized).run(None, {"x": x})
    diff = np.rint(np.abs(ours - theirs) / scale)
    print(f"{what} seed={seed} ort optimized={optimized}: within 1 LSB "
          f"{(diff <= 1).mean():.2%}, exact {(diff == 0).mean():.2%}")
    first = tuple(int(i) for i in np.argwhere(diff > 1)[0]) if (diff > 1).any() else None
    assert (diff <= 1).mean() >= 0.99, (
        f"{what} seed={seed} ort optimized={optimized}: first index off by more than 1 LSB "
        f"{first}: ours {ours[first]}, onnxruntime {theirs[first]}")
    return session


ORT_LEVELS = pytest.mark.parametrize("optimized", [False, True],
                                     ids=["ort-unfused", "ort-fused"])


@ORT_LEVELS
def test_kept_relu_becomes_the_clamp(built, optimized):
    _, path, shape = built["lenet"]
    data, scale = _insert_activation(path, "conv1", "Relu", zero_point=-100)
    session = _agree(data, shape, SEEDS["lenet"], "lenet with a kept Relu", optimized)
    conv = next(layer for layer in session.graph.layers if layer.name == "conv1")
    assert (conv.lo, conv.hi) == (-100, 127) == activation_range("relu", -100, scale)
    assert not any(layer.name.endswith("_Relu") for layer in session.graph.layers)


@ORT_LEVELS
def test_kept_clip_becomes_the_clamp(built, optimized):
    _, path, shape = built["separable"]
    # Clip(0, 60 LSB): the upper bound really clamps (hi = -40, not 127).
    data, _ = _insert_activation(path, "dw", "Clip", zero_point=-100, clip_lsb=60)
    session = _agree(data, shape, SEEDS["separable"], "separable with a kept Clip", optimized)
    dw = next(layer for layer in session.graph.layers if layer.name == "dw")
    assert (dw.lo, dw.hi) == (-100, -40)


# -- providers: order, placement, registry -------------------------------------------

class _PoolsOnly(Provider):
    """A stand-in accelerator that runs max pooling only (on the golden model)."""

    name = "pools"

    def supports(self, layer, shape=None):
        if isinstance(layer, g.MaxPool):
            return None
        return Refusal(f"{layer.op} is not implemented here")

    def run(self, layer, inputs):
        return PROVIDERS["cpu"]().run(layer, inputs)


def test_providers_are_tried_in_order_per_layer(built):
    _, path, shape = built["lenet"]
    session = InferenceSession(path, providers=[_PoolsOnly(), "cpu"])
    x = np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, InferenceSession(path).run(None, {"x": x})[0])
    placed = {p["op"]: p for p in session.profile()}
    assert placed["MaxPool"]["provider"] == "pools"
    assert placed["Conv"]["provider"] == "cpu"
    assert "pools declined: Conv is not implemented here" in placed["Conv"]["reason"]


def test_layer_no_provider_can_run_is_named(built):
    _, path, _ = built["lenet"]
    with pytest.raises(PlacementError, match=r"layer 'x_QuantizeLinear' \(Quantize\)"):
        InferenceSession(path, providers=[_PoolsOnly()], cpu_fallback=False)


def test_unknown_provider_lists_the_known_ones(built, monkeypatch):
    _, path, _ = built["lenet"]
    with pytest.raises(UnknownProviderError, match="'fpga'.*known providers: .*cpu"):
        InferenceSession(path, providers=["fpga"])
    # Other backends register by name in the same dict.
    monkeypatch.setitem(PROVIDERS, "pools", _PoolsOnly)
    session = InferenceSession(path, providers=["pools", "cpu"])
    assert session.get_providers() == ["pools", "cpu"]
