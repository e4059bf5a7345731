"""Random-weight models with realistic shapes, generated on demand into ``build/zoo/``.

Their accuracy means nothing; their shapes are what real int8 edge models look like, so
they exercise the importer, the providers and (later) the planner on realistic layers:

- ``resnet8``: MLPerf Tiny's ResNet-8 for 32x32x3 images: a 3x3 stem (16), three residual
  blocks (16, 32 stride 2, 64 stride 2; 1x1 stride-2 projections on the skips), residual
  adds with ReLU, global average pool, dense 10.
- ``dwsep``: a MobileNet-style depthwise-separable stack at 32x32x3: strided 3x3 stem,
  two depthwise 3x3 + pointwise 1x1 pairs (the second depthwise strided), ReLU6 (Clip)
  everywhere, global average pool, dense 10.

Weights are He-scaled normal values (seeded) so activations neither vanish nor explode;
each model is written as float ONNX and as QDQ ONNX quantized by onnxruntime, calibrated
on seeded :func:`random_inputs`. ``make zoo`` (``python -m models.zoo.random_models``)
writes them; nothing here is committed.
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .reference import quantize_with_onnxruntime

__all__ = [
    "BUILD_DIR",
    "INPUT_SHAPE",
    "MODELS",
    "build",
    "calibration_data",
    "float_model",
    "random_inputs",
]

OPSET = 13
IR_VERSION = 8
#: Per-sample input shape of every random model (CHW).
INPUT_SHAPE = (3, 32, 32)
BUILD_DIR = Path("build") / "zoo"
CALIBRATION_SAMPLES = 64


class _Builder:
    """Accumulates nodes and initializers; names every tensor after its node."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits = rng, [], {}

    def conv(self, name, x, out_ch, in_ch, k=3, stride=1, group=1, act="relu"):
        fan_in = in_ch // group * k * k
        w = self.rng.standard_normal((out_ch, in_ch // group, k, k)) * np.sqrt(2.0 / fan_in)
        self.inits[f"{name}_W"] = w
        self.inits[f"{name}_B"] = self.rng.standard_normal(out_ch) * 0.1
        pad = k // 2
        self.nodes.append(helper.make_node(
            "Conv", [x, f"{name}_W", f"{name}_B"], [name], name=name, kernel_shape=[k, k],
            pads=[pad] * 4, strides=[stride, stride], group=group))
        return self.activation(name, act)

    def activation(self, x, act):
        if act == "relu":
            self.nodes.append(helper.make_node("Relu", [x], [f"{x}_relu"], name=f"{x}_relu"))
            return f"{x}_relu"
        if act == "relu6":
            self.inits.setdefault("zero", np.float32(0))
            self.inits.setdefault("six", np.float32(6))
            self.nodes.append(helper.make_node("Clip", [x, "zero", "six"], [f"{x}_relu6"],
                                               name=f"{x}_relu6"))
            return f"{x}_relu6"
        return x

    def add(self, name, a, b):
        self.nodes.append(helper.make_node("Add", [a, b], [name], name=name))
        return self.activation(name, "relu")

    def head(self, x, channels, classes=10):
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
        self.nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
        # Provisional: _balance_head() rescales these once the pooled features are known.
        self.inits["fc_W"] = self.rng.standard_normal((classes, channels)) / np.sqrt(channels)
        self.inits["fc_B"] = np.zeros(classes)
        self.nodes.append(helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["logits"],
                                           name="fc", transB=1))

    def model(self, name, classes=10):
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *INPUT_SHAPE])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
            [numpy_helper.from_array(np.asarray(v, np.float32), k)
             for k, v in self.inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, producer_name="tessera.models.zoo")
        onnx.checker.check_model(model)
        return model


def resnet8(rng):
    """ResNet-8 (MLPerf Tiny image classification) with random weights."""
    b = _Builder(rng)
    x = b.conv("stem", "input", 16, 3)
    # Block 1: identity skip.
    y = b.conv("b1_conv1", x, 16, 16)
    y = b.conv("b1_conv2", y, 16, 16, act=None)
    x = b.add("b1_add", y, x)
    # Blocks 2 and 3: stride 2, twice the channels, 1x1 projection on the skip.
    for block, (cin, cout) in ((2, (16, 32)), (3, (32, 64))):
        y = b.conv(f"b{block}_conv1", x, cout, cin, stride=2)
        y = b.conv(f"b{block}_conv2", y, cout, cout, act=None)
        skip = b.conv(f"b{block}_proj", x, cout, cin, k=1, stride=2, act=None)
        x = b.add(f"b{block}_add", y, skip)
    b.head(x, 64)
    return b.model("resnet8")


