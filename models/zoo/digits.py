"""A small CNN for scikit-learn's ``digits``, trained in NumPy and exported to ONNX.

The data set (1797 8x8 grey images of the digits 0-9, values 0..16) ships inside the
scikit-learn wheel, so nothing is downloaded. The network::

    input [N,1,8,8] -> Conv 3x3 (16, pad 1) -> Relu -> MaxPool 2
                    -> Conv 3x3 (32, pad 1) -> Relu -> GlobalAveragePool
                    -> Flatten -> Gemm (10)        -> logits [N,10]

is trained with hand-written backpropagation and Adam, seeded, in a few seconds on one
core. :func:`export` writes the float model and its QDQ version (onnxruntime's
``quantize_static``: per-channel QInt8 weights, QInt8 activations, calibrated on the training
split) -- the reference QDQ model that Tessera's own quantizer is compared with.

Regenerate the shipped files with ``make zoo-digits`` (``python -m models.zoo.digits``).
"""

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

from .reference import quantize_with_onnxruntime
from .train_numpy import softmax_xent

__all__ = [
    "FLOAT_PATH",
    "QDQ_PATH",
    "accuracy",
    "export",
    "forward",
    "load_digits_split",
    "to_onnx",
    "train",
]

HERE = Path(__file__).resolve().parent
#: The shipped float model and its onnxruntime QDQ version.
FLOAT_PATH = HERE / "digits_float.onnx"
QDQ_PATH = HERE / "digits_qdq.onnx"

OPSET = 13
IR_VERSION = 8  # the newest IR this onnxruntime loads that covers opset 13
SPLIT_SEED = 0
TRAIN_SEED = 1
TEST_FRACTION = 0.25


def load_digits_split(seed=SPLIT_SEED, test_fraction=TEST_FRACTION):
    """The digits data set as a seeded, stratified train/test split in the model's scaling.

    Parameters
    ----------
    seed : int, optional
        Seed of the split (the shipped model was trained on the default).
    test_fraction : float, optional
        Share of each class held out for testing.

    Returns
    -------
    (x_train, y_train, x_test, y_test)
        ``x`` float32 NCHW ``[N, 1, 8, 8]`` scaled to [0, 1] (pixel / 16); ``y`` int64.
    """
    from sklearn.datasets import load_digits  # only the zoo needs scikit-learn

    data = load_digits()
    x = (data.images.astype(np.float32) / np.float32(16.0))[:, None]
    y = data.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    # Stratified by hand so the split does not depend on scikit-learn's splitter.
    for label in range(10):
        index = np.flatnonzero(y == label)
        chosen = rng.permutation(index)[:round(len(index) * test_fraction)]
        test[chosen] = True
    return x[~test], y[~test], x[test], y[test]


# -- the network, forward and backward ----------------------------------------------------

