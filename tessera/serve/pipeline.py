"""Pipeline parallelism: one model's layers split in two stages over two devices.

Data parallelism (each device runs whole requests) gives ``1/T0 + 1/T1`` images a second
for whole-model times ``T0`` and ``T1``. A pipeline, the first layers on one device and the
rest on the other with both stages busy on different requests, gives ``1/max(S0, S1)`` for
stage times ``S0`` and ``S1``. With equal devices data parallelism always wins; a pipeline
wins when the devices differ per layer (one fast at convolutions, the other at the rest),
since each stage then runs where it is cheap. :func:`plan` predicts both from the planner's
per-layer estimates and picks the higher; ``parallelism = "auto"`` in the serve config
follows it, ``"pipeline"`` forces the best split.

A split is made where a single activation crosses from the first layers to the rest. The
model file is cut there with ONNX's own extractor: the first stage ends with the crossing
tensor's QuantizeLinear/DequantizeLinear pair (its output, a float on the int8 grid), and
the second starts from that pair's float input, so the second stage quantizes the exact
values the first dequantized: the two stages' result is bit-identical with the whole model.
"""

from dataclasses import dataclass

__all__ = ["CLOCK_HZ", "PipelinePlan", "cut_points", "layer_seconds", "plan", "split_model"]

#: The clock a device layer's modelled cycles are timed at when its provider gives no
#: seconds (the twin): the "pcie" provider's default.
CLOCK_HZ = 150e6


def layer_seconds(graph, planner, clock_hz=CLOCK_HZ):
    """``{layer name: predicted seconds}`` on one device: the cheapest timed estimate of the
    session's providers, else the modelled cycles at ``clock_hz`` (the twin's estimate has
    cycles but no seconds: its wall time is a simulator's), else 0 (a host layer)."""
    out = {}
    for layer in graph.layers:
        costs = [c for c in planner.estimates.get(layer.name, {}).values() if c is not None]
        timed = [c.seconds for c in costs if c.seconds is not None]
        cycles = [c.cycles for c in costs if c.cycles is not None]
        out[layer.name] = min(timed) if timed else (min(cycles) / clock_hz if cycles else 0.0)
    return out


def cut_points(graph):
    """Indices ``k`` such that layers ``[:k+1]`` and ``[k+1:]`` exchange exactly one tensor,
    layer ``k``'s output, and the later layers read no model input: ``[(k, tensor)]``."""
    layers = list(graph.layers)
    inputs = {info.name for info in graph.inputs}
    points = []
    for k in range(len(layers) - 1):
        made = {layer.output for layer in layers[:k + 1]}
        read = {name for layer in layers[k + 1:] for name in layer.inputs}
        crossing = (made | inputs) & read
        if crossing == {layers[k].output}:
            points.append((k, layers[k].output))
    return points


@dataclass(frozen=True)
class PipelinePlan:
    """The parallelism chosen for a model over two devices, with the predictions behind it.

    ``choice`` is ``"pipeline"`` or ``"data"``; ``cut`` the index of the first stage's last
    layer (None for data); ``stages`` ``[(device, layer names, seconds)]``."""

    choice: str
    devices: tuple
    cut: int | None
    tensor: str | None
    stages: tuple
    data_images_per_second: float
    pipeline_images_per_second: float

    def as_dict(self):
        return {"choice": self.choice, "devices": list(self.devices),
                "split_after": None if self.cut is None else self.stages[0][1][-1],
                "stages": [{"device": d, "layers": list(names),
                            "predicted_seconds_per_image": seconds}
                           for d, names, seconds in self.stages],
                "predicted_images_per_second": {
                    "data": round(self.data_images_per_second, 3),
                    "pipeline": round(self.pipeline_images_per_second, 3)}}

    def describe(self):
        """One line for the server's start-up output."""
        rates = (f"predicted {self.pipeline_images_per_second:,.0f} images/s as a pipeline, "
                 f"{self.data_images_per_second:,.0f} data parallel")
        if self.choice == "data":
            return f"data parallel over {', '.join(self.devices)} ({rates})"
        (d0, names0, _), (d1, _, _) = self.stages
        return f"pipeline {d0} -> {d1}, split after layer {names0[-1]!r} ({rates})"


def _rate(seconds):
    return float("inf") if seconds <= 0 else 1.0 / seconds


def plan(graph, seconds_by_device, devices, *, force=False):
    """Data parallelism or the best two-stage pipeline for ``graph`` over ``devices`` (two
    names, in stage order), from ``seconds_by_device[device][layer name]``; ``force``
    takes the best pipeline even when data parallelism is predicted faster.

    Raises
    ------
    ValueError
        ``graph`` has no point where one tensor alone crosses (with ``force``).
    """
    d0, d1 = devices
    names = [layer.name for layer in graph.layers]
    data = sum(_rate(sum(seconds_by_device[d][n] for n in names)) for d in devices)
    best = None
    for k, tensor in cut_points(graph):
        first, rest = names[:k + 1], names[k + 1:]
        s0 = sum(seconds_by_device[d0][n] for n in first)
        s1 = sum(seconds_by_device[d1][n] for n in rest)
        rate = _rate(max(s0, s1))
        if best is None or rate > best[0]:
            best = (rate, k, tensor, ((d0, tuple(first), s0), (d1, tuple(rest), s1)))
    if best is None:
        if force:
            raise ValueError("no layer boundary where a single tensor crosses: the model "
                             "cannot be split into a two-stage pipeline")
        return PipelinePlan("data", tuple(devices), None, None, (), data, 0.0)
    rate, k, tensor, stages = best
    if force or rate > data:
        return PipelinePlan("pipeline", tuple(devices), k, tensor, stages, data, rate)
    return PipelinePlan("data", tuple(devices), None, None, (), data, rate)


def split_model(path, tensor):
    """The model file at ``path`` cut at ``tensor`` (a Tessera graph tensor: the output of
    a QuantizeLinear node): ``(first stage bytes, its output name, second stage bytes, its
    input name)``. Feeding the first stage's output to the second's input gives the whole
    model's outputs, bit for bit (see the module's docstring)."""
    import onnx
    from onnx.utils import Extractor

    model = onnx.load(str(path))
    quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"
                and tensor in n.output]
    dequantize = [n for n in model.graph.node if n.op_type == "DequantizeLinear"
                  and tensor in n.input]
    if len(quantize) != 1 or len(dequantize) != 1:
        raise ValueError(f"tensor {tensor!r} is not one QuantizeLinear's output read by one "
                         f"DequantizeLinear: the model cannot be cut there")
    float_in, float_out = quantize[0].input[0], dequantize[0].output[0]
    outputs = [o.name for o in model.graph.output]
    inputs = [i.name for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    # The extractor needs a type and shape for each cut tensor, which ONNX's shape
    # inference does not always give; the planner's shapes (batch 1) do, the batch left
    # symbolic as the model's input has it.
    from sw_driver.importer import import_model
    from sw_driver.shapes import infer_shapes

    shape = infer_shapes(import_model(model), 1).get(tensor)
    if shape is None:
        raise ValueError(f"the shape of tensor {tensor!r} does not follow from the model's "
                         f"input shape: the model cannot be cut there")
    known = {v.name for v in model.graph.value_info}
    for name in (float_in, float_out):
        if name not in known:
            model.graph.value_info.append(onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, ["N", *shape[1:]]))
    extractor = Extractor(model)
    first = extractor.extract_model(inputs, [float_out])
    second = extractor.extract_model([float_in], outputs)
    return (first.SerializeToString(), float_out, second.SerializeToString(), float_in)
