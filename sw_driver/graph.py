"""The integer layer graph: what the importer produces and the providers run.

Every quantization parameter is folded in: int8 weights (symmetric per output channel),
int32 bias at scale ``s_x * s_w[c]``, per-channel fixed-point multiplier and shift from
:func:`models.requant.quantize_multiplier`, zero points, and a fused Relu/Clip expressed as
the requantization clamp ``[lo, hi]``. Tensors between layers are int8 NCHW (with the
scale and zero point of the layer that produced them) except around :class:`Quantize`,
:class:`Dequantize` and :class:`Softmax`, which work on float32.

Each layer names its input tensors and its one output tensor, so a :class:`Graph` is a list
of layers in an order where every input is produced before it is read.
"""

from dataclasses import dataclass, field

import numpy as np

from models.intonly import GeluParams, LayerNormParams, SoftmaxParams

__all__ = [
    "Add",
    "AveragePool",
    "Conv",
    "Dense",
    "Dequantize",
    "Flatten",
    "GlobalAveragePool",
    "Graph",
    "FloatOp",
    "IntGelu",
    "IntLayerNorm",
    "IntSoftmax",
    "Layer",
    "MatMul",
    "MaxPool",
    "Quantize",
    "Reshape",
    "SEMANTICS",
    "Softmax",
    "TensorInfo",
]

#: What a layer's arithmetic follows, as the profile reports it (``Graph.semantics``):
#: only integer operations (the integer contract, or :mod:`models.intonly`); onnxruntime's
#: QDQ graph (dequantize -> float32 op -> quantize, :mod:`models.sequence`); or float32 on
#: a tensor that the model never quantized.
SEMANTICS = ("integer-only", "ort-compatible", "float")


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output, like onnxruntime's ``NodeArg``.

    Attributes
    ----------
    name : str
    shape : list of (int or str or None)
        Fixed dimensions as ints, symbolic ones (e.g. the batch ``"N"``) as strings.
    type : str
        ONNX type string, e.g. ``"tensor(float)"``.
    """

    name: str
    shape: list
    type: str = "tensor(float)"


@dataclass(eq=False)
class Layer:
    """Base of every layer: a unique ``name``, input tensor names and one output name."""

    name: str
    inputs: tuple
    output: str

    @property
    def op(self):
        """The layer kind, e.g. ``"Conv"`` (the class name)."""
        return type(self).__name__


@dataclass(eq=False)
class Requantized(Layer):
    """Mixin fields of a layer whose int32 result is requantized per output channel.

    ``y = clamp(y_zero_point + round_half_even(acc * multiplier[c] / 2**shift[c]), lo, hi)``,
    see :func:`models.requant.requantize`.
    """

    weight: np.ndarray = None
    bias: np.ndarray = None
    x_zero_point: int = 0
    multiplier: np.ndarray = None
    shift: np.ndarray = None
    y_zero_point: int = 0
    lo: int = -128
    hi: int = 127


@dataclass(eq=False)
class Conv(Requantized):
    """2-D convolution, int8 ``weight`` (O, C/groups, kh, kw); depthwise when groups == C.

    ``padding`` is ``(top, left, bottom, right)`` (ONNX ``pads`` order).
    """

    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1


@dataclass(eq=False)
class Dense(Requantized):
    """Fully connected layer (ONNX Gemm or MatMul), int8 ``weight`` (O, K).

    The input is (..., K); every leading dimension is treated as batch.
    """


@dataclass(eq=False)
class MaxPool(Layer):
    """Max pooling; output keeps the input's scale and zero point (exact)."""

    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)


@dataclass(eq=False)
class AveragePool(Layer):
    """Average pooling requantized to the output's scale (:func:`models.pool.avg_pool2d`)."""

    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)
    count_include_pad: bool = False
    x_scale: float = 1.0
    x_zero_point: int = 0
    y_scale: float = 1.0
    y_zero_point: int = 0
    lo: int = -128
    hi: int = 127


@dataclass(eq=False)
class GlobalAveragePool(Layer):
    """Mean over H and W (:func:`models.pool.global_avg_pool`)."""

    x_scale: float = 1.0
    x_zero_point: int = 0
    y_scale: float = 1.0
    y_zero_point: int = 0
    lo: int = -128
    hi: int = 127


@dataclass(eq=False)
class Add(Layer):
    """Residual add of two int8 tensors (:func:`models.eltwise.add`).

    ``constant`` holds the int8 second operand when it is an initializer rather than a
    tensor (then ``inputs`` has one name).
    """

    a_scale: float = 1.0
    a_zero_point: int = 0
    b_scale: float = 1.0
    b_zero_point: int = 0
    y_scale: float = 1.0
    y_zero_point: int = 0
    lo: int = -128
    hi: int = 127
    constant: np.ndarray = None


@dataclass(eq=False)
class Flatten(Layer):
    """ONNX Flatten of an int8 tensor: ``(d0 * ... * d[axis-1], d[axis] * ...)``."""

    axis: int = 1


@dataclass(eq=False)
class Reshape(Layer):
    """ONNX Reshape of an int8 tensor; ``shape`` may hold 0 (copy) and one -1 (infer)."""

    shape: tuple = ()


