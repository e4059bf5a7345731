"""What one soak configuration is: :class:`SoakCase` and its :class:`Quantization`."""

from dataclasses import dataclass, field

import numpy as np

from sw_driver import graph as g

__all__ = ["Quantization", "SoakCase"]


@dataclass(frozen=True)
class Quantization:
    """The float parameters of the one-node QDQ model around the layer.

    Attributes
    ----------
    x, y : (float, int)
        Scale (a float32 value) and zero point of the input and the output.
    b : (float, int) or None
        The second operand of an Add.
    w : numpy.ndarray of float32 or None
        Per-output-channel weight scales of a Conv or Dense.
    activation : None, "relu" or "relu6"
        The Relu or Clip(0, 6) between the operator and its QuantizeLinear.
    op : str
        The ONNX operator: Conv, Gemm, MatMul, MaxPool, AveragePool, GlobalAveragePool, Add.
    """

    x: tuple
    y: tuple
    op: str
    b: tuple = None
    w: np.ndarray = None
    activation: str = None


@dataclass(frozen=True, eq=False)
class SoakCase:
    """One soak configuration: the layer, its inputs and its QDQ parameters.

    Attributes
    ----------
    seed, index : int
        The case is ``draw_case(seed, index)``.
    kind : str
        One of :data:`~.cases.KINDS` (finer than ``layer.op``: depthwise and grouped Conv apart).
    layer : sw_driver.graph.Layer
        Named ``soak_<index>``, inputs ``x`` (and ``b`` for a two-input Add), output ``y``.
    inputs : tuple of numpy.ndarray of int8
    quant : Quantization
    """

    seed: int
    index: int
    kind: str
    layer: g.Layer
    inputs: tuple
    quant: Quantization
    notes: dict = field(default_factory=dict)

    @property
    def description(self):
        """The configuration on one line."""
        shapes = " + ".join("x".join(map(str, x.shape)) for x in self.inputs)
        details = ", ".join(f"{key} {value}" for key, value in self.notes.items())
        return f"{self.kind} on {shapes}: {details}"
