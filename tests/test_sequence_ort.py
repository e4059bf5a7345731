"""Sequence-model operators in the ORT-compatible mode, against onnxruntime's unfused QDQ
session (``docs/semantics.md``, "Sequence models, ORT-compatible mode").

The models are small transformer graphs shaped like PyTorch exports
(``tests/sequence_models.py``), quantized by onnxruntime's ``quantize_static`` with seeded
calibration. Target: at least 99% of outputs within 1 LSB of onnxruntime.
"""

import numpy as np
import onnx
import pytest
import qdq_models
import sequence_models
from assertions import assert_within_one_lsb
from onnx import helper, numpy_helper

from contract.config_file import DEFAULT_PRESET, PRESETS
from models import sequence
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession, graph
from sw_driver.errors import LayerError, UnsupportedModelError, UnsupportedOperatorError
from sw_driver.providers.cpu import CPUProvider
from sw_driver.providers.device import engine_refusal
from sw_driver.providers.opencl import OpenCLProvider

DEFAULT_CONFIG = PRESETS[DEFAULT_PRESET]

SEED = 1616
SAMPLES = 64

BUILDERS = {
    "block_erf_gelu_mask": lambda rng: sequence_models.encoder_block(rng),
    "block_gelu_op": lambda rng: sequence_models.encoder_block(rng, gelu_op=True),
    "block_no_mask": lambda rng: sequence_models.encoder_block(rng, mask=False),
    "block_tanh_gelu": lambda rng: sequence_models.encoder_block(rng, gelu="tanh"),
    "block_gelu_op_tanh": lambda rng: sequence_models.encoder_block(rng, gelu_op=True,
                                                                    gelu="tanh"),
    "token_head": sequence_models.token_head,
}


def _build(name, tmp_path, seed=SEED):
    model, shape = BUILDERS[name](np.random.default_rng(seed))
    model.graph.name = name
    return qdq_models.quantize(model, shape, seed + 1, tmp_path), shape


def _output_scale(path):
    model = onnx.load(path)
    (dq,) = [n for n in model.graph.node if n.output[0] == "y"]
    assert dq.op_type == "DequantizeLinear"
    init = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(init[dq.input[1]]))


def _lsb_figures(path, shape, seed):
    x = np.random.default_rng(seed).standard_normal((SAMPLES, *shape)).astype(np.float32)
    ours = InferenceSession(str(path), providers=["cpu"]).run(None, {"x": x})[0]
    ref = onnxruntime_session(path).run(None, {"x": x})[0]
    assert ours.shape == ref.shape and ours.dtype == np.float32
    lsb = np.rint(np.abs(ours.astype(np.float64) - ref) / _output_scale(path))
    return lsb, ours, ref


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_matches_onnxruntime_unfused_within_one_lsb(name, tmp_path):
    path, shape = _build(name, tmp_path)
    lsb, ours, ref = _lsb_figures(path, shape, SEED + 2)
    within = float(np.mean(lsb <= 1))
    exact = float(np.mean(lsb == 0))
    print(f"seed {SEED} {name}: {lsb.size} outputs, {100 * exact:.3f}% equal, "
          f"{100 * within:.3f}% within 1 LSB, max {int(lsb.max())} LSB")
    assert_within_one_lsb(lsb, ours, ref, f"seed {SEED} {name}")
    if name.startswith("block"):
        # Top-1 over the model width, as a classifier would read it.
        agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
        print(f"seed {SEED} {name}: argmax agreement {100 * agree:.2f}%")
        assert agree >= 0.99


def test_layers_are_integer_gemms_and_float_ops(tmp_path):
    path, _ = _build("block_erf_gelu_mask", tmp_path)
    layers = InferenceSession(str(path), providers=["cpu"]).graph.layers
    kinds = {}
    for layer in layers:
        kinds.setdefault(type(layer).__name__, set()).add(layer.op)
    # Q.K^T and attn.V are integer products of two activations; the projections Dense.
    assert sorted(layer.name for layer in layers if isinstance(layer, graph.MatMul)) == [
        "context", "scores"]
    assert sum(isinstance(layer, graph.Dense) for layer in layers) == 6
    assert {"LayerNormalization", "Erf", "Div", "Mul", "Where", "Transpose"} <= kinds["FloatOp"]


