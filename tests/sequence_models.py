"""Small float transformer graphs shaped like PyTorch exports, for the sequence tests.

Each builder returns ``(model, per-sample input shape)``; ``qdq_models.quantize`` makes the
QDQ model with onnxruntime's ``quantize_static`` and seeded calibration.
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

T, D, H = 8, 16, 2  # tokens, model width, heads
DH = D // H


def _model(nodes, inits, output_shape, name, opset):
    tensors = []
    for key, value in inits.items():
        value = np.asarray(value)
        if value.dtype != np.bool_:
            value = value.astype(np.int64 if value.dtype.kind in "iu" else np.float32)
        tensors.append(numpy_helper.from_array(value, key))
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))], tensors)
    # IR 8: what this onnxruntime loads; the opsets used here (17, 20) it runs.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _linear(name, x, y, rng, k, o, nodes, inits):
    """MatMul by a weight then Add of a bias, as torch.nn.Linear exports."""
    inits[f"{name}_W"] = rng.standard_normal((k, o)) / np.sqrt(k)
    inits[f"{name}_B"] = rng.standard_normal(o) * 0.1
    nodes += [helper.make_node("MatMul", [x, f"{name}_W"], [f"{name}_mm"], name=f"{name}_mm"),
              helper.make_node("Add", [f"{name}_mm", f"{name}_B"], [y], name=name)]


def _layer_norm(name, x, y, rng, nodes, inits):
    inits[f"{name}_g"] = 1 + 0.1 * rng.standard_normal(D)
    inits[f"{name}_b"] = 0.1 * rng.standard_normal(D)
    nodes.append(helper.make_node("LayerNormalization", [x, f"{name}_g", f"{name}_b"], [y],
                                  name=name, axis=-1, epsilon=1e-5))


def _gelu_erf(name, x, y, nodes, inits):
    """0.5 * x * (1 + erf(x / sqrt(2))), the five nodes torch exports for nn.GELU()."""
    inits[f"{name}_sqrt2"] = np.array(np.sqrt(2.0))
    inits[f"{name}_one"] = np.array(1.0)
    inits[f"{name}_half"] = np.array(0.5)
    nodes += [
        helper.make_node("Div", [x, f"{name}_sqrt2"], [f"{name}_d"], name=f"{name}_div"),
        helper.make_node("Erf", [f"{name}_d"], [f"{name}_e"], name=f"{name}_erf"),
        helper.make_node("Add", [f"{name}_e", f"{name}_one"], [f"{name}_a"], name=f"{name}_add"),
        helper.make_node("Mul", [x, f"{name}_a"], [f"{name}_m"], name=f"{name}_mul"),
        helper.make_node("Mul", [f"{name}_m", f"{name}_half"], [y], name=f"{name}_half"),
    ]


def _gelu_tanh(name, x, y, nodes, inits):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), nn.GELU('tanh')."""
    inits[f"{name}_three"] = np.array(3.0)
    inits[f"{name}_c"] = np.array(0.044715)
    inits[f"{name}_k"] = np.array(np.sqrt(2 / np.pi))
    inits[f"{name}_one"] = np.array(1.0)
    inits[f"{name}_half"] = np.array(0.5)
    n = name
    nodes += [
        helper.make_node("Pow", [x, f"{n}_three"], [f"{n}_p"], name=f"{n}_pow"),
        helper.make_node("Mul", [f"{n}_p", f"{n}_c"], [f"{n}_pc"], name=f"{n}_cube"),
        helper.make_node("Add", [x, f"{n}_pc"], [f"{n}_s"], name=f"{n}_sum"),
        helper.make_node("Mul", [f"{n}_s", f"{n}_k"], [f"{n}_sk"], name=f"{n}_scale"),
        helper.make_node("Tanh", [f"{n}_sk"], [f"{n}_t"], name=f"{n}_tanh"),
        helper.make_node("Add", [f"{n}_t", f"{n}_one"], [f"{n}_a"], name=f"{n}_add"),
        helper.make_node("Mul", [x, f"{n}_a"], [f"{n}_m"], name=f"{n}_mul"),
        helper.make_node("Mul", [f"{n}_m", f"{n}_half"], [y], name=f"{n}_half"),
    ]


