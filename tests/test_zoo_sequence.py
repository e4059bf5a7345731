"""The zoo's sequence models: the digits ViT and the row-by-row GRU (models/zoo/vit.py,
models/zoo/rowrnn.py).

Checked: the hand-written backward passes against central differences (and that the check
catches a wrong gradient); the exported float graph computes what the NumPy forward pass
computes; a few training steps lower the loss; the shipped ONNX files are valid, small, have
the documented ops, shapes and QDQ structure; and onnxruntime's test-split accuracy of the
shipped float and QDQ models is the figure stored beside them (models/zoo/*.json), with the
float model at 90 % or better. No full training runs here (``make zoo-vit`` / ``zoo-rnn``).
"""

from collections import Counter

import numpy as np
import onnx
import pytest

from models.zoo import digits, rowrnn, vit
from models.zoo.reference import onnxruntime_session
from models.zoo.train_numpy import adam_fit, numeric_gradient_check, read_record

MODELS = {"vit": vit, "rowgru": rowrnn}
GRAD_SEED = 11
GRAD_TOLERANCE = 1e-5

#: The ops of each shipped float graph, as docs/zoo.md lists them.
FLOAT_OPS = {
    "vit": Counter({"Add": 20, "MatMul": 17, "Reshape": 10, "Transpose": 9, "Mul": 6,
                    "LayerNormalization": 5, "Gather": 2, "Concat": 2, "Softmax": 2, "Div": 2,
                    "Erf": 2, "Shape": 1, "Unsqueeze": 1, "Expand": 1, "Gemm": 1}),
    "rowgru": Counter({"Reshape": 1, "Transpose": 1, "GRU": 1, "Squeeze": 1, "Gemm": 1}),
}


@pytest.fixture(scope="module")
def split():
    return digits.load_digits_split()


@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_central_differences(name, split):
    module = MODELS[name]
    x, y = split[0][:5], split[1][:5]
    params = module.init_params(GRAD_SEED)
    error, where = numeric_gradient_check(module.loss_and_grads, params, x, y, samples=8,
                                          seed=GRAD_SEED)
    print(f"{name}: worst relative gradient error {error:.2e} at {where} (seed {GRAD_SEED})")
    assert error < GRAD_TOLERANCE, f"{name} seed {GRAD_SEED}: {error:.2e} at {where}"


@pytest.mark.parametrize("name", MODELS)
def test_gradient_check_catches_a_wrong_gradient(name, split):
    module = MODELS[name]
    x, y = split[0][:5], split[1][:5]

    def wrong(params, xb, yb):
        loss, grads = module.loss_and_grads(params, xb, yb)
        grads["head_W"] = grads["head_W"] * 1.01  # a 1 % error in one parameter's gradient
        return loss, grads

    error, where = numeric_gradient_check(wrong, module.init_params(GRAD_SEED), x, y,
                                          samples=8, seed=GRAD_SEED)
    assert error > 1e-3 and where.startswith("head_W"), (error, where)


@pytest.mark.parametrize("name", MODELS)
def test_float_onnx_computes_the_numpy_forward(name, split):
    """Random weights, so the check does not lean on the trained ones (patch order, head
    split, gate order and the class token all have to agree)."""
    module = MODELS[name]
    params = module.init_params(GRAD_SEED)
    rng = np.random.default_rng(GRAD_SEED)
    for value in params.values():  # non-trivial norms and biases too
        value += rng.normal(0, 0.1, value.shape).astype(np.float32)
    x = split[2][:16]
    (ours,) = onnxruntime_session(module.to_onnx(params)).run(None, {"input": x})
    expected = module.forward(params, x)
    worst = np.abs(ours - expected).max()
    print(f"{name}: float ONNX vs NumPy forward, max |diff| {worst:.2e}")
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_few_training_steps_lower_the_loss(name, split):
    module = MODELS[name]
    x, y = split[0][:64], split[1][:64]
    params = module.init_params(GRAD_SEED)
    before = module.loss_and_grads(params, x, y)[0]
    # The learning rates of the two training recipes (vit.train, rowrnn.train).
    adam_fit(params, module.loss_and_grads, x, y, epochs=10, batch=32,
             lr={"vit": 3e-3, "rowgru": 1e-2}[name], seed=GRAD_SEED)
    after = module.loss_and_grads(params, x, y)[0]
    print(f"{name}: loss {before:.4f} -> {after:.4f} after 20 steps")
    assert after < 0.9 * before
    assert all(v.dtype == np.float32 for v in params.values())


def _ops(model):
    return Counter(node.op_type for node in model.graph.node)


