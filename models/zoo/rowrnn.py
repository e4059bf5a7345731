"""A small GRU that reads each ``digits`` image row by row, trained in NumPy, exported to ONNX.

The 8x8 image is a sequence of 8 time steps of 8 features (its rows, top first)::

    input [N,1,8,8] -> Reshape [N,8,8] -> Transpose [8,N,8] (time major)
      -> GRU (hidden 32, forward, zero initial state, linear_before_reset=1)
      -> Y_h [1,N,32] -> Squeeze -> Gemm (10)          -> logits [N,10]

The GRU follows the ONNX ``GRU`` op (gate order z, r, h; ``linear_before_reset=1``, the form
PyTorch's ``nn.GRU`` has and exports), trained with hand-written backpropagation through time
(checked against central differences in the tests) and Adam, seeded.

:func:`export` writes ``rowgru_float.onnx``, its onnxruntime QDQ version ``rowgru_qdq.onnx``
(``quantize_static`` with the digits CNN's settings) and ``rowgru.json`` with both test
accuracies. onnxruntime's QDQ quantizer has no rule for ``GRU``: its weights stay float and
the op reads a dequantized input, so only the sequence input and the Gemm head are
quantized (docs/zoo.md lists the graph). Regenerate with ``make zoo-rnn``
(``python -m models.zoo.rowrnn``).
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .export import export_main, export_trained, fit_on_digits
from .train_numpy import softmax_xent

__all__ = ["FLOAT_PATH", "QDQ_PATH", "RECORD_PATH", "export", "forward", "loss_and_grads",
           "to_onnx", "train"]

HERE = Path(__file__).resolve().parent
FLOAT_PATH = HERE / "rowgru_float.onnx"
QDQ_PATH = HERE / "rowgru_qdq.onnx"
#: Float and onnxruntime-QDQ test accuracy of the shipped files (written by :func:`export`).
RECORD_PATH = HERE / "rowgru.json"

OPSET = 17  # as the ViT; GRU itself is opset 14 (layout attribute), unchanged since
IR_VERSION = 8
TRAIN_SEED = 3
STEPS = 8
FEATURES = 8
HIDDEN = 32
CLASSES = 10


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _forward(p, x):
    seq = x.reshape(len(x), STEPS, FEATURES)
    h = np.zeros((len(x), HIDDEN), dtype=p["gru_W"].dtype)
    cache = []
    hs = slice(2 * HIDDEN, 3 * HIDDEN)
    for t in range(STEPS):
        gx = seq[:, t] @ p["gru_W"].T + p["gru_Wb"]
        gh = h @ p["gru_R"].T + p["gru_Rb"]
        z = _sigmoid(gx[:, :HIDDEN] + gh[:, :HIDDEN])
        r = _sigmoid(gx[:, HIDDEN:2 * HIDDEN] + gh[:, HIDDEN:2 * HIDDEN])
        n = np.tanh(gx[:, hs] + r * gh[:, hs])
        cache.append((h, z, r, n, gh[:, hs]))
        h = (1 - z) * n + z * h
    logits = h @ p["head_W"].T + p["head_B"]
    return logits, (seq, cache, h)


def forward(params, x):
    """Float logits ``[N, 10]`` of the network for ``x`` ``[N, 1, 8, 8]`` (NumPy)."""
    return _forward(params, x)[0]


def loss_and_grads(params, x, y):
    """Cross-entropy of the batch and its gradient for every parameter (BPTT)."""
    logits, (seq, cache, h_last) = _forward(params, x)
    loss, dlogits = softmax_xent(logits, y)
    grads = {"head_W": dlogits.T @ h_last, "head_B": dlogits.sum(axis=0)}
    for key in ("gru_W", "gru_R", "gru_Wb", "gru_Rb"):
        grads[key] = np.zeros_like(params[key])
    dh = dlogits @ params["head_W"]
    for t in reversed(range(STEPS)):
        h, z, r, n, ghn = cache[t]
        dz = dh * (h - n)
        dan = dh * (1 - z) * (1 - n * n)   # through tanh
        dar = dan * ghn * r * (1 - r)
        daz = dz * z * (1 - z)
        dgx = np.concatenate([daz, dar, dan], axis=1)
        dgh = np.concatenate([daz, dar, dan * r], axis=1)
        grads["gru_W"] += dgx.T @ seq[:, t]
        grads["gru_Wb"] += dgx.sum(axis=0)
        grads["gru_R"] += dgh.T @ h
        grads["gru_Rb"] += dgh.sum(axis=0)
        dh = dh * z + dgh @ params["gru_R"]
    return loss, grads


def init_params(seed=TRAIN_SEED):
    """Seeded initial parameters, uniform in +-1/sqrt(hidden) as PyTorch's GRU starts; ONNX
    layouts without the direction axis (``gru_W`` [3H, 8], ``gru_R`` [3H, H], gates z, r, h)."""
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(HIDDEN)

    def uniform(*shape):
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    return {"gru_W": uniform(3 * HIDDEN, FEATURES), "gru_R": uniform(3 * HIDDEN, HIDDEN),
            "gru_Wb": uniform(3 * HIDDEN), "gru_Rb": uniform(3 * HIDDEN),
            "head_W": uniform(CLASSES, HIDDEN), "head_B": np.zeros(CLASSES, np.float32)}


def train(epochs=80, batch=32, lr=1e-2, seed=TRAIN_SEED, verbose=False):
    """Train the GRU on the digits training split; returns the float32 parameters.

    Parameters
    ----------
    epochs, batch, lr : int, int, float
        Adam, cosine-decayed rate, no augmentation.
    seed : int
        Seeds the initial weights and the batch order.
    verbose : bool
        Print the loss and test accuracy every 10 epochs.
    """
    return fit_on_digits(init_params(seed), forward, loss_and_grads, verbose=verbose,
                         epochs=epochs, batch=batch, lr=lr, seed=seed)


def to_onnx(params):
    """The float ONNX model (opset 17, input ``"input"`` [N,1,8,8], output ``"logits"``)."""
    inits = [
        numpy_helper.from_array(np.asarray(params["gru_W"], np.float32)[None], "gru_W"),
        numpy_helper.from_array(np.asarray(params["gru_R"], np.float32)[None], "gru_R"),
        numpy_helper.from_array(
            np.concatenate([params["gru_Wb"], params["gru_Rb"]]).astype(np.float32)[None],
            "gru_B"),
        numpy_helper.from_array(np.asarray(params["head_W"], np.float32), "head_W"),
        numpy_helper.from_array(np.asarray(params["head_B"], np.float32), "head_B"),
        numpy_helper.from_array(np.asarray([-1, STEPS, FEATURES], np.int64), "rows_shape"),
        numpy_helper.from_array(np.asarray([0], np.int64), "axes0"),
    ]
    nodes = [
        helper.make_node("Reshape", ["input", "rows_shape"], ["rows"], name="rows"),
        helper.make_node("Transpose", ["rows"], ["time_major"], name="time_major",
                         perm=[1, 0, 2]),
        helper.make_node("GRU", ["time_major", "gru_W", "gru_R", "gru_B"], ["", "gru_Y_h"],
                         name="gru", hidden_size=HIDDEN, linear_before_reset=1,
                         direction="forward"),
        helper.make_node("Squeeze", ["gru_Y_h", "axes0"], ["last_state"], name="last_state"),
        helper.make_node("Gemm", ["last_state", "head_W", "head_B"], ["logits"], name="head",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_rowgru",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="tessera.models.zoo")
    onnx.checker.check_model(model, full_check=True)
    return model


def export(out_dir=HERE, params=None, verbose=False):
    """Train (unless ``params`` is given) and write ``rowgru_float.onnx``,
    ``rowgru_qdq.onnx`` and ``rowgru.json`` into ``out_dir``; returns their paths."""
    return export_trained("rowgru", out_dir, params, train=train, forward=forward,
                          to_onnx=to_onnx, verbose=verbose,
                          file_names=(FLOAT_PATH.name, QDQ_PATH.name, RECORD_PATH.name))


def main(argv=None):
    export_main("train the digits row GRU and export ONNX", export, HERE, argv)


if __name__ == "__main__":
    main()
