"""A tiny vision transformer for scikit-learn's ``digits``, trained in NumPy, exported to ONNX.

The 8x8 image is cut into 16 patches of 2x2 pixels; the network (pre-norm, as in ViT)::

    input [N,1,8,8] -> 16 patches [N,16,4] -> MatMul+Add (patch embedding, D=32)
      -> Concat(class token, patches) [N,17,32] -> Add position embedding
      -> 2 x encoder block:  x += Attention(LayerNorm(x))   (2 heads of 16)
                             x += MLP(LayerNorm(x))         (32 -> 64 -> GELU -> 32)
      -> LayerNorm -> Gather token 0 -> Gemm (10)  -> logits [N,10]

is trained with hand-written backpropagation (checked against central differences in the
tests) and AdamW, seeded. The ONNX graph (opset 17) uses the ops PyTorch's exporter emits for
such a model: MatMul/Add for linear layers, Reshape/Transpose to split and merge heads,
MatMul for Q.K^T and attention.V (activation x activation), Mul by 1/sqrt(16), Softmax,
LayerNormalization, GELU in erf form (Div, Erf, Add, Mul, Mul), the class token broadcast
to the batch by Shape -> Gather -> Unsqueeze -> Concat -> Expand and prepended by Concat, and
Gather to take it back out. The batch axis is symbolic, the sequence length fixed at 17.

:func:`export` writes ``vit_float.onnx``, its onnxruntime QDQ version ``vit_qdq.onnx``
(``quantize_static``: per-channel QInt8 weights, QInt8 activations, MinMax calibration on the
training split, as for the digits CNN) and ``vit.json`` with both test accuracies.
Regenerate with ``make zoo-vit`` (``python -m models.zoo.vit``); docs/zoo.md has the figures.
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
FLOAT_PATH = HERE / "vit_float.onnx"
QDQ_PATH = HERE / "vit_qdq.onnx"
#: Float and onnxruntime-QDQ test accuracy of the shipped files (written by :func:`export`).
RECORD_PATH = HERE / "vit.json"

OPSET = 17  # LayerNormalization
IR_VERSION = 8
TRAIN_SEED = 2

PATCH = 2
PATCHES = (8 // PATCH) ** 2
SEQ = PATCHES + 1  # the class token first
DIM = 32
HEADS = 2
HEAD_DIM = DIM // HEADS
MLP = 64
BLOCKS = 2
CLASSES = 10
LN_EPS = 1e-5
SCALE = 1.0 / np.sqrt(HEAD_DIM)
_BLOCK_KEYS = ("ln1_g", "ln1_b", "q_W", "q_B", "k_W", "k_B", "v_W", "v_B", "o_W", "o_B",
               "ln2_g", "ln2_b", "fc1_W", "fc1_B", "fc2_W", "fc2_B")


def patches(x):
    """``[N,1,8,8]`` images as ``[N,16,4]`` patch rows (patch order and pixels row-major)."""
    n = len(x)
    g = 8 // PATCH
    return x.reshape(n, g, PATCH, g, PATCH).transpose(0, 1, 3, 2, 4).reshape(n, PATCHES, -1)


# -- layers: forward returns (y, cache), backward returns input and parameter gradients -----

def _gelu(x):
    from scipy.special import erf  # scikit-learn's own dependency; NumPy has no erf

    cdf = 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    return x * cdf, cdf


def _gelu_backward(dy, x, cdf):
    return dy * (cdf + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi))


def _layernorm(x, g, b):
    xc = x - x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + LN_EPS)
    xhat = xc * inv
    return xhat * g + b, (xhat, inv)


def _layernorm_backward(dy, g, cache):
    xhat, inv = cache
    dxhat = dy * g
    dx = inv * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    axes = tuple(range(dy.ndim - 1))
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


def _linear_backward(dy, x, w):
    """Gradients of ``y = x @ w + b`` for ``x`` of any rank (the last axis contracted)."""
    dw = x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
    return dy @ w.T, dw, dy.reshape(-1, dy.shape[-1]).sum(axis=0)


def _split_heads(t):
    n = len(t)
    return t.reshape(n, SEQ, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)


def _merge_heads(t):
    return t.transpose(0, 2, 1, 3).reshape(len(t), SEQ, DIM)


def _block(p, pre, x):
    h1, ln1 = _layernorm(x, p[pre + "ln1_g"], p[pre + "ln1_b"])
    q = _split_heads(h1 @ p[pre + "q_W"] + p[pre + "q_B"])
    k = _split_heads(h1 @ p[pre + "k_W"] + p[pre + "k_B"])
    v = _split_heads(h1 @ p[pre + "v_W"] + p[pre + "v_B"])
    s = (q @ k.transpose(0, 1, 3, 2)) * SCALE
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    o = _merge_heads(a @ v)
    x2 = x + o @ p[pre + "o_W"] + p[pre + "o_B"]
    h2, ln2 = _layernorm(x2, p[pre + "ln2_g"], p[pre + "ln2_b"])
    m1 = h2 @ p[pre + "fc1_W"] + p[pre + "fc1_B"]
    g1, cdf = _gelu(m1)
    x3 = x2 + g1 @ p[pre + "fc2_W"] + p[pre + "fc2_B"]
    return x3, (h1, ln1, q, k, v, a, o, h2, ln2, m1, g1, cdf)


def _block_backward(p, pre, dx3, cache, grads):
    h1, ln1, q, k, v, a, o, h2, ln2, m1, g1, cdf = cache
    dg1, grads[pre + "fc2_W"], grads[pre + "fc2_B"] = _linear_backward(dx3, g1,
                                                                        p[pre + "fc2_W"])
    dm1 = _gelu_backward(dg1, m1, cdf)
    dh2, grads[pre + "fc1_W"], grads[pre + "fc1_B"] = _linear_backward(dm1, h2,
                                                                        p[pre + "fc1_W"])
    dx2_ln, grads[pre + "ln2_g"], grads[pre + "ln2_b"] = _layernorm_backward(
        dh2, p[pre + "ln2_g"], ln2)
    dx2 = dx3 + dx2_ln
    do, grads[pre + "o_W"], grads[pre + "o_B"] = _linear_backward(dx2, o, p[pre + "o_W"])
    do = _split_heads(do)
    da = do @ v.transpose(0, 1, 3, 2)
    dv = a.transpose(0, 1, 3, 2) @ do
    ds = a * (da - (da * a).sum(axis=-1, keepdims=True)) * SCALE
    dq = ds @ k
    dk = ds.transpose(0, 1, 3, 2) @ q
    dh1 = np.zeros_like(h1)
    for name, d in (("q", dq), ("k", dk), ("v", dv)):
        dpart, grads[pre + name + "_W"], grads[pre + name + "_B"] = _linear_backward(
            _merge_heads(d), h1, p[pre + name + "_W"])
        dh1 += dpart
    dx_ln, grads[pre + "ln1_g"], grads[pre + "ln1_b"] = _layernorm_backward(
        dh1, p[pre + "ln1_g"], ln1)
    return dx2 + dx_ln


def _forward(p, x):
    pt = patches(x)
    emb = pt @ p["patch_W"] + p["patch_B"]
    cls = np.broadcast_to(p["cls"], (len(x), 1, DIM))
    t = np.concatenate([cls, emb], axis=1) + p["pos"]
    caches = []
    for i in range(BLOCKS):
        t, cache = _block(p, f"b{i}_", t)
        caches.append(cache)
    f, lnf = _layernorm(t, p["lnf_g"], p["lnf_b"])
    c = f[:, 0]
    logits = c @ p["head_W"].T + p["head_B"]
    return logits, (pt, caches, f, lnf, c)


def forward(params, x):
    """Float logits ``[N, 10]`` of the network for ``x`` ``[N, 1, 8, 8]`` (NumPy)."""
    return _forward(params, x)[0]


def loss_and_grads(params, x, y):
    """Cross-entropy of the batch and its gradient for every parameter (backpropagation)."""
    logits, (pt, caches, f, lnf, c) = _forward(params, x)
    loss, dlogits = softmax_xent(logits, y)
    grads = {"head_W": dlogits.T @ c, "head_B": dlogits.sum(axis=0)}
    df = np.zeros_like(f)
    df[:, 0] = dlogits @ params["head_W"]
    dt, grads["lnf_g"], grads["lnf_b"] = _layernorm_backward(df, params["lnf_g"], lnf)
    for i in reversed(range(BLOCKS)):
        dt = _block_backward(params, f"b{i}_", dt, caches[i], grads)
    grads["pos"] = dt.sum(axis=0, keepdims=True)
    grads["cls"] = dt[:, :1].sum(axis=0, keepdims=True)
    _, grads["patch_W"], grads["patch_B"] = _linear_backward(dt[:, 1:], pt, params["patch_W"])
    return loss, grads


def init_params(seed=TRAIN_SEED):
    """Seeded initial parameters (ONNX layouts: MatMul weights ``[in, out]``, Gemm head
    ``[10, D]`` with transB=1)."""
    rng = np.random.default_rng(seed)

    def dense(n_in, n_out):
        return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)

    def zeros(*shape):
        return np.zeros(shape, np.float32)

    p = {"patch_W": dense(PATCH * PATCH, DIM), "patch_B": zeros(DIM),
         "cls": (0.02 * rng.standard_normal((1, 1, DIM))).astype(np.float32),
         "pos": (0.02 * rng.standard_normal((1, SEQ, DIM))).astype(np.float32)}
    for i in range(BLOCKS):
        pre = f"b{i}_"
        p.update({pre + "ln1_g": np.ones(DIM, np.float32), pre + "ln1_b": zeros(DIM),
                  pre + "ln2_g": np.ones(DIM, np.float32), pre + "ln2_b": zeros(DIM)})
        for name in ("q", "k", "v", "o"):
            p[pre + name + "_W"], p[pre + name + "_B"] = dense(DIM, DIM), zeros(DIM)
        p[pre + "fc1_W"], p[pre + "fc1_B"] = dense(DIM, MLP), zeros(MLP)
        p[pre + "fc2_W"], p[pre + "fc2_B"] = dense(MLP, DIM), zeros(DIM)
    p.update({"lnf_g": np.ones(DIM, np.float32), "lnf_b": zeros(DIM),
              "head_W": dense(DIM, CLASSES).T.copy(), "head_B": zeros(CLASSES)})
    return p


def _shift(rng, x):
    """Seeded augmentation: each image moved by up to one pixel each way (zeros fill in)."""
    out = np.zeros_like(x)
    dy, dx = rng.integers(-1, 2, size=(2, len(x)))
    for i in range(len(x)):
        src = x[i, 0, max(0, -dy[i]):8 - max(0, dy[i]), max(0, -dx[i]):8 - max(0, dx[i])]
        out[i, 0, max(0, dy[i]):max(0, dy[i]) + src.shape[0],
            max(0, dx[i]):max(0, dx[i]) + src.shape[1]] = src
    return out


def train(epochs=150, batch=32, lr=3e-3, seed=TRAIN_SEED, verbose=False):
    """Train the ViT on the digits training split; returns the float32 parameters.

    Parameters
    ----------
    epochs, batch, lr : int, int, float
        AdamW (decay 0.01 on matrices), cosine-decayed rate, one-pixel shift augmentation.
    seed : int
        Seeds the initial weights, the batch order and the augmentation.
    verbose : bool
        Print the loss and test accuracy every 10 epochs.
    """
    return fit_on_digits(init_params(seed), forward, loss_and_grads, verbose=verbose,
                         epochs=epochs, batch=batch, lr=lr, seed=seed, weight_decay=0.01,
                         augment=_shift)


# -- export ---------------------------------------------------------------------------------

class _Graph:
    """Collects nodes and constant initializers with unique names while the graph is built."""

    def __init__(self, params):
        self.nodes = []
        self.inits = [numpy_helper.from_array(np.asarray(v, np.float32), k)
                      for k, v in params.items()]
        self._count = 0

    def const(self, name, value, dtype=np.int64):
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type, inputs, name, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def linear(self, x, pre, name):
        """``x @ W + b`` as MatMul then Add, as PyTorch exports a Linear on a 3-D tensor."""
        y = self.op("MatMul", [x, pre + name + "_W"], pre + name + "_matmul")
        return self.op("Add", [y, pre + name + "_B"], pre + name)

    def layernorm(self, x, pre, name):
        return self.op("LayerNormalization", [x, pre + name + "_g", pre + name + "_b"],
                       pre + name, axis=-1, epsilon=LN_EPS)


def _onnx_block(g, pre, x):
    h1 = g.layernorm(x, pre, "ln1")
    heads = g.const("heads_shape", [-1, SEQ, HEADS, HEAD_DIM]) if pre == "b0_" else \
        "heads_shape"
    q = g.op("Reshape", [g.linear(h1, pre, "q"), heads], pre + "q_heads")
    k = g.op("Reshape", [g.linear(h1, pre, "k"), heads], pre + "k_heads")
    v = g.op("Reshape", [g.linear(h1, pre, "v"), heads], pre + "v_heads")
    q = g.op("Transpose", [q], pre + "q_t", perm=[0, 2, 1, 3])           # N, H, S, d
    k = g.op("Transpose", [k], pre + "k_t", perm=[0, 2, 3, 1])           # N, H, d, S
    v = g.op("Transpose", [v], pre + "v_t", perm=[0, 2, 1, 3])           # N, H, S, d
    s = g.op("MatMul", [q, k], pre + "scores")
    s = g.op("Mul", [s, "attn_scale" if pre != "b0_" else
                     g.const("attn_scale", SCALE, np.float32)], pre + "scores_scaled")
    a = g.op("Softmax", [s], pre + "attn", axis=-1)
    o = g.op("MatMul", [a, v], pre + "context")
    o = g.op("Transpose", [o], pre + "context_t", perm=[0, 2, 1, 3])
    merge = g.const("merge_shape", [-1, SEQ, DIM]) if pre == "b0_" else "merge_shape"
    o = g.op("Reshape", [o, merge], pre + "context_merged")
    x2 = g.op("Add", [x, g.linear(o, pre, "o")], pre + "residual1")
    h2 = g.layernorm(x2, pre, "ln2")
    m = g.linear(h2, pre, "fc1")
    # GELU as PyTorch exports nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2))).
    e = g.op("Div", [m, "sqrt2"], pre + "gelu_div")
    e = g.op("Erf", [e], pre + "gelu_erf")
    e = g.op("Add", [e, "one"], pre + "gelu_add")
    e = g.op("Mul", [m, e], pre + "gelu_mul")
    e = g.op("Mul", [e, "half"], pre + "gelu")
    return g.op("Add", [x2, g.linear(e, pre, "fc2")], pre + "residual2")


def to_onnx(params):
    """The float ONNX model (opset 17, input ``"input"`` [N,1,8,8], output ``"logits"``)."""
    g = _Graph(params)
    g.const("sqrt2", np.sqrt(2.0), np.float32)
    g.const("one", 1.0, np.float32)
    g.const("half", 0.5, np.float32)
    grid = 8 // PATCH
    x = g.op("Reshape", ["input", g.const("grid_shape", [-1, grid, PATCH, grid, PATCH])],
             "patch_grid")
    x = g.op("Transpose", [x], "patch_order", perm=[0, 1, 3, 2, 4])
    x = g.op("Reshape", [x, g.const("patch_shape", [-1, PATCHES, PATCH * PATCH])], "patches")
    emb = g.linear(x, "", "patch")
    # The class token broadcast to the batch, as PyTorch exports cls.expand(N, 1, D).
    shape = g.op("Shape", ["input"], "input_shape")
    n = g.op("Gather", [shape, g.const("zero", 0)], "batch", axis=0)
    n = g.op("Unsqueeze", [n, g.const("axes0", [0])], "batch_1d")
    cls_shape = g.op("Concat", [n, g.const("cls_tail", [1, DIM])], "cls_shape", axis=0)
    cls = g.op("Expand", ["cls", cls_shape], "cls_batch")
    t = g.op("Concat", [cls, emb], "tokens", axis=1)
    t = g.op("Add", [t, "pos"], "tokens_pos")
    for i in range(BLOCKS):
        t = _onnx_block(g, f"b{i}_", t)
    f = g.layernorm(t, "", "lnf")
    c = g.op("Gather", [f, "zero"], "cls_out", axis=1)
    g.nodes.append(helper.make_node("Gemm", [c, "head_W", "head_B"], ["logits"], name="head",
                                    transB=1))
    graph = helper.make_graph(
        g.nodes, "digits_vit",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="tessera.models.zoo")
    onnx.checker.check_model(model, full_check=True)
    return model


def export(out_dir=HERE, params=None, verbose=False):
    """Train (unless ``params`` is given) and write ``vit_float.onnx``, ``vit_qdq.onnx`` and
    ``vit.json`` (float and onnxruntime-QDQ test accuracy) into ``out_dir``; their paths."""
    return export_trained("vit", out_dir, params, train=train, forward=forward,
                          to_onnx=to_onnx, verbose=verbose,
                          file_names=(FLOAT_PATH.name, QDQ_PATH.name, RECORD_PATH.name))


def main(argv=None):
    export_main("train the digits ViT and export ONNX", export, HERE, argv)


if __name__ == "__main__":
    main()