def _shape(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", MODELS)
def test_shipped_files_are_valid_with_documented_ops(name):
    module = MODELS[name]
    for path in (module.FLOAT_PATH, module.QDQ_PATH):
        assert path.stat().st_size < 128 * 1024, path
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)], path
        assert [i.name for i in model.graph.input] == ["input"]
        assert _shape(model.graph.input[0]) == ["N", 1, 8, 8], path
        assert _shape(model.graph.output[0]) == ["N", 10], path
    float_ops = _ops(onnx.load(module.FLOAT_PATH))
    assert float_ops == FLOAT_OPS[name]
    qdq_ops = _ops(onnx.load(module.QDQ_PATH))
    assert qdq_ops - Counter({"QuantizeLinear": qdq_ops["QuantizeLinear"],
                              "DequantizeLinear": qdq_ops["DequantizeLinear"]}) == float_ops


def _weight_types(model):
    """{initializer consumed by a DequantizeLinear: its element type}."""
    inits = {i.name: i.data_type for i in model.graph.initializer}
    return {n.input[0]: inits[n.input[0]] for n in model.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits}


def test_vit_qdq_structure():
    """Every MatMul (weights and both attention products) and the head read int8 operands."""
    model = onnx.load(vit.QDQ_PATH)
    produced_by = {out: n for n in model.graph.node for out in n.output}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            for operand in node.input[:2]:
                assert produced_by[operand].op_type == "DequantizeLinear", (node.name, operand)
    types = _weight_types(model)
    int8 = onnx.TensorProto.INT8
    for i in range(vit.BLOCKS):
        for name in ("q", "k", "v", "o", "fc1", "fc2"):
            assert types[f"b{i}_{name}_W_quantized"] == int8
    assert types["head_W_quantized"] == int8
    assert types["head_B_quantized"] == onnx.TensorProto.INT32


def test_rowgru_qdq_keeps_the_gru_float():
    """onnxruntime's quantizer has no GRU rule: W, R, B stay float32 initializers and the op
    reads the float input; the last state and the Gemm head are quantized."""
    model = onnx.load(rowrnn.QDQ_PATH)
    inits = {i.name: i for i in model.graph.initializer}
    (gru,) = [n for n in model.graph.node if n.op_type == "GRU"]
    assert [inits[name].data_type for name in gru.input[1:]] == [onnx.TensorProto.FLOAT] * 3
    assert list(inits["gru_W"].dims) == [1, 3 * rowrnn.HIDDEN, 8]
    assert list(inits["gru_R"].dims) == [1, 3 * rowrnn.HIDDEN, rowrnn.HIDDEN]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gru.attribute}
    assert attrs["hidden_size"] == rowrnn.HIDDEN and attrs["linear_before_reset"] == 1
    types = _weight_types(model)
    assert types == {"head_W_quantized": onnx.TensorProto.INT8,
                     "head_B_quantized": onnx.TensorProto.INT32}


@pytest.mark.parametrize("name", MODELS)
def test_onnxruntime_accuracy_matches_the_record(name, split):
    module = MODELS[name]
    _, _, x_test, y_test = split
    record = read_record(module.RECORD_PATH)
    assert record["model"] == name and record["test_samples"] == len(y_test)
    for key, path in (("float_accuracy", module.FLOAT_PATH), ("qdq_accuracy", module.QDQ_PATH)):
        (logits,) = onnxruntime_session(path).run(None, {"input": x_test})
        measured = digits.accuracy(logits, y_test)
        print(f"{name} {key}: onnxruntime {measured:.2%}, stored {record[key]:.2%}")
        # One sample of slack: onnxruntime's float kernels may round differently per CPU.
        assert abs(measured - record[key]) <= 1.0 / len(y_test) + 1e-12, (key, measured)
    assert record["float_accuracy"] >= 0.90
    assert record["qdq_accuracy"] >= record["float_accuracy"] - 0.01


def test_export_writes_float_qdq_and_record(tmp_path, split):
    """The export path end to end on untrained GRU weights (quick): files load, record
    figures agree with a fresh onnxruntime run."""
    float_path, qdq_path, record_path = rowrnn.export(tmp_path,
                                                      params=rowrnn.init_params(GRAD_SEED))
    record = read_record(record_path)
    _, _, x_test, y_test = split
    (logits,) = onnxruntime_session(qdq_path).run(None, {"input": x_test})
    assert record["qdq_accuracy"] == digits.accuracy(logits, y_test)
    assert _ops(onnx.load(float_path)) == FLOAT_OPS["rowgru"]


@pytest.mark.parametrize(("flag", "name"), [("--vit", "vit"), ("--rnn", "rowgru")])
def test_cli_zoo_flag_retrains_that_model(flag, name, monkeypatch, tmp_path):
    """``tessera zoo --vit`` / ``--rnn`` (``make zoo-vit`` / ``zoo-rnn``) call that model's
    export and nothing else; the export is replaced here so no training runs."""
    from tessera.cli import main

    called = []

    def fake_export(module):
        def export(verbose=False):
            called.append(module)
            path = tmp_path / f"{module}.onnx"
            path.write_bytes(b"x")
            return (path,)
        return export

    for module, key in ((vit, "vit"), (rowrnn, "rowgru"), (digits, "digits")):
        monkeypatch.setattr(module, "export", fake_export(key))
    assert main(["zoo", flag]) == 0
    assert called == [name]
