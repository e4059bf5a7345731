"""The session option ``sequence_mode="integer"``: Softmax, LayerNormalization and
GELU with quantized neighbours become the integer-only layers of ``models.intonly``, the
rest keeps the ORT-compatible form, and the profile says which semantics each layer used.
"""

import numpy as np
import onnx
import pytest
import qdq_models
import sequence_models
from onnx import numpy_helper

from models import intonly
from models.zoo.digits import load_digits_split
from sw_driver import InferenceSession, graph
from sw_driver.importer import import_model
from tessera.cli import main

VIT = "models/zoo/vit_qdq.onnx"
GRU = "models/zoo/rowgru_qdq.onnx"
#: Float accuracy of the zoo ViT on the digits test split (models/zoo/vit.json).
VIT_FLOAT_ACCURACY = 0.9667
SEED = 1616


def _digits():
    _, _, x, y = load_digits_split()
    return x.astype(np.float32).reshape(len(x), 1, 8, 8), y


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """The seeded encoder block of tests/test_sequence_ort.py in its four GELU spellings."""
    tmp = tmp_path_factory.mktemp("intonly")
    made = {}
    for name, options in (("erf", {}), ("tanh", {"gelu": "tanh"}),
                          ("gelu_op", {"gelu_op": True}),
                          ("gelu_op_tanh", {"gelu_op": True, "gelu": "tanh"})):
        model, shape = sequence_models.encoder_block(np.random.default_rng(SEED), **options)
        model.graph.name = f"intonly_{name}"
        made[name] = (qdq_models.quantize(model, shape, SEED + 1, tmp), shape)
    return made


def _kinds(layers):
    return sorted(layer.op for layer in layers if layer.op.startswith("Int"))


def test_vit_integer_mode_is_within_one_point_of_float():
    x, y = _digits()
    ort = InferenceSession(VIT, sequence_mode="ort")
    integer = InferenceSession(VIT, sequence_mode="integer")
    assert integer.sequence_mode == "integer" and ort.sequence_mode == "ort"
    want = ort.run(None, {"input": x})[0]
    got = integer.run(None, {"input": x})[0]
    accuracy = float(np.mean(got.argmax(1) == y))
    agreement = float(np.mean(got.argmax(1) == want.argmax(1)))
    print(f"vit integer-only: accuracy {100 * accuracy:.2f}% (float 96.67%, ORT mode "
          f"{100 * np.mean(want.argmax(1) == y):.2f}%), top-1 agreement with the ORT mode "
          f"{100 * agreement:.2f}%")
    assert abs(accuracy - VIT_FLOAT_ACCURACY) <= 0.01
    assert agreement >= 0.98
    # The modes differ: the integer ops are not the float ones.
    assert not np.array_equal(got, want)
    assert _kinds(integer.graph.layers) == ["IntGelu"] * 2 + ["IntLayerNorm"] * 5 \
        + ["IntSoftmax"] * 2
    assert _kinds(ort.graph.layers) == []


def test_vit_profile_says_which_semantics_each_layer_used():
    x, _ = _digits()
    session = InferenceSession(VIT, sequence_mode="integer")
    session.run(None, {"input": x[:4]})
    rows = {row["layer"]: row for row in session.profile()}
    assert set(rows) == {layer.name for layer in session.graph.layers}
    for row in rows.values():
        assert row["semantics"] in graph.SEMANTICS and row["semantics_why"]
    for name in ("b0_ln1", "b1_ln2", "lnf"):
        assert (rows[name]["op"], rows[name]["semantics"]) == ("IntLayerNorm", "integer-only")
        assert "models.intonly.layernorm" in rows[name]["semantics_why"]
    assert rows["b0_attn"]["op"] == "IntSoftmax"
    assert rows["b1_gelu"]["op"] == "IntGelu"
    assert "erf form: b1_gelu_div, b1_gelu_erf, b1_gelu_add, b1_gelu_mul, b1_gelu" \
        in rows["b1_gelu"]["semantics_why"]
    # The GELU's inner float layers are gone; the GEMMs, the scale Mul, the residual and
    # bias Adds are integer (but the K bias, scale ~1e-11), the shape path is float.
    assert "b0_gelu_erf" not in rows and "b0_gelu_div" not in rows
    assert rows["b0_q_matmul"]["semantics"] == "integer-only"
    assert rows["b0_scores"]["semantics"] == "integer-only"
    assert rows["b0_scores_scaled"]["semantics"] == "integer-only"
    assert "Mul by 0.25 is a requantization" in rows["b0_scores_scaled"]["semantics_why"]
    assert rows["b0_residual1"]["semantics"] == "integer-only"
    assert rows["b0_fc2"]["semantics"] == "integer-only"
    assert rows["b0_k"]["semantics"] == "ort-compatible"
    assert rows["input_shape"]["semantics"] == "float"
    assert "not quantized" in rows["input_shape"]["semantics_why"]