@dataclass(eq=False)
class Softmax(Layer):
    """Float32 softmax along ``axis``.

    With ``coerce_2d`` (ONNX opset < 13) the input is viewed as 2-D, ``(d0 * ... *
    d[axis-1], d[axis] * ...)``, and normalised over the second dimension.
    """

    axis: int = -1
    coerce_2d: bool = False


@dataclass(eq=False)
class MatMul(Layer):
    """Product of two int8 activations (attention ``Q @ K^T``, ``attention @ V``), batched
    over the leading dimensions (:func:`models.sequence.matmul_int`), requantized per
    tensor with ``multiplier``/``shift`` of ``s_a * s_b / s_y``."""

    a_zero_point: int = 0
    b_zero_point: int = 0
    multiplier: int = 0
    shift: int = 0
    y_zero_point: int = 0
    lo: int = -128
    hi: int = 127


@dataclass(eq=False)
class FloatOp(Layer):
    """One ONNX operator computed in float32 (:func:`models.sequence.float_op`), the
    ORT-compatible definition of every non-GEMM sequence operator: its inputs come from
    :class:`Dequantize` layers (or other float layers), its output usually goes to a
    :class:`Quantize` layer.

    ``args`` lists the operator's inputs in ONNX order: an int is a position in
    ``inputs`` (a tensor of the run), an array a constant (a dequantized or raw
    initializer), None an absent optional input. ``output_index`` picks one output of a
    multi-output operator (Split); ``outputs`` is how many it has.
    """

    op_type: str = ""
    args: tuple = ()
    attrs: dict = field(default_factory=dict)
    opset: int = 13
    output_index: int = 0
    outputs: int = 1

    @property
    def op(self):
        return self.op_type


@dataclass(eq=False)
class IntSoftmax(Layer):
    """Integer-only softmax of one int8 tensor (:func:`models.intonly.softmax`), int8 out.

    Made by the ``sequence_mode="integer"`` import from ``Dequantize -> Softmax ->
    Quantize``. ``axis``/``coerce_2d`` as in :class:`Softmax` (the runner moves ``axis``
    last); ``params`` holds every integer the data path needs (``exp_multiplier``,
    ``exp_shift``, ``out_multiplier``, ``out_shift``, ``y_zero_point``, ``out_dtype`` is
    ``"int8"``). The scales are informative: nothing computes with them.
    """

    axis: int = -1
    coerce_2d: bool = False
    params: SoftmaxParams = None
    x_scale: float = 1.0
    y_scale: float = 1.0


@dataclass(eq=False)
class IntLayerNorm(Layer):
    """Integer-only LayerNormalization over the last axis of one int8 tensor
    (:func:`models.intonly.layernorm`), gamma and beta folded into ``params`` (``eps_term``;
    per channel ``sign``, ``bias``, ``multiplier``, ``shift``; ``y_zero_point``), output
    int8 clamped to ``[lo, hi]``. Made from ``Dequantize -> LayerNormalization ->
    Quantize``."""

    params: LayerNormParams = None
    lo: int = -128
    hi: int = 127
    x_scale: float = 1.0
    y_scale: float = 1.0


@dataclass(eq=False)
class IntGelu(Layer):
    """Integer-only GELU, element-wise on one int8 tensor (:func:`models.intonly.gelu`),
    output int8 clamped to ``[lo, hi]``; ``params`` holds ``x_zero_point``,
    ``erf_multiplier``, ``erf_shift``, ``out_multiplier``, ``out_shift``, ``y_zero_point``.

    Replaces the whole GELU subgraph between two int8 tensors: the ONNX ``Gelu`` op, the
    erf form ``x/2 (1 + erf(x/sqrt 2))`` or the tanh form, whatever Q/DQ pairs the
    quantizer put inside. ``form`` says which the model wrote (``"Gelu"``,
    ``"Gelu(tanh)"``, ``"erf"``, ``"tanh"``); ``nodes`` names the ONNX nodes replaced.
    """

    params: GeluParams = None
    lo: int = -128
    hi: int = 127
    form: str = "erf"
    nodes: tuple = ()
    x_scale: float = 1.0
    y_scale: float = 1.0


@dataclass(eq=False)
class Quantize(Layer):
    """float32 -> int8 like ONNX QuantizeLinear (round half to even, saturate)."""

    scale: float = 1.0
    zero_point: int = 0


@dataclass(eq=False)
class Dequantize(Layer):
    """int8 -> float32 like ONNX DequantizeLinear: ``(q - zero_point) * scale``."""

    scale: float = 1.0
    zero_point: int = 0


@dataclass(eq=False)
class Graph:
    """An imported model: layers in execution order plus the model's inputs and outputs.

    Attributes
    ----------
    layers : list of Layer
    inputs, outputs : list of TensorInfo
        The float tensors a caller feeds and receives, in the model's order.
    source : str
        Where the model came from (a path, or ``"<bytes>"``), for messages.
    metadata : dict
    sequence_mode : str
        ``"ort"`` or ``"integer"``: the semantics asked of the nonlinearities at import.
    semantics : dict
        Layer name -> ``(semantics, why)``, semantics one of :data:`SEMANTICS`; the
        session's profile reports it per layer.
    """

    layers: list
    inputs: list
    outputs: list
    source: str = "<bytes>"
    metadata: dict = field(default_factory=dict)
    sequence_mode: str = "ort"
    semantics: dict = field(default_factory=dict)
