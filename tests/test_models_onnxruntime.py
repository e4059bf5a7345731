"""The golden models against onnxruntime on QDQ models made by ``quantize_static``.

Each test builds a tiny float model with ``onnx.helper``, quantizes it (QDQ, per-channel
int8 weights, int8 activations), runs onnxruntime twice (all graph optimizations, which
fuses the QDQ groups into QLinearConv / QGemm / QLinearAveragePool / QLinearAdd /
int8 MaxPool, and no optimizations, which runs DequantizeLinear -> float op ->
QuantizeLinear) and compares with the golden functions fed with the quantization
parameters read from the QDQ model.

Contract: against the unfused graph, which is the same on every CPU, every element is equal
except within ``NEAR_TIE`` of an exact tie of the real value (there the float32 evaluation's
rounding error picks a side and the golden model rounds the exact value half to even), and
there at most 1 LSB. The fused session is held to the same rule, but its Conv and Gemm only
where ``bench.ort_cpu.fused_int8_gemm_is_exact`` says its int8 GEMMs give exact sums
(x86 with VNNI): elsewhere they may saturate, so the fused Conv and Gemm tests skip with the
reason, and ``make bench NAMES=ort_fused`` measures them.
"""

from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)

# Importing qdq_models also quiets quantize_static's per-call pre-processing advice.
from qdq_models import CALIBRATION_BATCHES, IR_VERSION, OPSET

from bench.ort_cpu import fused_int8_gemm_is_exact
from models.conv import conv2d, dense, depthwise_conv2d
from models.eltwise import add
from models.pool import avg_pool2d, global_avg_pool, max_pool2d
from models.requant import activation_range, quantize_multiplier, requantize
from sw_driver import graph as g
from tessera.soak.ties import NEAR_TIE, average_pool_real, distance_from_tie

# "fused": what onnxruntime really runs (integer kernels); "unfused": the QDQ float
# reference (DequantizeLinear -> float op -> QuantizeLinear).
LEVELS = {
    "fused": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "unfused": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
#: Fused ops whose integer kernels give exact sums only where ``fused_int8_gemm_is_exact``.
FUSED_EXACT_ONLY_WITH_VNNI = ("QLinearConv", "QGemm")
def _near_ties(real):
    """Where the unrounded real output (in LSB, zero point excluded) is within NEAR_TIE of a
    tie ``k + 1/2``. None (an exact op such as max pooling) means nowhere."""
    if real is None:
        return False
    return distance_from_tie(real) <= NEAR_TIE


def _compare(actual, expected, *, real, what):
    """Assert equality except within NEAR_TIE of a tie of ``real``, where 1 LSB is allowed.

    Returns (max |diff|, fraction off by 1, fraction of ties). On failure the message names
    ``what`` (seed, configuration, level), the first offending index and both values.
    """
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape} != expected {expected.shape}"
    )
    diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
    ties = _near_ties(real)
    bad = np.argwhere((diff > 1) | ((diff == 1) & ~ties))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        value = "" if real is None else f" (real value {float(real[index]):.6f} LSB)"
        pytest.fail(
            f"{what}: {len(bad)} of {diff.size} elements differ away from a rounding tie; "
            f"first at index {index}{value}: golden {int(actual[index])}, onnxruntime "
            f"{int(expected[index])}"
        )
    return int(diff.max(initial=0)), float((diff == 1).mean()), float(np.mean(ties))


def _float_model(nodes, inputs, outputs, initializers):
    """A float32 ONNX model: ``inputs`` maps names to shapes, ``initializers`` to arrays."""
    graph = helper.make_graph(
        nodes,
        "tessera_test",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k)
         for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    return model


class _Reader(CalibrationDataReader):
    """A few batches of normal data per input, each input with its own spread."""

    def __init__(self, inputs, rng, spreads):
        self._batches = iter([
            {k: (rng.standard_normal(s) * spreads.get(k, 1.0)).astype(np.float32)
             for k, s in inputs.items()}
            for _ in range(CALIBRATION_BATCHES)
        ])

    def get_next(self):
        return next(self._batches, None)