def test_ort_mode_profile_labels_the_float_ops():
    x, _ = _digits()
    session = InferenceSession(VIT)
    session.run(None, {"input": x[:2]})
    rows = {row["layer"]: row for row in session.profile()}
    assert rows["b0_attn"]["op"] == "Softmax"
    assert rows["b0_attn"]["semantics"] == "ort-compatible"
    assert "sequence_mode='ort'" in rows["b0_attn"]["semantics_why"]
    # Erf's input (x / sqrt 2) is never quantized in onnxruntime's graph.
    assert rows["b0_gelu_erf"]["semantics"] == "float"


def test_integer_layers_hold_the_params_of_the_model_scales():
    """Each integer layer's constants are the *_params of the scales in the QDQ file."""
    model = onnx.load(VIT)
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    qparams = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear":
            qparams[node.output[0]] = (float(init[node.input[1]]), int(init[node.input[2]]))
    layers = {layer.name: layer for layer in import_model(VIT, "integer").layers}
    softmax = layers["b1_attn"]
    (x,) = softmax.inputs
    assert softmax.params == intonly.softmax_params(
        qparams[x][0], *qparams[softmax.output], out_dtype="int8")
    gelu = layers["b0_gelu"]
    (x,) = gelu.inputs
    assert gelu.params == intonly.gelu_params(*qparams[x], *qparams[gelu.output])
    assert gelu.form == "erf" and gelu.nodes[-1] == "b0_gelu"
    norm = layers["b0_ln2"]
    (node,) = [n for n in model.graph.node if n.name == "b0_ln2"]
    gamma_dq, beta_dq = ([n for n in model.graph.node if n.output[0] == name][0]
                         for name in node.input[1:3])

    def dequantized(dq):
        return ((init[dq.input[0]].astype(np.int64) - init[dq.input[2]].astype(np.int64))
                .astype(np.float32) * np.float32(init[dq.input[1]]))

    # epsilon as the file holds it: float32 (1e-5 rounds to 9.99999974738e-06).
    (eps,) = [a.f for a in node.attribute if a.name == "epsilon"]
    want = intonly.layernorm_params(qparams[norm.inputs[0]][0], dequantized(gamma_dq),
                                    dequantized(beta_dq), *qparams[norm.output], eps=eps)
    for field in ("eps_term", "y_zero_point"):
        assert getattr(norm.params, field) == getattr(want, field)
    for field in ("sign", "bias", "multiplier", "shift"):
        np.testing.assert_array_equal(getattr(norm.params, field), getattr(want, field))


@pytest.mark.parametrize("name, form", [("erf", "erf"), ("tanh", "tanh"),
                                        ("gelu_op", "Gelu"), ("gelu_op_tanh", "Gelu(tanh)")])
