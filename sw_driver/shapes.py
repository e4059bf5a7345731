"""Shape inference over the integer graph (``sw_driver.graph``): the output shape of each
layer kind, and every tensor's shape that follows from the model's inputs. The planner and
the device providers read it to size the work of a layer."""

import numpy as np

from models.conv import conv_output_size

from . import graph as g

__all__ = ["conv_output_hw", "infer_layer_shape", "infer_shapes"]


def conv_output_hw(layer, h, w):
    """The output height and width of Conv ``layer`` on an ``h`` x ``w`` input."""
    (kh, kw), (sh, sw) = layer.weight.shape[2:], layer.stride
    top, left, bottom, right = layer.padding
    dh, dw = layer.dilation
    return (conv_output_size(h, kh, sh, top, bottom, dh),
            conv_output_size(w, kw, sw, left, right, dw))


def _pool_out(layer, shape):
    n, c, h, w = shape
    (kh, kw), (sh, sw) = layer.kernel, layer.stride
    top, left, bottom, right = layer.padding
    return (n, c, conv_output_size(h, kh, sh, top, bottom),
            conv_output_size(w, kw, sw, left, right))


def _reshape_out(layer, shape):
    out = [shape[i] if d == 0 else d for i, d in enumerate(layer.shape)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(shape)) // known
    return tuple(out)


def _flatten_out(layer, shape):
    axis = layer.axis + len(shape) if layer.axis < 0 else layer.axis
    return (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))


def _output_shape(layer, shapes):
    x = shapes[0]
    if isinstance(layer, g.Conv):
        return (x[0], layer.weight.shape[0], *conv_output_hw(layer, x[2], x[3]))
    if isinstance(layer, g.Dense):
        return (*x[:-1], layer.weight.shape[0])
    if isinstance(layer, (g.MaxPool, g.AveragePool)):
        return _pool_out(layer, x)
    if isinstance(layer, g.GlobalAveragePool):
        return (*x[:2], 1, 1)
    if isinstance(layer, g.Flatten):
        return _flatten_out(layer, x)
    if isinstance(layer, g.Reshape):
        return _reshape_out(layer, x)
    if isinstance(layer, (g.FloatOp, g.MatMul)):
        # Sequence layers run on the CPU provider only; their outputs' shapes are not
        # followed, so the layers after them are planned by order.
        raise TypeError(f"no shape rule for {layer.op}")
    return tuple(x)  # Add, Quantize, Dequantize, Softmax keep the shape


def infer_layer_shape(layer, input_shape):
    """The output shape of ``layer`` (one input) on ``input_shape``."""
    return tuple(int(d) for d in _output_shape(layer, [tuple(input_shape)]))


def infer_shapes(graph, batch):
    """Tensor name -> shape for every tensor whose shape follows from the model's inputs.

    Symbolic batch dimensions take ``batch``; a tensor that depends on another symbolic
    dimension (or on a layer with no shape rule) is left out.
    """
    shapes = {}
    for info in graph.inputs:
        if info.shape is None:
            continue
        dims = list(info.shape)
        if dims and not (isinstance(dims[0], int) and dims[0] > 0):
            dims[0] = batch  # symbolic or unknown batch
        if all(isinstance(d, int) and d > 0 for d in dims):
            shapes[info.name] = tuple(dims)
    for layer in graph.layers:
        inputs = [shapes.get(name) for name in layer.inputs]
        if any(shape is None for shape in inputs):
            continue
        try:
            shapes[layer.output] = tuple(int(d) for d in _output_shape(layer, inputs))
        except (ValueError, IndexError, TypeError, ZeroDivisionError):
            continue  # a shape with no rule: the planner places that layer by order
    return shapes