def encoder_block(rng, *, gelu_op=False, mask=True, gelu="erf"):
    """Pre-norm encoder block: LN -> Q, K, V -> heads -> scaled Q.K^T -> Where(mask) ->
    Softmax -> attn.V -> merge heads -> projection + residual -> LN -> MLP (GELU) + residual.
    """
    nodes, inits = [], {}
    _layer_norm("ln1", "x", "h1", rng, nodes, inits)
    for part in "qkv":
        _linear(part, "h1", f"{part}_lin", rng, D, D, nodes, inits)
    inits["heads_shape"] = np.array([0, T, H, DH])
    inits["merge_shape"] = np.array([0, T, D])
    inits["scale"] = np.array(np.sqrt(DH))
    for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            helper.make_node("Reshape", [f"{part}_lin", "heads_shape"], [f"{part}_r"],
                             name=f"{part}_split_heads"),
            helper.make_node("Transpose", [f"{part}_r"], [f"{part}_t"], name=f"{part}_perm",
                             perm=perm)]
    nodes += [helper.make_node("MatMul", ["q_t", "k_t"], ["scores"], name="scores"),
              helper.make_node("Div", ["scores", "scale"], ["scaled"], name="scaled")]
    logits = "scaled"
    if mask:
        inits["causal"] = np.tril(np.ones((T, T), bool))
        inits["fill"] = np.array(-6.0)
        nodes.append(helper.make_node("Where", ["causal", "scaled", "fill"], ["masked"],
                                      name="mask"))
        logits = "masked"
    nodes += [
        helper.make_node("Softmax", [logits], ["attn"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["attn", "v_t"], ["ctx"], name="context"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], name="merge_perm", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"], name="merge_heads")]
    _linear("proj", "ctx_m", "attn_out", rng, D, D, nodes, inits)
    nodes.append(helper.make_node("Add", ["x", "attn_out"], ["res1"], name="residual1"))
    _layer_norm("ln2", "res1", "h2", rng, nodes, inits)
    _linear("fc1", "h2", "f1", rng, D, 2 * D, nodes, inits)
    if gelu_op:
        extra = {"approximate": "tanh"} if gelu == "tanh" else {}
        nodes.append(helper.make_node("Gelu", ["f1"], ["g"], name="gelu", **extra))
    elif gelu == "tanh":
        _gelu_tanh("gelu", "f1", "g", nodes, inits)
    else:
        _gelu_erf("gelu", "f1", "g", nodes, inits)
    _linear("fc2", "g", "f2", rng, 2 * D, D, nodes, inits)
    nodes.append(helper.make_node("Add", ["res1", "f2"], ["y"], name="residual2"))
    return _model(nodes, inits, ["N", T, D], "encoder_block", 20 if gelu_op else 17), (T, D)


def token_head(rng):
    """Split / Concat / Slice / Sub / Gather (token pick) / Unsqueeze / Squeeze / Flatten
    -> Gemm classifier: the data movement of a ViT head."""
    inits = {"halves": np.array([D // 2, D // 2]), "starts": np.array([1]),
             "ends": np.array([T]), "axes1": np.array([1]), "pick": np.array(0),
             "offset": 0.1 * rng.standard_normal(D), "W": rng.standard_normal((D, 10)) / 4,
             "B": 0.1 * rng.standard_normal(10)}
    nodes = [
        helper.make_node("Split", ["x", "halves"], ["lo", "hi"], name="split", axis=2),
        helper.make_node("Concat", ["hi", "lo"], ["swapped"], name="concat", axis=2),
        helper.make_node("Slice", ["swapped", "starts", "ends", "axes1"], ["rest"],
                         name="slice"),
        helper.make_node("Sub", ["rest", "offset"], ["centred"], name="sub"),
        helper.make_node("Gather", ["centred", "pick"], ["token"], name="pick", axis=1),
        helper.make_node("Unsqueeze", ["token", "axes1"], ["token3"], name="unsqueeze"),
        helper.make_node("Squeeze", ["token3", "axes1"], ["token2"], name="squeeze"),
        helper.make_node("Flatten", ["token2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "W", "B"], ["y"], name="head"),
    ]
    return _model(nodes, inits, ["N", 10], "token_head", 17), (T, D)