def dwsep(rng):
    """Depthwise-separable (MobileNet-style) stack with random weights."""
    b = _Builder(rng)
    x = b.conv("stem", "input", 16, 3, stride=2, act="relu6")             # 16x16
    x = b.conv("dw1", x, 16, 16, group=16, act="relu6")
    x = b.conv("pw1", x, 32, 16, k=1, act="relu6")
    x = b.conv("dw2", x, 32, 32, stride=2, group=32, act="relu6")         # 8x8
    x = b.conv("pw2", x, 64, 32, k=1, act="relu6")
    b.head(x, 64)
    return b.model("dwsep")


#: Model name -> (builder, weight seed).
MODELS = {"resnet8": (resnet8, 8), "dwsep": (dwsep, 9)}


def random_inputs(rng, samples):
    """Seeded random images ``[samples, 3, 32, 32]`` that differ from one another.

    Plain standard-normal images all look alike to a random network (its pooled features
    barely move), which would make top-1 comparisons meaningless. Here each image has its
    own per-channel gain (log-uniform over 0.1..3) and a smooth random pattern added to the
    noise, so the features, and the arg-max, change from image to image.
    """
    noise = rng.standard_normal((samples, *INPUT_SHAPE))
    gain = np.exp(rng.uniform(np.log(0.1), np.log(3.0), (samples, INPUT_SHAPE[0], 1, 1)))
    ramp = np.linspace(-1, 1, INPUT_SHAPE[1])
    fy, fx, phase = (rng.uniform(0, 3, (samples, INPUT_SHAPE[0], 1, 1)) for _ in range(3))
    pattern = np.sin(np.pi * (fy * ramp[:, None] + fx * ramp[None, :]) + phase)
    return (gain * (noise + 2 * pattern)).astype(np.float32)


def _balance_head(model, data):
    """Centre and scale the classifier on the pooled features of ``data``.

    Post-ReLU features of a random network share a large positive mean, so random logits
    pick the same class for nearly every input. Subtracting the mean logit (``fc_B``) and
    scaling ``fc_W`` to a logit spread of a few units makes the arg-max depend on the
    input, as in a trained classifier.
    """
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    features = session.run(["flat"], {"input": data})[0].astype(np.float64)
    inits = {t.name: t for t in model.graph.initializer}
    w = numpy_helper.to_array(inits["fc_W"]).astype(np.float64)
    logits = features @ w.T
    w = 3.0 * w / (logits.std() + 1e-6)
    b = -w @ features.mean(axis=0)
    inits["fc_W"].CopyFrom(numpy_helper.from_array(w.astype(np.float32), "fc_W"))
    inits["fc_B"].CopyFrom(numpy_helper.from_array(b.astype(np.float32), "fc_B"))
    return model


def float_model(name):
    """The float ONNX model ``name`` (same weights for the same name, every time)."""
    builder, seed = MODELS[name]
    # Balanced on other seeded data than the calibration set, like a held-out fit.
    data = random_inputs(np.random.default_rng(seed + 2000), CALIBRATION_SAMPLES)
    return _balance_head(builder(np.random.default_rng(seed)), data)


def calibration_data(name, samples=CALIBRATION_SAMPLES):
    """Seeded :func:`random_inputs` used to calibrate model ``name``."""
    return random_inputs(np.random.default_rng(MODELS[name][1] + 1000), samples)


def build(name, out_dir=BUILD_DIR):
    """Write ``<name>_float.onnx`` and ``<name>_qdq.onnx`` into ``out_dir``.

    Returns
    -------
    (Path, Path)
        The float and the QDQ model.
    """
    if name not in MODELS:
        raise ValueError(f"unknown random model {name!r}; known: {', '.join(MODELS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    float_path, qdq_path = out_dir / f"{name}_float.onnx", out_dir / f"{name}_qdq.onnx"
    onnx.save(float_model(name), float_path)
    quantize_with_onnxruntime(float_path, qdq_path, calibration_data(name))
    return float_path, qdq_path


def built(name, out_dir=BUILD_DIR):
    """The QDQ model file of ``name`` in ``out_dir``, built only when it is not there yet
    (for benchmarks that reuse the zoo's build across runs)."""
    qdq_path = Path(out_dir) / f"{name}_qdq.onnx"
    if not qdq_path.exists():
        qdq_path = build(name, out_dir)[1]
    return qdq_path

def main(argv=None):
    parser = argparse.ArgumentParser(description="write the random zoo models")
    parser.add_argument("names", nargs="*", default=list(MODELS))
    parser.add_argument("--out", default=str(BUILD_DIR))
    args = parser.parse_args(argv)
    for name in args.names:
        for path in build(name, args.out):
            print(f"{path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