def _quantize(model, inputs, rng, tmp_path, spreads=None, force_inputs=False):
    float_path = tmp_path / "float.onnx"
    qdq_path = tmp_path / "qdq.onnx"
    onnx.save(model, float_path)
    quantize_static(
        str(float_path), str(qdq_path), _Reader(inputs, rng, spreads or {}),
        quant_format=QuantFormat.QDQ, per_channel=True,
        weight_type=QuantType.QInt8, activation_type=QuantType.QInt8,
        # Pools that only pass data through are quantized only after another quantized op
        # unless forced; forcing lets them take the graph input, so each op is tested alone.
        extra_options={"ForceQuantizeNoInputCheck": force_inputs},
    )
    return onnx.load(qdq_path)


class _QDQ:
    """Quantization parameters of a simple QDQ graph, read from its initializers."""

    class Tensor:
        def __init__(self, scale, zero_point, data, source):
            self.scale = np.float32(scale)
            self.zero_point = zero_point
            self.data = data
            self.source = source

    def __init__(self, model):
        self.model = model
        self.init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.consumers = defaultdict(list)
        for n in model.graph.node:
            for i in n.input:
                self.consumers[i].append(n)

    def node(self, op_type):
        (node,) = [n for n in self.model.graph.node if n.op_type == op_type]
        return node

    def attrs(self, node):
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def input(self, node, i):
        """The DequantizeLinear feeding input ``i``: scale, zero point, int data, source."""
        dq = self.producer[node.input[i]]
        assert dq.op_type == "DequantizeLinear", dq.op_type
        scale = self.init[dq.input[1]]
        zp = self.init[dq.input[2]]
        data = self.init.get(dq.input[0])
        source = dq.input[0]
        if data is None:  # an activation: follow it back through its QuantizeLinear
            q = self.producer[source]
            assert q.op_type == "QuantizeLinear", q.op_type
            source = q.input[0]
            zp = int(zp)
        return self.Tensor(scale, zp, data, source)

    def output(self, node):
        """Scale and zero point of the QuantizeLinear after ``node`` and a fused activation.

        The activation is ``"relu"`` / ``"relu6"`` when the quantizer kept a Relu / Clip(0, 6)
        between them, else None (a removed Relu shows up only as a zero point of -128).
        """
        activation = None
        (after,) = self.consumers[node.output[0]]
        if after.op_type in ("Relu", "Clip"):
            activation = "relu" if after.op_type == "Relu" else "relu6"
            (after,) = self.consumers[after.output[0]]
        assert after.op_type == "QuantizeLinear", after.op_type
        scale = np.float32(self.init[after.input[1]])
        return scale, int(self.init[after.input[2]]), activation


def _quantize_input(x, tensor):
    """NumPy QuantizeLinear (round half to even, saturate), as int8."""
    q = np.rint(x.astype(np.float64) / np.float64(tensor.scale)) + tensor.zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def _dequantize(q, scale, zero_point):
    return ((q.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)).astype(
        np.float32)