def test_matmul_int_is_the_exact_product():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    a = rng.integers(-128, 128, (2, 3, 5, 7), dtype=np.int8)
    b = rng.integers(-128, 128, (2, 3, 7, 4), dtype=np.int8)
    got = sequence.matmul_int(a, -5, b, 3)
    want = np.einsum("bhik,bhkj->bhij", a.astype(np.int64) + 5, b.astype(np.int64) - 3)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32
    with pytest.raises(ValueError, match=r"cannot multiply shapes \[2, 3, 5, 7\] and "
                                         r"\[2, 3, 5, 7\]"):
        sequence.matmul_int(a, 0, a, 0)
    big = np.full((1, 1 << 17), -128, np.int8)
    with pytest.raises(ValueError, match="int32 range"):
        sequence.matmul_int(big, 127, big.T, 127)


def test_quantize_dequantize_are_onnx_linear():
    q = sequence.quantize(np.array([-1e9, -0.25, 0.25, 0.75, 1e9], np.float32), 0.5, 3)
    np.testing.assert_array_equal(q, [-128, 3, 3, 5, 127])  # half to even, saturated
    np.testing.assert_array_equal(sequence.dequantize(q, 0.5, 3), [-65.5, 0, 0, 1, 62])


# ----------------------------------------------------------------- bad input

def _mutated(path, name, value):
    model = onnx.load(path)
    (init,) = [t for t in model.graph.initializer if t.name == name]
    init.CopyFrom(numpy_helper.from_array(np.asarray(value), name))
    return model.SerializeToString()


def test_mask_of_the_wrong_shape_is_named_at_import(tmp_path):
    path, _ = _build("block_erf_gelu_mask", tmp_path)
    bad = _mutated(path, "causal", np.ones((3, 5), bool))
    with pytest.raises(UnsupportedModelError, match=r"node 'mask' \(Where\): condition \(mask\) "
                                                    r"shapes do not broadcast: 'causal' \[3, 5\]"):
        InferenceSession(bad)


def test_mask_that_is_not_bool_is_refused(tmp_path):
    path, _ = _build("block_erf_gelu_mask", tmp_path)
    bad = _mutated(path, "causal", np.ones((8, 8), np.float32))
    with pytest.raises(UnsupportedModelError, match=r"'mask' \(Where\): the condition must be "
                                                    r"bool, not float32"):
        InferenceSession(bad)


def test_gather_index_out_of_range_names_the_layer(tmp_path):
    path, shape = _build("token_head", tmp_path)
    session = InferenceSession(_mutated(path, "pick", np.array(99, np.int64)), providers=["cpu"])
    x = np.zeros((1, *shape), np.float32)
    with pytest.raises(LayerError, match=r"layer 'pick' \(Gather\) failed on provider 'cpu' "
                                         r".*: Gather: indices in "
                                         r"\[99, 99\] are outside \[-7, 6\]"):
        session.run(None, {"x": x})


def test_split_sizes_that_do_not_add_up_name_the_layer(tmp_path):
    path, shape = _build("token_head", tmp_path)
    session = InferenceSession(_mutated(path, "halves", np.array([3, 3], np.int64)),
                               providers=["cpu"])
    with pytest.raises(LayerError, match=r"layer 'split:0' \(Split\) .*: Split: sizes \[3, 3\] "
                                         r"do not add up to axis 2's length 16"):
        session.run(None, {"x": np.zeros((1, *shape), np.float32)})


def test_dynamic_sequence_length_is_refused(tmp_path):
    path, _ = _build("block_no_mask", tmp_path)
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "tokens"
    with pytest.raises(UnsupportedModelError, match=r"input 'x' dimension 1 is 'tokens', "
                                                    r"dynamic without a bound"):
        InferenceSession(model.SerializeToString())


def test_unsupported_op_names_node_op_and_opset(tmp_path):
    path, _ = _build("block_no_mask", tmp_path)
    model = onnx.load(path)
    model.graph.node.append(helper.make_node("Trilu", ["y"], ["z"], name="band"))
    model.graph.output[0].name = "z"
    with pytest.raises(UnsupportedOperatorError, match=r"'band' \(Trilu\) from ai.onnx "
                                                       r"opset 17"):
        InferenceSession(model.SerializeToString())


