"""Every layer of the test models against onnxruntime's unoptimized QDQ graph, layer by layer.

The QDQ models of ``tests/qdq_models.py`` (``wide_kernels`` among them: 7x7 and 5x5 kernels,
stride 2, a 1x1 conv without activation, a 2x2 average pool, a non-square 20x23 input, a
Gemm head) are run by onnxruntime with graph optimizations off, which is the same on every
CPU, with every int8 tensor between layers exposed as an output. Each Tessera layer then
runs on the CPU provider from onnxruntime's own int8 inputs, so a difference is that layer's
and cannot be one carried from an earlier layer.

Contract: every element equal, except that an average pool may be 1 LSB away where its
real mean lies within ``NEAR_TIE`` of ``k + 1/2``: onnxruntime sums and divides in float32,
so at an exact tie its rounding error picks a side, while Tessera rounds the exact value half
to even as QuantizeLinear defines (``docs/semantics.md``, "Agreement with onnxruntime").
"""

import numpy as np
import onnx
import pytest
import qdq_models

from sw_driver import InferenceSession
from sw_driver.providers.cpu import CPUProvider
from tessera.soak.ties import NEAR_TIE, average_pool_real, distance_from_tie

SEEDS = (0, 1, 2)
BATCH = 4


def _exposed(path, names, tmp_path):
    """The model with every tensor in ``names`` added as a graph output."""
    model = onnx.load(path)
    outputs = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name in names and name not in outputs:
                model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    exposed = tmp_path / "exposed.onnx"
    onnx.save(model, exposed)
    return str(exposed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(qdq_models.MODELS))
def test_every_layer_matches_unfused_onnxruntime(name, seed, tmp_path):
    _, path, shape = qdq_models.build(name, seed, tmp_path)
    graph = InferenceSession(str(path), providers=["cpu"]).graph
    tensors = {t for layer in graph.layers for t in (*layer.inputs, layer.output)}
    reference = qdq_models.ort_session(_exposed(str(path), tensors, tmp_path))
    x = np.random.default_rng(seed + 7).standard_normal((BATCH, *shape)).astype(np.float32)
    values = dict(zip([o.name for o in reference.get_outputs()],
                      reference.run(None, {"x": x}), strict=True))
    values["x"] = x
    cpu, checked = CPUProvider(), 0
    for layer in graph.layers:
        if layer.output not in values or layer.op in ("Dequantize", "Softmax"):
            continue  # float outputs: compared as whole models in test_session_cpu
        inputs = [values[t] for t in layer.inputs]
        ours, theirs = cpu.run(layer, inputs), values[layer.output]
        what = f"model={name} seed={seed} layer {layer.name!r} ({layer.op})"
        assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != {theirs.shape}"
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        allowed = np.zeros(diff.shape, dtype=bool)
        if layer.op == "AveragePool":
            allowed = distance_from_tie(average_pool_real(layer, inputs[0])) <= NEAR_TIE
        bad = np.argwhere((diff > 1) | ((diff == 1) & ~allowed))
        assert not bad.size, (
            f"{what}: {len(bad)} of {diff.size} elements differ away from a rounding tie; "
            f"first at {tuple(int(i) for i in bad[0])}: Tessera {ours[tuple(bad[0])]}, "
            f"onnxruntime {theirs[tuple(bad[0])]}")
        print(f"{what}: {int((diff == 0).sum())} of {diff.size} equal, {int(allowed.sum())} "
              f"near a tie")
        checked += 1
    assert checked >= 5, f"model={name}: only {checked} layers compared"