def _conv_forward(x, w, b):
    """3x3 convolution, padding 1, stride 1, via im2col; returns (output, columns)."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = sliding_window_view(xp, (3, 3), axis=(2, 3))          # n, c, h, w, 3, 3
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * 9)
    out = cols @ w.reshape(o, -1).T + b
    return out.reshape(n, h, wd, o).transpose(0, 3, 1, 2), cols


def _conv_backward(dout, cols, x_shape, w):
    n, c, h, wd = x_shape
    o = w.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, o)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dcols = (d @ w.reshape(o, -1)).reshape(n, h, wd, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, wd + 2), dtype=dout.dtype)
    # col2im: each of the nine taps adds its gradient back at its shifted window.
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + wd] += dcols[..., i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1], dw, db


def _init(rng):
    def he(*shape):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(
            np.float32)

    return {"conv1_W": he(16, 1, 3, 3), "conv1_B": np.zeros(16, np.float32),
            "conv2_W": he(32, 16, 3, 3), "conv2_B": np.zeros(32, np.float32),
            "fc_W": he(10, 32), "fc_B": np.zeros(10, np.float32)}


def forward(params, x):
    """Float logits ``[N, 10]`` of the network for ``x`` ``[N, 1, 8, 8]`` (NumPy)."""
    return _forward(params, x)[0]


def _forward(params, x):
    c1, cols1 = _conv_forward(x, params["conv1_W"], params["conv1_B"])
    r1 = np.maximum(c1, 0)
    n, ch = r1.shape[:2]
    blocks = r1.reshape(n, ch, 4, 2, 4, 2)
    p1 = blocks.max(axis=(3, 5))
    c2, cols2 = _conv_forward(p1, params["conv2_W"], params["conv2_B"])
    r2 = np.maximum(c2, 0)
    g = r2.mean(axis=(2, 3))
    logits = g @ params["fc_W"].T + params["fc_B"]
    return logits, (x, c1, cols1, r1, blocks, p1, c2, cols2, r2, g)


def _backward(params, cache, dlogits):
    x, c1, cols1, r1, blocks, p1, c2, cols2, r2, g = cache
    grads = {"fc_W": dlogits.T @ g, "fc_B": dlogits.sum(axis=0)}
    dg = dlogits @ params["fc_W"]
    dr2 = np.broadcast_to(dg[:, :, None, None] / 16.0, r2.shape)
    dc2 = dr2 * (c2 > 0)
    dp1, grads["conv2_W"], grads["conv2_B"] = _conv_backward(dc2, cols2, p1.shape,
                                                             params["conv2_W"])
    # Max-pool gradient goes to the (first) maximum of each 2x2 window.
    flat = blocks.transpose(0, 1, 2, 4, 3, 5).reshape(*p1.shape, 4)
    winner = np.zeros_like(flat)
    np.put_along_axis(winner, flat.argmax(axis=-1)[..., None], 1.0, axis=-1)
    dflat = winner * dp1[..., None]
    dr1 = dflat.reshape(*p1.shape, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(r1.shape)
    dc1 = dr1 * (c1 > 0)
    _, grads["conv1_W"], grads["conv1_B"] = _conv_backward(dc1, cols1, x.shape,
                                                           params["conv1_W"])
    return grads


def accuracy(logits, y):
    """Share of samples whose arg-max logit is the label."""
    return float((np.asarray(logits).argmax(axis=1) == y).mean())


def train(epochs=40, batch=32, lr=0.01, seed=TRAIN_SEED, verbose=False):
    """Train the CNN on the training split with Adam; returns the float32 parameters.

    Parameters
    ----------
    epochs, batch, lr : int, int, float
        Adam with the usual betas, learning rate decayed by cosine to 5 % at the end.
    seed : int
        Seeds the initial weights and the batch order.
    verbose : bool
        Print the loss and test accuracy every 10 epochs.

    Returns
    -------
    dict of str -> numpy.ndarray
        ``conv1_W, conv1_B, conv2_W, conv2_B, fc_W, fc_B`` (ONNX layouts, Gemm transB=1).
    """
    x_train, y_train, x_test, y_test = load_digits_split()
    rng = np.random.default_rng(seed)
    params = _init(rng)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, step = 0.9, 0.999, 0
    steps_per_epoch = -(-len(y_train) // batch)
    total = epochs * steps_per_epoch
    for epoch in range(epochs):
        order = rng.permutation(len(y_train))
        losses = []
        for start in range(0, len(order), batch):
            index = order[start:start + batch]
            logits, cache = _forward(params, x_train[index])
            loss, dlogits = softmax_xent(logits, y_train[index])
            grads = _backward(params, cache, dlogits.astype(np.float32))
            step += 1
            rate = lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * step / total)))
            for key, grad in grads.items():
                m[key] = beta1 * m[key] + (1 - beta1) * grad
                v2[key] = beta2 * v2[key] + (1 - beta2) * grad * grad
                mhat = m[key] / (1 - beta1 ** step)
                vhat = v2[key] / (1 - beta2 ** step)
                params[key] = (params[key] - rate * mhat / (np.sqrt(vhat) + 1e-8)).astype(
                    np.float32)
            losses.append(loss)
        if verbose and (epoch + 1) % 10 == 0:
            print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}, test accuracy "
                  f"{accuracy(forward(params, x_test), y_test):.2%}")
    return params


# -- export ---------------------------------------------------------------------------------

def to_onnx(params):
    """The float ONNX model (opset 13, input ``"input"`` [N,1,8,8], output ``"logits"``)."""
    nodes = [
        helper.make_node("Conv", ["input", "conv1_W", "conv1_B"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_W", "conv2_B"], ["c2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="tessera.models.zoo")
    onnx.checker.check_model(model)
    return model


def export(out_dir=HERE, params=None, verbose=False):
    """Train (unless ``params`` is given) and write ``digits_float.onnx`` and
    ``digits_qdq.onnx`` into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if params is None:
        params = train(verbose=verbose)
    float_path, qdq_path = out_dir / FLOAT_PATH.name, out_dir / QDQ_PATH.name
    onnx.save(to_onnx(params), float_path)
    quantize_with_onnxruntime(float_path, qdq_path, load_digits_split()[0])
    return float_path, qdq_path


def main(argv=None):
    parser = argparse.ArgumentParser(description="train the digits CNN and export ONNX")
    parser.add_argument("--out", default=str(HERE), help="folder (default: the zoo)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    float_path, qdq_path = export(args.out, verbose=True)
    x_test, y_test = load_digits_split()[2:]
    import onnxruntime as ort

    for path in (float_path, qdq_path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (logits,) = session.run(None, {"input": x_test})
        print(f"{path} ({path.stat().st_size} bytes): onnxruntime test accuracy "
              f"{accuracy(logits, y_test):.2%}")
    print(f"done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
