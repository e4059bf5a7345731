"""Real PyTorch exports, quantized by onnxruntime: the files under tests/data/torch_exports/.

Run by hand with a PyTorch install (never imported by Tessera or its tests; PyTorch is not a
dependency)::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch onnx onnxruntime numpy
    /tmp/torchenv/bin/python models/zoo/torch_exports.py [out_dir]

Each model is built from a fixed seed, exported by the TorchScript exporter
(``torch.onnx.export(..., dynamo=False, opset_version=17)``, fixed sequence length, dynamic
batch), and quantized by ``quantize_static`` (QDQ, per-channel int8 weights, int8
activations) with seeded calibration. Such models must import unchanged; the
hand-built graphs in ``tests/sequence_models.py`` only imitate this form.
"""

import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)
from torch import nn

SEED = 1616
TOKENS = 8
D_MODEL = 32
CALIBRATION = 128  # samples, in batches of 32


class Attention(nn.Module):
    """One self-attention block: MultiheadAttention, a residual and a LayerNorm.

    With ``causal``, the -inf/0 mask becomes a constant Add on the scores, which
    ``quantize_static`` quantizes with an infinite scale: Tessera refuses that model at
    import (the test checks the message), so it is shipped as a bad-input case.
    """

    def __init__(self, causal):
        super().__init__()
        self.attn = nn.MultiheadAttention(D_MODEL, 2, batch_first=True)
        self.norm = nn.LayerNorm(D_MODEL)
        mask = torch.triu(torch.full((TOKENS, TOKENS), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask if causal else None)

    def forward(self, x):
        y, _ = self.attn(x, x, x, attn_mask=self.mask, need_weights=False)
        return self.norm(x + y)


class Encoder(nn.Module):
    """``nn.TransformerEncoderLayer`` called with its flags spelled out.

    Traced directly, the layer's ``is_causal=False`` default reaches the exporter as a tensor
    and ``scaled_dot_product_attention`` refuses it (torch 2.14); a wrapper passes a bool.
    """

    def __init__(self, activation, norm_first):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            D_MODEL, 2, dim_feedforward=64, dropout=0.0, activation=activation,
            batch_first=True, norm_first=norm_first)

    def forward(self, x):
        return self.layer(x, src_mask=None, is_causal=False)


class Recurrent(nn.Module):
    """GRU or LSTM over the sequence, then a linear head on every step's output."""

    def __init__(self, cell, bidirectional):
        super().__init__()
        self.rnn = cell(16, 24, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(48 if bidirectional else 24, 10)

    def forward(self, x):
        y = self.rnn(x)[0]
        return self.head(y)


def models():
    """name -> (module, per-sample input shape)."""
    out = {}
    for act in ("relu", "gelu"):
        for first in (False, True):
            name = f"encoder_{act}_{'prenorm' if first else 'postnorm'}"
            out[name] = (Encoder(act, first), (TOKENS, D_MODEL))
    out["mha"] = (Attention(False), (TOKENS, D_MODEL))
    out["mha_causal"] = (Attention(True), (TOKENS, D_MODEL))
    out["gru"] = (Recurrent(nn.GRU, False), (TOKENS, 16))
    out["lstm_bidirectional"] = (Recurrent(nn.LSTM, True), (TOKENS, 16))
    return out


class _Reader(CalibrationDataReader):
    def __init__(self, shape, rng):
        self._batches = iter([{"x": rng.standard_normal((32, *shape)).astype(np.float32)}
                              for _ in range(CALIBRATION // 32)])

    def get_next(self):
        return next(self._batches, None)


def export(name, module, shape, out_dir, seed):
    module.eval()
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / f"{name}_float.onnx"
        qdq_path = Path(tmp) / f"{name}.onnx"
        example = torch.zeros((2, *shape))
        with torch.no_grad():
            torch.onnx.export(module, (example,), str(float_path), dynamo=False,
                              opset_version=17, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        quantize_static(str(float_path), str(qdq_path),
                        _Reader(shape, np.random.default_rng(seed)),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
        model = onnx.load(qdq_path)
        model.graph.name = name
        onnx.save(model, out_dir / f"{name}.onnx")
    return sorted({n.op_type for n in model.graph.node})


def main(out_dir):
    logging.getLogger().setLevel(logging.ERROR)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    # The fused inference fast path exports as one aten op ONNX has no form for; the plain
    # modules export as MatMul/Softmax/LayerNormalization graphs.
    torch.backends.mha.set_fastpath_enabled(False)
    built = models()
    ops = {}
    for index, (name, (module, shape)) in enumerate(sorted(built.items())):
        ops[name] = {"input_shape": ["batch", *shape],
                     "ops": export(name, module, shape, out_dir, SEED + 1 + index)}
        print(name, ops[name]["ops"])
    meta = {"seed": SEED, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "opset": 17, "exporter": "torchscript",
            "calibration": f"{CALIBRATION} standard-normal samples, seed + 1 + index",
            "models": ops}
    (out_dir / "versions.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         Path(__file__).resolve().parents[2] / "tests" / "data" / "torch_exports")