def _run_ort(model, feeds, output, scale, zero_point, level, tmp_path, expect_op):
    """Run ``model`` on ``feeds``; return ``output`` back in its int8 domain.

    With all optimizations on, also check that onnxruntime fused the group into
    ``expect_op`` (so the comparison is against its integer kernel, not a float fallback).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = LEVELS[level]
    options.log_severity_level = 3  # keep the "optimized model is hardware specific" note quiet
    if level == "fused":
        options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    if level == "fused":
        ops = {n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node}
        assert expect_op in ops, f"onnxruntime did not fuse into {expect_op}: {sorted(ops)}"
    (y,) = session.run([output], feeds)
    # The graph ends in DequantizeLinear; its float output maps back to int8 exactly.
    q = y.astype(np.float64) / np.float64(scale)
    assert np.abs(q - np.rint(q)).max(initial=0) < 1e-3
    return (np.rint(q) + zero_point).astype(np.int8)


def _check_both_levels(model, feeds, golden, out_scale, out_zp, tmp_path, *, expect_op,
                       real, what, levels=tuple(LEVELS)):
    """Compare with the onnxruntime ``levels`` (see the module docstring for the rule).

    ``real`` is the unrounded output in LSB without the zero point (None for exact ops).
    Returns onnxruntime's int8 output per level. The fused QLinearConv and QGemm are exact
    only on some CPUs: their tests compare one level each, so that the fused comparison is
    a test of its own and skips, with the reason, where it is not exact.
    """
    if "fused" in levels and expect_op in FUSED_EXACT_ONLY_WITH_VNNI:
        if len(levels) > 1:
            raise ValueError(f"{what}: compare the fused {expect_op} in a test of its own "
                             f"(levels=('fused',)), not with {levels}, so that it can skip")
        exact, why = fused_int8_gemm_is_exact()
        if not exact:
            pytest.skip(f"onnxruntime's fused {expect_op} is not exact on this CPU: {why}")
    stats, results = {}, {}
    for level in levels:
        expected = _run_ort(model, feeds, "y", out_scale, out_zp, level, tmp_path, expect_op)
        stats[level] = _compare(golden, expected, real=real,
                                what=f"{what}, onnxruntime {level}")
        results[level] = expected
    # Shown with `pytest -s`: how close to exact the golden model is.
    print(f"{what}: (max |diff|, fraction off by 1, fraction near a tie) = {stats}")
    return results


def _requantize_layer(acc, qdq, node, x, w, axis=1):
    """Golden int8 output, the unrounded real output in LSB, output scale and zero point."""
    y_scale, y_zp, activation = qdq.output(node)
    assert not np.any(w.zero_point), "weights must be symmetric"
    real = np.float64(x.scale) * w.scale.astype(np.float64) / np.float64(y_scale)
    m, n = quantize_multiplier(real)
    lo, hi = activation_range(activation, y_zp, y_scale)
    shape = [1] * acc.ndim
    shape[axis] = -1
    unrounded = acc.astype(np.float64) * real.reshape(shape)
    # A Relu removed by the quantizer leaves zero point -128: clamping at it is a no-op.
    return requantize(acc, m, n, y_zp, lo, hi, axis=axis), unrounded, y_scale, y_zp


CONV_CASES = [
    # (seed, C, O, H, W, k, stride, pads, activation, group)
    (11, 3, 8, 9, 9, 3, 1, (1, 1, 1, 1), "Relu", 1),
    (12, 4, 6, 11, 10, 5, 2, (2, 2, 2, 2), None, 1),
    (13, 5, 4, 7, 7, 1, 1, (0, 0, 0, 0), None, 1),
    (14, 2, 5, 13, 12, 7, 2, (3, 1, 2, 3), "Relu", 1),
    (15, 4, 4, 8, 9, 3, 1, (0, 1, 2, 1), "Clip", 1),
    (16, 6, 6, 9, 9, 3, 2, (1, 1, 1, 1), None, 6),
    (17, 4, 4, 10, 10, 5, 1, (2, 2, 2, 2), "Relu", 4),
]


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"seed{c[0]}" for c in CONV_CASES])
def test_conv_matches_onnxruntime(case, level, tmp_path):
    seed, c, o, h, w_, k, stride, pads, activation, group = case
    rng = np.random.default_rng(seed)
    what = f"seed={seed} Conv C={c} O={o} {h}x{w_} k={k} s={stride} pads={pads} " \
           f"act={activation} group={group}"
    weights = rng.standard_normal((o, c // group, k, k)) * (1.5 / np.sqrt(c // group * k * k))
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c" if activation else "y"],
                              kernel_shape=[k, k], strides=[stride, stride], pads=list(pads),
                              group=group)]
    inits = {"W": weights, "B": rng.standard_normal(o) * 0.2}
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif activation == "Clip":
        # Large weights push outputs past 6 so that the clip really bites.
        inits["W"] = weights * 8
        inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    inputs = {"x": (2, c, h, w_)}
    model = _quantize(_float_model(nodes, inputs, ["y"], inits), inputs, rng, tmp_path)

    qdq = _QDQ(model)
    conv = qdq.node("Conv")
    x, wt, b = (qdq.input(conv, i) for i in range(3))
    xq = _quantize_input(rng.standard_normal(inputs["x"]), x)
    attrs = qdq.attrs(conv)
    kwargs = dict(x_zero_point=x.zero_point, stride=tuple(attrs["strides"]),
                  padding=tuple(attrs["pads"]))
    if group == c and c == o:
        acc = depthwise_conv2d(xq, wt.data, b.data, **kwargs)
    else:
        acc = conv2d(xq, wt.data, b.data, groups=attrs.get("group", 1), **kwargs)
    golden, real, y_scale, y_zp = _requantize_layer(acc, qdq, conv, x, wt)
    feeds = {"x": _dequantize(xq, x.scale, x.zero_point)}
    _check_both_levels(model, feeds, golden, y_scale, y_zp, tmp_path,
                       expect_op="QLinearConv", real=real, what=what, levels=(level,))


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("seed, n, k, o", [(21, 3, 16, 5), (22, 1, 64, 10), (23, 4, 7, 3)])
def test_gemm_matches_onnxruntime(seed, n, k, o, level, tmp_path):
    rng = np.random.default_rng(seed)
    what = f"seed={seed} Gemm N={n} K={k} O={o}"
    inits = {"W": rng.standard_normal((o, k)) / np.sqrt(k), "B": rng.standard_normal(o) * 0.3}
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)]
    inputs = {"x": (n, k)}
    model = _quantize(_float_model(nodes, inputs, ["y"], inits), inputs, rng, tmp_path)

    qdq = _QDQ(model)
    gemm = qdq.node("Gemm")
    x, wt, b = (qdq.input(gemm, i) for i in range(3))
    xq = _quantize_input(rng.standard_normal(inputs["x"]), x)
    acc = dense(xq, wt.data, b.data, x_zero_point=x.zero_point)
    golden, real, y_scale, y_zp = _requantize_layer(acc, qdq, gemm, x, wt)
    feeds = {"x": _dequantize(xq, x.scale, x.zero_point)}
    _check_both_levels(model, feeds, golden, y_scale, y_zp, tmp_path, expect_op="QGemm",
                       real=real, what=what, levels=(level,))


POOL_CASES = [
    # (seed, H, W, kernel, stride, pads, count_include_pad)
    (31, 8, 8, 2, 2, (0, 0, 0, 0), 0),
    (32, 9, 7, 3, 2, (1, 1, 1, 1), 0),
    (33, 9, 7, 3, 2, (1, 1, 1, 1), 1),
    (34, 11, 10, 5, 1, (2, 0, 1, 2), 0),
    (35, 7, 7, 3, 3, (0, 2, 1, 0), 0),
]


def _pool_model(op, case, tmp_path, rng):
    _, h, w_, kernel, stride, pads, count_include_pad = case
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=list(pads))
    if op == "AveragePool":
        attrs["count_include_pad"] = count_include_pad
    nodes = [helper.make_node(op, ["x"], ["y"], **attrs)]
    inputs = {"x": (2, 3, h, w_)}
    model = _quantize(_float_model(nodes, inputs, ["y"], {}), inputs, rng, tmp_path,
                      force_inputs=True)
    qdq = _QDQ(model)
    node = qdq.node(op)
    x = qdq.input(node, 0)
    xq = _quantize_input(rng.standard_normal(inputs["x"]) * 2, x)
    return model, qdq, node, x, xq


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"seed{c[0]}" for c in POOL_CASES])
def test_max_pool_matches_onnxruntime_exactly(case, tmp_path):
    seed, _, _, kernel, stride, pads, _ = case
    rng = np.random.default_rng(seed)
    model, qdq, node, x, xq = _pool_model("MaxPool", case, tmp_path, rng)
    y_scale, y_zp, _ = qdq.output(node)
    assert (y_scale, y_zp) == (x.scale, x.zero_point)  # max pool passes its scale through
    golden = max_pool2d(xq, kernel, stride, pads)
    feeds = {"x": _dequantize(xq, x.scale, x.zero_point)}
    _check_both_levels(model, feeds, golden, y_scale, y_zp, tmp_path, expect_op="MaxPool",
                       real=None, what=f"seed={seed} MaxPool {case}")


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"seed{c[0]}" for c in POOL_CASES])
def test_avg_pool_matches_onnxruntime(case, tmp_path):
    seed, _, _, kernel, stride, pads, count_include_pad = case
    rng = np.random.default_rng(seed)
    model, qdq, node, x, xq = _pool_model("AveragePool", case, tmp_path, rng)
    y_scale, y_zp, _ = qdq.output(node)
    golden = avg_pool2d(xq, kernel, stride, pads, x_scale=x.scale, x_zero_point=x.zero_point,
                        y_scale=y_scale, y_zero_point=y_zp,
                        count_include_pad=bool(count_include_pad))
    feeds = {"x": _dequantize(xq, x.scale, x.zero_point)}
    # quantize_static gives AveragePool its input's scale, so the output is the plain mean
    # sum / count, which is an exact tie whenever it ends in .5 (a quarter of 2x2 windows).
    assert (y_scale, y_zp) == (x.scale, x.zero_point)
    real = _avg_pool_real(xq, x.zero_point, x.scale, y_scale, kernel, stride, pads,
                          count_include_pad)
    _check_both_levels(model, feeds, golden, y_scale, y_zp, tmp_path,
                       expect_op="QLinearAveragePool", real=real,
                       what=f"seed={seed} AveragePool {case}")


def _avg_pool_real(xq, zx, x_scale, y_scale, kernel, stride, pads, count_include_pad):
    """The real mean of each window in output LSB (``tessera.soak.ties.average_pool_real`` on
    the layer these parameters describe)."""
    layer = g.AveragePool("pool", ("x",), "y", kernel=(kernel, kernel), stride=(stride, stride),
                          padding=tuple(pads), count_include_pad=bool(count_include_pad),
                          x_scale=float(x_scale), x_zero_point=zx, y_scale=float(y_scale))
    return average_pool_real(layer, xq)


def _qdq_by_hand(op, attrs, x_params, y_params, x_shape):
    """Q -> DQ -> op -> Q -> DQ with chosen parameters (quantize_static would tie the
    AveragePool output scale to its input's; this exercises a real rescale)."""
    (sx, zx), (sy, zy) = x_params, y_params
    inits = [
        numpy_helper.from_array(np.float32(sx), "sx"),
        numpy_helper.from_array(np.int8(zx), "zx"),
        numpy_helper.from_array(np.float32(sy), "sy"),
        numpy_helper.from_array(np.int8(zy), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node(op, ["xd"], ["yf"], **attrs),
        helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tessera_qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    return model


@pytest.mark.parametrize("seed, kernel, stride, count_include_pad",
                         [(41, 2, 2, 0), (42, 3, 1, 0), (43, 3, 2, 1), (44, 5, 2, 0),
                          (45, 4, 3, 1), (46, 3, 3, 0)])
def test_avg_pool_rescale_matches_onnxruntime(seed, kernel, stride, count_include_pad,
                                              tmp_path):
    rng = np.random.default_rng(seed)
    sx, sy = (float(np.float32(s)) for s in rng.uniform(0.005, 0.05, size=2))
    zx, zy = (int(z) for z in rng.integers(-128, 128, size=2))
    pads = tuple(int(p) for p in rng.integers(0, kernel, size=4))
    attrs = dict(kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=list(pads),
                 count_include_pad=count_include_pad)
    what = f"seed={seed} AveragePool sx={sx} zx={zx} sy={sy} zy={zy} {attrs}"
    shape = (1, 4, int(rng.integers(kernel, 12)), int(rng.integers(kernel, 12)))
    model = _qdq_by_hand("AveragePool", attrs, (sx, zx), (sy, zy), shape)
    xq = rng.integers(-128, 128, size=shape).astype(np.int8)
    golden = avg_pool2d(xq, kernel, stride, pads, x_scale=sx, x_zero_point=zx, y_scale=sy,
                        y_zero_point=zy, count_include_pad=bool(count_include_pad))
    real = _avg_pool_real(xq, zx, sx, sy, kernel, stride, pads, count_include_pad)
    _check_both_levels(model, {"x": _dequantize(xq, sx, zx)}, golden, sy, zy, tmp_path,
                       expect_op="QLinearAveragePool", real=real, what=what)


@pytest.mark.parametrize("seed, h, w", [(51, 5, 5), (52, 7, 3), (53, 1, 1), (54, 13, 11)])
def test_global_avg_pool_matches_onnxruntime(seed, h, w, tmp_path):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["y"])]
    inputs = {"x": (2, 4, h, w)}
    # A mean over a window has a smaller spread than its input, so the output scale differs.
    model = _quantize(_float_model(nodes, inputs, ["y"], {}), inputs, rng, tmp_path,
                      force_inputs=True)
    qdq = _QDQ(model)
    node = qdq.node("GlobalAveragePool")
    x = qdq.input(node, 0)
    y_scale, y_zp, _ = qdq.output(node)
    xq = _quantize_input(rng.standard_normal(inputs["x"]), x)
    golden = global_avg_pool(xq, x.scale, x.zero_point, y_scale, y_zp)
    total = (xq.astype(np.int64) - x.zero_point).sum(axis=(2, 3), keepdims=True)
    real = total * (np.float64(x.scale) / np.float64(y_scale)) / (h * w)
    _check_both_levels(model, {"x": _dequantize(xq, x.scale, x.zero_point)}, golden,
                       y_scale, y_zp, tmp_path, expect_op="QLinearGlobalAveragePool",
                       real=real, what=f"seed={seed} GlobalAveragePool {h}x{w}")


@pytest.mark.parametrize("seed, spread_b, relu", [(61, 3.0, False), (62, 0.2, True),
                                                  (63, 1.0, False), (64, 10.0, True)])
def test_add_matches_onnxruntime(seed, spread_b, relu, tmp_path):
    rng = np.random.default_rng(seed)
    # Two branches meeting in a residual add; each branch has its own scale and zero point.
    nodes = [helper.make_node("Add", ["a", "b"], ["s" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    inputs = {"a": (2, 3, 5, 6), "b": (2, 3, 5, 6)}
    spreads = {"a": 1.0, "b": spread_b}
    model = _quantize(_float_model(nodes, inputs, ["y"], {}), inputs, rng, tmp_path,
                      spreads=spreads)
    qdq = _QDQ(model)
    node = qdq.node("Add")
    a, b = qdq.input(node, 0), qdq.input(node, 1)
    y_scale, y_zp, activation = qdq.output(node)
    aq = _quantize_input(rng.standard_normal(inputs["a"]), a)
    bq = _quantize_input(rng.standard_normal(inputs["b"]) * spread_b, b)
    lo, hi = activation_range(activation, y_zp, y_scale)
    golden = add(aq, a.scale, a.zero_point, bq, b.scale, b.zero_point, y_scale, y_zp, lo, hi)
    feeds = {"a": _dequantize(aq, a.scale, a.zero_point),
             "b": _dequantize(bq, b.scale, b.zero_point)}
    real = (np.float64(a.scale) * (aq - np.float64(a.zero_point))
            + np.float64(b.scale) * (bq - np.float64(b.zero_point))) / np.float64(y_scale)
    _check_both_levels(model, feeds, golden, y_scale, y_zp, tmp_path, expect_op="QLinearAdd",
                       real=real, what=f"seed={seed} Add spread_b={spread_b} relu={relu}")