def test_every_gelu_spelling_becomes_one_integer_gelu(blocks, name, form):
    path, shape = blocks[name]
    session = InferenceSession(str(path), sequence_mode="integer")
    assert _kinds(session.graph.layers) == ["IntGelu", "IntLayerNorm", "IntLayerNorm",
                                            "IntSoftmax"]
    (gelu,) = [layer for layer in session.graph.layers if isinstance(layer, graph.IntGelu)]
    assert gelu.form == form
    # No float layer of the GELU is left: fc1's output goes straight to the integer GELU.
    assert not any(isinstance(layer, graph.FloatOp) and layer.op_type in ("Erf", "Tanh",
                                                                           "Gelu", "Pow")
                   for layer in session.graph.layers)
    x = np.random.default_rng(SEED + 2).standard_normal((8, *shape)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    want = InferenceSession(str(path)).run(None, {"x": x})[0]
    # Same model, other nonlinearities: close to the ORT mode, not equal to it.
    assert got.shape == want.shape and not np.array_equal(got, want)
    assert np.abs(got - want).max() < 0.25 * np.abs(want).max()


def test_integer_gelu_layer_is_models_intonly_gelu(blocks):
    """Feeding codes straight to the layer's runner gives models.intonly.gelu's values."""
    from sw_driver.providers.cpu import CPUProvider

    path, _ = blocks["tanh"]
    (gelu,) = [layer for layer in import_model(str(path), "integer").layers
               if isinstance(layer, graph.IntGelu)]
    codes = np.arange(-128, 128, dtype=np.int8).reshape(2, 8, 16)
    got = CPUProvider().run(gelu, [codes])
    np.testing.assert_array_equal(got, intonly.gelu(codes, gelu.params))
    assert got.dtype == np.int8


def _softmax_of_a_float_input(blocks, tmp_path):
    """The erf block with the Softmax rewired to read the float scores before their
    QuantizeLinear: an input that is not quantized, so the integer softmax cannot apply."""
    path, shape = blocks["erf"]
    model = onnx.load(path)
    producer = {o: n for n in model.graph.node for o in n.output}
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax"]
    dq = producer[softmax.input[0]]
    q = producer[dq.input[0]]
    assert (dq.op_type, q.op_type) == ("DequantizeLinear", "QuantizeLinear")
    softmax.input[0] = q.input[0]
    out = tmp_path / "float_scores.onnx"
    onnx.save(model, out)
    return out, shape, q.input[0]


def test_a_softmax_of_a_float_input_stays_in_the_ort_form(blocks, tmp_path):
    path, shape, scores = _softmax_of_a_float_input(blocks, tmp_path)
    session = InferenceSession(str(path), sequence_mode="integer")
    assert _kinds(session.graph.layers) == ["IntGelu", "IntLayerNorm", "IntLayerNorm"]
    x = np.random.default_rng(SEED).standard_normal((4, *shape)).astype(np.float32)
    session.run(None, {"x": x})
    rows = {row["layer"]: row for row in session.profile()}
    softmax = rows["softmax"]
    assert (softmax["op"], softmax["semantics"]) == ("Softmax", "float")
    print(softmax["semantics_why"])
    assert softmax["semantics_why"].startswith(
        f"not integer-only: its input {scores!r} comes from Where 'mask', not from a "
        f"DequantizeLinear (an input that is not quantized); float32 Softmax: input")
    assert "not from a DequantizeLinear" in softmax["semantics_why"]


def test_the_gru_stays_float_in_integer_mode():
    x, y = _digits()
    integer = InferenceSession(GRU, sequence_mode="integer")
    ort = InferenceSession(GRU)
    got = integer.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, ort.run(None, {"input": x})[0])
    accuracy = float(np.mean(got.argmax(1) == y))
    print(f"row GRU integer mode: accuracy {100 * accuracy:.2f}% (the GRU stays float)")
    assert abs(accuracy - 0.98) <= 1 / len(y)
    rows = {row["op"]: row for row in integer.profile()}
    assert rows["GRU"]["semantics"] == "float"
    assert "not quantized" in rows["GRU"]["semantics_why"]
    assert rows["Dense"]["semantics"] == "integer-only"


def test_a_cnn_profile_has_no_semantics_keys():
    session = InferenceSession("models/zoo/digits_qdq.onnx", sequence_mode="integer")
    x, _ = _digits()
    session.run(None, {"input": x[:2]})
    assert all("semantics" not in row for row in session.profile())


@pytest.mark.parametrize("mode", ["int", "Integer", None, 1])
def test_an_unknown_sequence_mode_is_refused(mode):
    with pytest.raises(ValueError, match=r"sequence_mode must be one of 'ort', 'integer', "
                                         r"not " + repr(mode).replace("'", ".")):
        InferenceSession(VIT, sequence_mode=mode)
    with pytest.raises(ValueError, match="sequence_mode must be one of"):
        import_model(VIT, sequence_mode=mode)