def test_accelerators_refuse_sequence_layers_with_a_reason(tmp_path):
    path, _ = _build("block_erf_gelu_mask", tmp_path)
    layers = InferenceSession(str(path), providers=["cpu"]).graph.layers
    matmul = next(layer for layer in layers if isinstance(layer, graph.MatMul))
    norm = next(layer for layer in layers if layer.op == "LayerNormalization")
    # The refusal only reads the layer: no OpenCL device is needed to ask.
    opencl = OpenCLProvider.__new__(OpenCLProvider)
    assert opencl.supports(matmul) is None  # the batched GEMM kernel (sequence_kernels)
    assert str(opencl.supports(norm)).startswith(
        "LayerNormalization is float32 math of the ORT-compatible mode")
    # The device runs MatMul as Dense passes (sw_driver.matmul_lowering), not LayerNorm.
    assert engine_refusal(matmul, DEFAULT_CONFIG) is None
    assert engine_refusal(norm, DEFAULT_CONFIG) == (
        "this LayerNormalization computes in float32: its operands are float, not int8; the "
        "device runs int8 Conv, Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and Add only")


#: op -> (inputs, attributes, a fragment the message must hold)
BAD_OPERANDS = {
    "Transpose": ([np.zeros((2, 3))], {"perm": [0, 2, 1]}, "[2, 3]"),
    "Reshape": ([np.zeros((2, 3)), np.array([4, 2])], {}, "[2, 3] as [4, 2]"),
    "Concat": ([np.zeros((2, 3)), np.zeros((3, 3))], {"axis": 1}, "[2, 3], [3, 3]"),
    "LayerNormalization": ([np.zeros((2, 4)), np.ones(3), np.zeros(3)], {"axis": -1},
                           "[2, 4], [3], [3]"),
    "Softmax": ([np.zeros((2, 3))], {"axis": 2}, "axis 2 is outside [-2, 1]"),
    "Squeeze": ([np.zeros((2, 3)), np.array([1])], {}, "[2, 3]"),
    "Unsqueeze": ([np.zeros((2, 3)), np.array([5])], {}, "axis 5 is outside [-3, 2]"),
    "Expand": ([np.zeros((2, 3)), np.array([4, 3])], {}, "[2, 3] and [4, 3]"),
    "Mul": ([np.zeros((2, 3)), np.zeros(4)], {}, "[2, 3] and [4]"),
    "Where": ([np.ones((3, 5), bool), np.zeros((8, 8)), np.zeros(())], {},
              "[3, 5] and [8, 8] and []"),
    "Gather": ([np.zeros((4, 3)), np.array([4])], {"axis": 0}, "outside [-4, 3]"),
    "MatMul": ([np.zeros((2, 3)), np.zeros((2, 3))], {}, "[2, 3], [2, 3]"),
    "Slice": ([np.zeros((2, 3)), np.array([0]), np.array([1]), np.array([4])], {},
              "axis 4 is outside [-2, 1]"),
    "Split": ([np.zeros((2, 3)), np.array([1, 1])], {"axis": 1}, "do not add up"),
}


@pytest.mark.parametrize("op_type", sorted(BAD_OPERANDS))
def test_bad_operands_raise_naming_the_operator_and_shapes(op_type):
    args, attrs, fragment = BAD_OPERANDS[op_type]
    with pytest.raises(ValueError) as info:
        sequence.float_op(op_type, args, attrs, opset=17, outputs=2)
    message = str(info.value)
    assert message.startswith(f"{op_type}: ") and fragment in message, message


def test_activation_matmul_of_mismatched_shapes_names_the_layer(tmp_path):
    path, _ = _build("block_no_mask", tmp_path)
    session = InferenceSession(str(path), providers=["cpu"])
    scores = next(layer for layer in session.graph.layers if layer.name == "scores")
    a = np.zeros((1, 2, 8, 8), np.int8)
    with pytest.raises(ValueError, match=r"cannot multiply shapes \[1, 2, 8, 8\] and "
                                         r"\[1, 2, 4, 8\]"):
        CPUProvider().run(scores, [a, np.zeros((1, 2, 4, 8), np.int8)])