def test_tessera_run_sequence_mode_integer(capsys):
    assert main(["run", VIT, "--dataset", "digits", "--batch", "225",
                 "--sequence-mode", "integer"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table and lines may wrap
    assert "IntSoftmax" in out and "IntGelu" in out
    assert ("semantics (--sequence-mode integer): float 8, ort-compatible 40, integer-only "
            "53 layers") in out
    assert "accuracy on digits (test split, 450 samples): 96.67%" in out


def test_bench_intonly_accuracy_records_the_three_accuracies(tmp_path, monkeypatch):
    import json

    from bench import bench_intonly_accuracy
    from tessera import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "WRITTEN", [])
    path = bench_intonly_accuracy.main(models=("vit", "rowgru"), repeats=1)
    document = json.loads(path.read_text())
    assert path.name == "intonly_accuracy.json" and document["samples"] == 450
    metrics = {entry["name"]: entry for entry in document["metrics"]}
    assert metrics["vit_float_accuracy"]["value"] == pytest.approx(0.96667, abs=1e-4)
    assert metrics["vit_ort_mode_accuracy"]["value"] == pytest.approx(0.96889, abs=1e-4)
    vit = metrics["vit_integer_mode_accuracy"]
    assert vit["value"] >= vit["target"] == pytest.approx(vit["peer_value"] - 0.01)
    assert metrics["vit_integer_vs_ort_top1_agreement"]["value"] >= 0.98
    assert metrics["vit_integer_mode_layers"]["value"] == 53
    assert metrics["vit_integer_mode_images_per_s"]["peer"] == "ort_mode"
    # The GRU stays float: both modes agree on every image, and no speed is claimed.
    assert metrics["rowgru_integer_vs_ort_top1_agreement"]["value"] == 1.0
    assert "rowgru_integer_mode_images_per_s" not in metrics


def test_a_region_that_is_not_a_gelu_keeps_the_ort_form(tmp_path):
    """The erf block with 0.7 for GELU's 0.5: an Erf region, but not a GELU; it stays in
    the ORT form and its Erf says how far from GELU each candidate output was."""
    model, shape = sequence_models.encoder_block(np.random.default_rng(SEED))
    (half,) = [t for t in model.graph.initializer if t.name == "gelu_half"]
    half.CopyFrom(numpy_helper.from_array(np.array(0.7, np.float32), "gelu_half"))
    model.graph.name = "not_gelu"
    path = qdq_models.quantize(model, shape, SEED + 1, tmp_path)
    session = InferenceSession(str(path), sequence_mode="integer")
    assert _kinds(session.graph.layers) == ["IntLayerNorm", "IntLayerNorm", "IntSoftmax"]
    x = np.random.default_rng(SEED).standard_normal((4, *shape)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    assert np.isfinite(got).all()
    rows = {row["layer"]: row for row in session.profile()}
    why = rows["gelu_erf"]["semantics_why"]
    print(why)
    assert why.startswith("not integer-only: no int8 tensor computed from "
                          "'f1_QuantizeLinear_Output' through Erf is a GELU of it")
    assert "(at most 2 needed)" in why
    # Its Mul by the constant 0.7 is still a requantization: integer in this mode.
    assert rows["gelu_half"]["semantics"] == "integer-only"
    assert rows["gelu_half"]["semantics_why"].startswith(
        "integer-only mode: Mul by 0.699999988079071 is a requantization")


def test_a_gelu_whose_float_value_is_also_read_keeps_it_and_a_unique_name():
    """Hand-made layer graph: the Gelu's float output is a model output and also quantized.
    The integer GELU makes the int8 tensor; the float Gelu stays for the model output."""
    from sw_driver.integer_mode import apply_sequence_mode

    layers = [
        graph.Quantize("q_in", ("x",), "xq", scale=0.05, zero_point=3),
        graph.Dequantize("dq_in", ("xq",), "xf", scale=0.05, zero_point=3),
        graph.FloatOp("gelu", ("xf",), "g", op_type="Gelu", args=(0,), opset=20),
        graph.Quantize("q_g", ("g",), "gq", scale=0.04, zero_point=-90),
        graph.Dequantize("dq_g", ("gq",), "y", scale=0.04, zero_point=-90),
    ]
    info = [graph.TensorInfo("y", ["N", 4]), graph.TensorInfo("g", ["N", 4])]
    made = apply_sequence_mode(graph.Graph(layers, [graph.TensorInfo("x", ["N", 4])], info),
                               "integer")
    names = [layer.name for layer in made.layers]
    assert names == ["q_in", "dq_in", "gelu", "gelu:integer", "dq_g"]
    gelu = made.layers[3]
    assert isinstance(gelu, graph.IntGelu) and gelu.inputs == ("xq",) and gelu.output == "gq"
    assert gelu.params == intonly.gelu_params(0.05, 3, 0.04, -90)
    assert made.semantics["gelu:integer"][0] == "integer-only"
    assert made.semantics["gelu"][0] == "float"  # its output is read unquantized


RESIDUALS = ("b0_residual1", "b0_residual2", "b1_residual1", "b1_residual2")
SCALED = ("b0_scores_scaled", "b1_scores_scaled")
#: Adds of an int8 constant: the biases after the weight MatMuls and the position embedding
#: (the K biases are left out: the quantizer gave them a scale of ~1e-11).
BIASES = ("patch", "tokens_pos", "b0_q", "b0_v", "b0_o", "b0_fc1", "b0_fc2", "b1_q", "b1_v",
          "b1_o", "b1_fc1", "b1_fc2")


def test_vit_residual_bias_adds_and_the_score_scaling_become_integer_adds():
    """Integer mode: DequantizeLinear x2 -> Add -> QuantizeLinear is models.eltwise.add,
    an Add of an int8 constant too (its codes as in the file), the Mul of the scores by
    0.25 a requantization; the K biases, scale ~1e-11, keep the ORT form with the reason."""
    integer = InferenceSession(VIT, sequence_mode="integer")
    ort = InferenceSession(VIT, sequence_mode="ort")
    layers = {layer.name: layer for layer in integer.graph.layers}
    for name in RESIDUALS + SCALED + BIASES:
        assert isinstance(layers[name], graph.Add), name
        kind, why = integer.graph.semantics[name]
        assert kind == "integer-only" and "models.eltwise.add" in why
    for name in RESIDUALS:
        assert len(layers[name].inputs) == 2 and layers[name].constant is None
    for name in SCALED:
        layer = layers[name]
        assert layer.inputs == (f"{name[:2]}_scores_QuantizeLinear_Output",)
        assert layer.constant.shape == ()
        assert int(layer.constant) == 0 and layer.b_zero_point == 0
    model = onnx.load(VIT)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name in BIASES:
        layer = layers[name]
        assert len(layer.inputs) == 1 and layer.constant.dtype == np.int8
        assert "an int8 constant" in integer.graph.semantics[name][1]
    (node,) = [n for n in model.graph.node if n.name == "b0_fc1"]
    (dq,) = [n for n in model.graph.node if n.output[0] in node.input
             and n.op_type == "DequantizeLinear" and n.input[0] in inits]
    np.testing.assert_array_equal(layers["b0_fc1"].constant, inits[dq.input[0]])
    assert layers["b0_fc1"].b_scale == pytest.approx(float(inits[dq.input[1]]))
    for name in ("b0_k", "b1_k"):
        kind, why = integer.graph.semantics[name]
        assert (layers[name].op, kind) == ("Add", "ort-compatible")
        assert why.startswith("not integer-only: its scales cannot be represented by the "
                              "integer add")
    assert not any(isinstance(layer, graph.Add) for layer in ort.graph.layers)
    counts = [kind for kind, _ in integer.graph.semantics.values()]
    assert counts.count("integer-only") == 53  # 35 without the integer Adds and Muls


def test_integer_adds_are_bit_exact_with_models_eltwise_add():
    """cpu (fast kernels and golden path) equals models.eltwise.add on every code pair of
    the ViT's residual Adds, on seeded activations for its bias Adds and on every code of
    its score scaling."""
    from models.eltwise import add
    from sw_driver.providers.cpu import CPUProvider

    integer = InferenceSession(VIT, sequence_mode="integer")
    layers = {layer.name: layer for layer in integer.graph.layers}
    codes = np.arange(-128, 128, dtype=np.int8)
    a, b = (c.astype(np.int8) for c in np.meshgrid(codes, codes))
    for fast in (True, False):
        cpu = CPUProvider(fast=fast)
        for name in RESIDUALS:
            layer = layers[name]
            want = add(a, layer.a_scale, layer.a_zero_point, b, layer.b_scale,
                       layer.b_zero_point, layer.y_scale, layer.y_zero_point)
            np.testing.assert_array_equal(cpu.run(layer, [a, b]), want)
        rng = np.random.default_rng(SEED + 3)
        for name in BIASES:
            layer = layers[name]
            x = rng.integers(-128, 128, (3, 17, layer.constant.shape[-1]), dtype=np.int8)
            want = add(x, layer.a_scale, layer.a_zero_point, layer.constant, layer.b_scale,
                       layer.b_zero_point, layer.y_scale, layer.y_zero_point)
            np.testing.assert_array_equal(cpu.run(layer, [x]), want, err_msg=f"seed "
                                          f"{SEED + 3}, {name}")
        for name in SCALED:
            layer = layers[name]
            got = cpu.run(layer, [codes])
            want = add(codes, layer.a_scale, layer.a_zero_point, layer.constant,
                       layer.b_scale, 0, layer.y_scale, layer.y_zero_point)
            np.testing.assert_array_equal(got, want)
            # One rounding of the real product: within half an LSB but for float error.
            real = (codes.astype(np.float64) - layer.a_zero_point) * layer.a_scale
            exact = np.clip(real / layer.y_scale + layer.y_zero_point, -128, 127)
            assert np.abs(got - exact).max() <= 0.5 + 1e-6


def _qdq_graph(op_type, args, a_scale, b_scale=0.05, y_scale=0.1):
    """Dequantize a (and b) -> op_type -> Quantize, as the importer lays it out."""
    layers = [graph.Dequantize("dqa", ("a",), "fa", scale=a_scale),
              graph.Dequantize("dqb", ("b",), "fb", scale=b_scale),
              graph.FloatOp("op", ("fa", "fb"), "fy", op_type=op_type, args=args),
              graph.Quantize("q", ("fy",), "y", scale=y_scale)]
    layers[2].inputs = tuple(("fa", "fb")[: sum(isinstance(a, int) for a in args)])
    if len(layers[2].inputs) == 1:
        layers.pop(1)
    out = graph.TensorInfo("out", [4])
    # A float op after it, as in a transformer: a graph without one is labelled like a CNN.
    layers += [graph.Dequantize("dqy", ("y",), "fo", scale=y_scale),
               graph.FloatOp("tail", ("fo",), "out", op_type="Identity", args=(0,))]
    return graph.Graph(layers, [graph.TensorInfo("a", [4])], [out])


def test_an_add_with_unrepresentable_scales_stays_float_with_the_reason():
    from sw_driver.integer_mode import apply_sequence_mode

    ok = apply_sequence_mode(_qdq_graph("Add", (0, 1), 0.02), "integer")
    assert [layer.op for layer in ok.layers] == ["Add", "Dequantize", "Identity"]
    assert ok.semantics["op"][0] == "integer-only"
    far = apply_sequence_mode(_qdq_graph("Add", (0, 1), 1e-12, b_scale=1.0), "integer")
    assert "Add" in [layer.op for layer in far.layers]
    assert not any(isinstance(layer, graph.Add) for layer in far.layers)
    kind, why = far.semantics["op"]
    assert kind == "ort-compatible"
    assert why.startswith("not integer-only: its scales cannot be represented by the "
                          "integer add: add with a_scale=1e-12")


@pytest.mark.parametrize("op_type, args, problem", [
    ("Mul", (0, np.float32(-0.5)), "not one positive finite number"),
    ("Mul", (0, np.full(4, 0.5, np.float32)), "not one positive finite number"),
    ("Div", (np.float32(2.0), 0), "not an int8 tensor Div a scalar constant"),
])
def test_a_mul_that_is_not_a_requantization_keeps_the_ort_form(op_type, args, problem):
    from sw_driver.integer_mode import apply_sequence_mode

    made = apply_sequence_mode(_qdq_graph(op_type, args, 0.02), "integer")
    assert not any(isinstance(layer, graph.Add) for layer in made.layers)
    kind, why = made.semantics["op"]
    assert kind == "ort-compatible" and problem in why


@pytest.mark.parametrize("op_type, c, scale", [("Mul", 0.25, 0.005), ("Div", 4.0, 0.005)])
def test_a_scalar_mul_or_div_becomes_a_requantizing_add(op_type, c, scale):
    from sw_driver.integer_mode import apply_sequence_mode

    made = apply_sequence_mode(_qdq_graph(op_type, (0, np.float32(c)), 0.02), "integer")
    layer = made.layers[0]
    assert isinstance(layer, graph.Add) and layer.inputs == ("a",)
    assert layer.a_scale == pytest.approx(scale) and layer.y_scale == 0.1


@pytest.mark.slow
def test_encoder_block_residual_adds_run_on_the_twin(blocks):
    """Integer mode on the twin: the residual Adds go to the device's adder (ADD opcode),
    bit-exact with the CPU provider (models.eltwise.add)."""
    from contract.config import ArrayConfig, ConvEngineConfig
    from sw_driver.providers import SimProvider

    config = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                              weight_depth=2048, max_col_tiles=8)
    path, shape = blocks["erf"]
    x = np.random.default_rng(SEED + 2).standard_normal((3, *shape)).astype(np.float32)
    print(f"seed {SEED + 2}, 3 samples of {list(shape)}")
    want = InferenceSession(str(path), providers=["cpu"], sequence_mode="integer") \
        .run(None, {"x": x})[0]
    sim = SimProvider(config, log=lambda message: None)
    try:
        session = InferenceSession(str(path), providers=[sim, "cpu"], sequence_mode="integer")
        got = session.run(None, {"x": x})[0]
    finally:
        sim.close()
    np.testing.assert_array_equal(got, want)
    rows = {row["layer"]: row for row in session.profile()}
    for name in ("residual1", "residual2"):
        assert (rows[name]["op"], rows[name]["semantics"]) == ("Add", "integer-only")
        assert rows[name]["provider"] == "sim" and rows[name]["cycles"] > 0
        assert "Add on the adder of" in rows[name]["reason"]


def test_an_add_of_a_constant_needs_its_int8_form():
    """Add of a constant: integer with the importer's int8 codes, else ORT form and why."""
    from sw_driver.importer import _Const
    from sw_driver.integer_mode import apply_sequence_mode

    codes = np.array([-3, 0, 5, 127], np.int8)
    bias = (codes.astype(np.float32) - 1) * np.float32(0.01)
    const = _Const(codes, np.array(0.01, np.float32), np.array(1, np.int8), 1)
    made = apply_sequence_mode(_qdq_graph("Add", (0, bias), 0.02), "integer", {"op": {1: const}})
    layer = made.layers[0]
    assert isinstance(layer, graph.Add) and layer.inputs == ("a",)
    np.testing.assert_array_equal(layer.constant, codes)
    assert (layer.b_scale, layer.b_zero_point) == (pytest.approx(0.01), 1)
    bare = apply_sequence_mode(_qdq_graph("Add", (0, bias), 0.02), "integer")
    assert bare.semantics["op"][1].startswith("not integer-only: its constant operand is not "
                                              "a DequantizeLinear of an int8 initializer")
    wide = _Const(codes.astype(np.uint8), np.array([0.01, 0.02], np.float32), 0, 1)
    made = apply_sequence_mode(_qdq_graph("Add", (0, bias), 0.02), "integer", {"op": {1: wide}})
    assert "is uint8 with 2 scales; the integer add takes int8 with one scale" \
        in made.semantics["op"][1]
