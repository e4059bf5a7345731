"""The "torch" provider (PyTorch, here on the CPU) against the golden "cpu" provider.

The contract is identity, bit for bit: random layers at the edges of the exactness bound
(reductions of 1024 and 1025 products, extreme zero points, saturation, depthwise, grouped,
stride 2, 1x1), every zoo model, the sequence models' integer layers; a construction where
an unchunked float32 sum would be wrong; the batch split after out-of-memory; the
refusals; and that the runtime never imports torch unless this provider is built. No RTL:
these run where Verilator is absent.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from assertions import assert_exact

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: `make setup` installs torch==2.13.0 (CPU) "
    "for these tests; pip install 'tessera[gpu]' elsewhere")

from models.requant import quantize_multiplier  # noqa: E402
from sw_driver import InferenceSession  # noqa: E402
from sw_driver import graph as g  # noqa: E402
from sw_driver.errors import ProviderUnavailableError  # noqa: E402
from sw_driver.providers import CPUProvider, TorchProvider  # noqa: E402
from sw_driver.providers import torch_kernels as tk  # noqa: E402
from sw_driver.providers import torch_provider as tp  # noqa: E402


@pytest.fixture(scope="module")
def provider():
    return TorchProvider("cpu")


def _requant(rng, o, k):
    # A real multiplier that maps a typical accumulator (~ sqrt(k) * 2**12) onto int8.
    real = rng.uniform(0.5, 2.0, size=o) / (np.sqrt(k) * 2.0**7)
    return quantize_multiplier(real)


def _conv(rng, c, o, kernel, *, groups=1, stride=(1, 1), padding=(0, 0, 0, 0),
          dilation=(1, 1), zx=None, extreme=False):
    cg = c // groups
    if extreme:
        w = rng.choice(np.array([-128, 127], dtype=np.int8), size=(o, cg, *kernel))
    else:
        w = rng.integers(-128, 128, size=(o, cg, *kernel), dtype=np.int8)
    m, n = _requant(rng, o, cg * kernel[0] * kernel[1])
    zx = int(rng.integers(-128, 128)) if zx is None else zx
    zy = int(rng.integers(-128, 128))
    return g.Conv("conv", ("x",), "y", weight=w,
                  bias=rng.integers(-2**20, 2**20, size=o, dtype=np.int32),
                  x_zero_point=zx, multiplier=m, shift=n, y_zero_point=zy,
                  lo=-128 if extreme else max(-128, zy - 100), hi=127, stride=stride,
                  padding=padding, dilation=dilation, groups=groups)


def _inputs(rng, shape, extreme=False):
    if extreme:
        return rng.choice(np.array([-128, 127], dtype=np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _check(provider, layer, inputs, what):
    want = CPUProvider().run(layer, inputs)
    got = provider.run(layer, inputs)
    assert_exact(np.asarray(got), want, what, names=("torch", "cpu"), same_dtype=True)
    return got


CONV_CASES = {
    # name: (C, O, kernel, keyword arguments, input H x W)
    "K=1024 1x1": (1024, 8, (1, 1), {}, (3, 3)),
    "K=1025 1x1": (1025, 8, (1, 1), {}, (3, 3)),
    "K=2304 3x3": (256, 4, (3, 3), {"padding": (1, 1, 1, 1)}, (4, 4)),
    "3x3 stride 2 padded": (8, 6, (3, 3), {"stride": (2, 2), "padding": (1, 0, 1, 2)}, (9, 8)),
    "1x1 stride 2": (5, 7, (1, 1), {"stride": (2, 2)}, (7, 6)),
    "depthwise 3x3": (6, 6, (3, 3), {"groups": 6, "padding": (1, 1, 1, 1)}, (6, 5)),
    "depthwise x2 stride 2": (4, 8, (3, 3), {"groups": 4, "stride": (2, 2)}, (7, 7)),
    "grouped 4": (8, 12, (3, 3), {"groups": 4, "padding": (1, 1, 1, 1)}, (5, 5)),
    "dilated 2": (3, 4, (3, 3), {"dilation": (2, 2), "padding": (2, 2, 2, 2)}, (6, 6)),
    "7x7 stem": (3, 8, (7, 7), {"stride": (2, 2), "padding": (3, 3, 3, 3)}, (12, 12)),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("zx", [None, -128, 127])
def test_conv_identical_to_golden(provider, case, zx, seed):
    rng = np.random.default_rng(seed)
    c, o, kernel, kwargs, (h, w) = CONV_CASES[case]
    layer = _conv(rng, c, o, kernel, zx=zx, **kwargs)
    x = _inputs(rng, (2, c, h, w))
    _check(provider, layer, [x], f"conv {case} zx={zx} seed={seed}")


@pytest.mark.parametrize("case", ["K=1025 1x1", "depthwise 3x3", "grouped 4"])
def test_conv_saturation(provider, case, seed):
    """Extreme inputs and weights (every product +-2**14 or close), no clamp but int8's."""
    rng = np.random.default_rng(seed)
    c, o, kernel, kwargs, (h, w) = CONV_CASES[case]
    for zx in (-128, 127):
        layer = _conv(rng, c, o, kernel, zx=zx, extreme=True, **kwargs)
        x = _inputs(rng, (2, c, h, w), extreme=True)
        y = _check(provider, layer, [x], f"conv {case} saturated zx={zx} seed={seed}")
        assert {-128, 127} & set(np.unique(np.asarray(y)).tolist())


@pytest.mark.parametrize("path", ["float64", "int64"])
def test_both_requantization_paths_identical_to_golden(monkeypatch, path, seed):
    """Requantization runs in float64 where the bound allows it, else in int64: each path
    alone, forced, on layers the other would take, gives the golden result."""
    taken = []
    real = tk.Requant.uses_float

    def forced(self, t):
        if path == "int64":
            taken.append(False)
            return False
        exact = real(self, t)
        taken.append(exact)
        return exact

    monkeypatch.setattr(tk.Requant, "uses_float", forced)
    # A fixed draw: which path a random layer takes depends on its values, and this test
    # needs layers of both kinds (the other tests draw from the session's seed).
    seed = 20261128
    rng = np.random.default_rng(seed)
    provider = TorchProvider("cpu")
    for case in ("3x3 stride 2 padded", "grouped 4", "K=1025 1x1", "7x7 stem"):
        c, o, kernel, kwargs, (h, w) = CONV_CASES[case]
        for extreme in (False, True):
            layer = _conv(rng, c, o, kernel, extreme=extreme, **kwargs)
            x = _inputs(rng, (2, c, h, w), extreme=extreme)
            _check(provider, layer, [x], f"conv {case} {path} extreme={extreme} seed={seed}")
    # The float64 path is taken where the bound holds, and refused where it does not.
    assert (True in taken and False in taken) if path == "float64" else not any(taken)


@pytest.mark.parametrize("k", [1, 1024, 1025, 3000])
def test_dense_identical_to_golden(provider, k, seed):
    rng = np.random.default_rng(seed)
    o = 9
    m, n = _requant(rng, o, k)
    for zx in (-128, 0, 127):
        layer = g.Dense("fc", ("x",), "y", weight=_inputs(rng, (o, k)),
                        bias=rng.integers(-2**24, 2**24, size=o, dtype=np.int32),
                        x_zero_point=zx, multiplier=m, shift=n, y_zero_point=-3)
        x = _inputs(rng, (2, 3, k))  # leading dimensions are batch
        _check(provider, layer, [x], f"dense k={k} zx={zx} seed={seed}")


@pytest.mark.parametrize("k", [16, 1024, 1025])
def test_matmul_identical_to_golden(provider, k, seed):
    rng = np.random.default_rng(seed)
    m, n = quantize_multiplier(1.0 / (np.sqrt(k) * 2.0**13))
    for za, zb in ((-128, 127), (127, -128), (3, -5)):
        layer = g.MatMul("mm", ("a", "b"), "y", a_zero_point=za, b_zero_point=zb,
                         multiplier=m, shift=n, y_zero_point=7, lo=-100, hi=120)
        a = _inputs(rng, (2, 3, 5, k))
        b = _inputs(rng, (1, 3, k, 4))  # broadcast over the first batch dimension
        _check(provider, layer, [a, b], f"matmul k={k} za={za} zb={zb} seed={seed}")


def test_pools_and_add_identical_to_golden(provider, seed):
    rng = np.random.default_rng(seed)
    x = _inputs(rng, (2, 5, 9, 8))
    cases = [
        g.MaxPool("mp", ("x",), "y", kernel=(3, 3), stride=(2, 2), padding=(1, 1, 2, 1)),
        g.AveragePool("ap", ("x",), "y", kernel=(3, 2), stride=(2, 1), padding=(1, 0, 2, 1),
                      x_scale=0.05, x_zero_point=-128, y_scale=0.04, y_zero_point=5),
        g.AveragePool("api", ("x",), "y", kernel=(2, 2), stride=(2, 2), padding=(1, 1, 1, 1),
                      count_include_pad=True, x_scale=0.05, x_zero_point=3, y_scale=0.05,
                      y_zero_point=-2, lo=-2, hi=127),
        g.GlobalAveragePool("gap", ("x",), "y", x_scale=0.02, x_zero_point=127,
                            y_scale=0.01, y_zero_point=-1),
    ]
    for layer in cases:
        _check(provider, layer, [x], f"{layer.op} {layer.name} seed={seed}")
    add = g.Add("add", ("a", "b"), "y", a_scale=0.03, a_zero_point=-128, b_scale=0.07,
                b_zero_point=127, y_scale=0.05, y_zero_point=0, lo=0, hi=127)
    _check(provider, add, [x, _inputs(rng, x.shape)], f"add seed={seed}")
    constant = g.Add("addc", ("a",), "y", a_scale=0.03, a_zero_point=1, b_scale=0.02,
                     b_zero_point=-4, y_scale=0.05, y_zero_point=2,
                     constant=_inputs(rng, (1, 5, 1, 1)))
    _check(provider, constant, [x], f"add constant seed={seed}")


def test_quantize_and_dequantize_identical(provider, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((4, 3, 8, 8)) * 4).astype(np.float32)
    # Exact ties of the quotient (x / s = k + 1/2) as well as ordinary values.
    x.flat[:64] = ((np.arange(64) - 32) + 0.5) * np.float32(0.25)
    for scale, zp in ((0.25, 0), (0.0371, -128), (0.013, 127)):
        q = g.Quantize("q", ("x",), "y", scale=scale, zero_point=zp)
        y = _check(provider, q, [x], f"quantize scale={scale} zp={zp} seed={seed}")
        d = g.Dequantize("d", ("y",), "z", scale=scale, zero_point=zp)
        _check(provider, d, [np.asarray(y)], f"dequantize scale={scale} zp={zp}")


@pytest.mark.parametrize("x_scale", [1e-3, 0.05, 2.0])
def test_integer_only_layers_identical_to_golden(provider, x_scale, seed):
    """IntSoftmax (both axes conventions, int8 and uint8 codes), IntGelu over every int8
    value, IntLayerNorm with signed gammas, constant rows (variance 0) and clamps."""
    from models import intonly

    rng = np.random.default_rng(seed)
    x = _inputs(rng, (2, 3, 5, 17))
    x[0, 0, 0] = 127      # one-hot row
    x[0, 0, 1] = -128     # constant row: uniform softmax, zero variance
    x[0, 0, 2, 3] = 127
    for out_dtype, axis, coerce in (("int8", -1, False), ("uint8", 1, False),
                                    ("int8", 2, True)):
        params = intonly.softmax_params(x_scale, out_dtype=out_dtype)
        layer = g.IntSoftmax("sm", ("x",), "y", axis=axis, coerce_2d=coerce, params=params)
        _check(provider, layer, [x], f"IntSoftmax {out_dtype} axis={axis} "
               f"coerce={coerce} x_scale={x_scale} seed={seed}")
    every = np.arange(-128, 128, dtype=np.int8).reshape(2, 8, 16)
    for zx, zy, lo in ((0, 0, -128), (-128, 5, -3), (127, -128, -128)):
        params = intonly.gelu_params(x_scale, zx, 0.02, zy)
        layer = g.IntGelu("gelu", ("x",), "y", params=params, lo=lo)
        _check(provider, layer, [every], f"IntGelu zx={zx} zy={zy} x_scale={x_scale}")
    gamma = rng.uniform(0.2, 2.0, 17) * rng.choice([-1, 1], 17)
    beta = rng.uniform(-1, 1, 17)
    for eps, lo in ((1e-5, -128), (1e-1, -20)):
        params = intonly.layernorm_params(x_scale, gamma, beta, 0.03, -7, eps=eps)
        layer = g.IntLayerNorm("ln", ("x",), "y", params=params, lo=lo)
        _check(provider, layer, [x], f"IntLayerNorm eps={eps} x_scale={x_scale} seed={seed}")
    bad = g.IntLayerNorm("ln", ("x",), "y", params=params)
    with pytest.raises(ValueError, match="gamma and beta expect 17"):
        provider.run(bad, [x[..., :5]])  # the golden model's error


def _sequential_mm(a, b):
    """A float32 GEMM that adds its products strictly in order, one float32 rounding per
    addition: what any accumulator in float32 may do when nothing bounds it."""
    acc = torch.zeros(a.shape[:-1] + b.shape[-1:], dtype=torch.float32)
    for i in range(a.shape[-1]):
        acc = acc + a[..., i:i + 1].float() * b[..., i:i + 1, :].float()
    return acc


def test_chunking_is_what_keeps_a_long_reduction_exact(monkeypatch):
    """K = 2048 products of 127 * 127 (odd): the running float32 sum passes 2**24 after
    1041 of them, where float32 has no odd integers, so an unchunked sequential sum is wrong;
    in chunks of 1024 it is exact. The bias cancels the exact sum, so ``y`` is the error."""
    k = 2048
    x = np.full((1, k, 1, 1), 127, dtype=np.int8)
    w = np.full((1, k, 1, 1), 127, dtype=np.int8)
    exact = k * 127 * 127
    unchunked = np.cumsum(np.full(k, 127 * 127, dtype=np.float32), dtype=np.float32)[-1]
    assert int(unchunked) != exact  # the bound is real: a plain float32 sum fails here
    layer = g.Conv("long", ("x",), "y", weight=w, bias=np.array([-exact], dtype=np.int32),
                   x_zero_point=0, multiplier=np.array([1 << 30]), shift=np.array([30]),
                   y_zero_point=0)
    assert CPUProvider().run(layer, [x]).item() == 0
    provider = TorchProvider("cpu")
    monkeypatch.setattr(tk.Kernels, "_mm", lambda self, a, b: _sequential_mm(a, b))
    assert provider.run(layer, [x]).item() == 0  # chunked: exact even in strict order
    monkeypatch.setattr(tk, "CHUNK", 1 << 20)
    fresh = TorchProvider("cpu")
    assert fresh.run(layer, [x]).item() != 0  # the same sum unchunked is not
    assert "chunked: 2048 products" in provider.describe(layer)
    profile = [{"layer": "long", "provider": "torch"}]
    provider.run(layer, [x])
    provider.finish_profile(profile)
    assert profile[0]["chunked"].startswith("chunked: 2048 products per output exceed 1024")


def test_out_of_memory_splits_the_batch(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    layer = _conv(rng, 8, 6, (3, 3), padding=(1, 1, 1, 1))
    x = _inputs(rng, (8, 8, 6, 6))
    real = tk.Kernels.conv
    sizes = []

    def small_memory(self, x, *args, **kwargs):
        sizes.append(x.shape[0])
        if x.shape[0] > 2:
            raise torch.OutOfMemoryError("pretend the device is full")
        return real(self, x, *args, **kwargs)

    monkeypatch.setattr(tk.Kernels, "conv", small_memory)
    provider = TorchProvider("cpu")
    _check(provider, layer, [x], f"conv after out-of-memory seed={seed}")
    assert sizes == [8, 4, 2, 2, 4, 2, 2]
    profile = [{"layer": "conv", "provider": "torch"}]
    provider.finish_profile(profile)
    assert "split" in profile[0]["batch_split"]


@pytest.mark.parametrize("name", ["digits", "resnet8", "dwsep"])
def test_zoo_models_identical_to_cpu(zoo, name, seed):
    from models.zoo import load_digits_split, random_models

    rng = np.random.default_rng(seed)
    if name == "digits":
        x = load_digits_split()[2][rng.choice(450, 16, replace=False)]
    else:
        x = random_models.random_inputs(rng, 4)
    (want,) = InferenceSession(str(zoo[name]), providers=["cpu"]).run(None, {"input": x})
    # Alone (no CPU appended): on the CPU the cpu provider would win the heavy layers.
    session = InferenceSession(str(zoo[name]), providers=[("torch", {"device": "cpu"})],
                               cpu_fallback=False)
    (got,) = session.run(None, {"input": x})
    assert_exact(got, want, f"zoo {name} seed={seed}", names=("torch", "cpu"),
                 same_dtype=True)
    profile = session.profile()
    assert {e["provider"] for e in profile} == {"torch"}
    # Every layer here: the session ran the model as one device function (a CUDA graph on
    # CUDA, the same function eagerly here).
    assert all("one device function" in e["whole_model"] for e in profile)
    # Only the float input and the float output cross: every other tensor stays put.
    assert sum(e["bytes"] for e in profile) == x.nbytes + got.nbytes


#: im2col geometries in the order that once broke PyTorch's automatic dynamic shapes (the
#: last came back as (384, 288): a kernel compiled for another geometry was reused).
GATHER_GEOMETRIES = [(3, 3, 32, 3, 1, 1), (3, 16, 32, 3, 1, 1), (3, 16, 32, 3, 2, 1),
                     (3, 16, 32, 1, 2, 0), (3, 32, 16, 3, 1, 1), (3, 32, 16, 3, 2, 1)]


@pytest.mark.slow
def test_compiled_im2col_identical_to_eager(seed):
    gen = torch.Generator().manual_seed(seed)
    for n, c, h, k, s, p in GATHER_GEOMETRIES:
        x = torch.randint(-128, 128, (n, c, h, h), dtype=torch.int8, generator=gen)
        args = (x, (k, k), (s, s), (p, p, p, p), (1, 1), -7.0, torch.float32)
        want, got = tk._gather_cols(*args), tk.compiled("cols")(*args)
        where = f"im2col n={n} c={c} h={h} k={k} s={s} p={p} seed={seed}"
        assert tk.compiled("cols").error is None, f"{where}: not compiled here"
        assert got.shape == want.shape, f"{where}: {tuple(got.shape)} != {tuple(want.shape)}"
        assert torch.equal(got, want), where


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet8", "dwsep"])
def test_compiled_zoo_models_identical_to_cpu(zoo, name, seed):
    """``compile=True``: requantization and im2col through torch.compile (the C++ back end
    here, Triton on CUDA), the GEMM eager; bit for bit the cpu provider's answer."""
    from models.zoo import random_models

    x = random_models.random_inputs(np.random.default_rng(seed), 3)
    (want,) = InferenceSession(str(zoo[name]), providers=["cpu"]).run(None, {"input": x})
    session = InferenceSession(
        str(zoo[name]), providers=[("torch", {"device": "cpu", "compile": True})],
        cpu_fallback=False)
    (got,) = session.run(None, {"input": x})
    assert_exact(got, want, f"compiled zoo {name} seed={seed}", names=("torch", "cpu"),
                 same_dtype=True)
    errors = {name: fn.error for name, fn in tk._COMPILED.items()}
    assert errors.get("requant", "unused") is None, f"requant was not compiled: {errors}"


def test_whole_model_that_fails_runs_layer_by_layer(zoo, monkeypatch, seed):
    """A whole-model function that raises (here: every kernel call of it) is dropped, and
    the request, and the ones after it, run layer by layer with the same answer."""
    from models.zoo import random_models

    x = random_models.random_inputs(np.random.default_rng(seed), 2)
    (want,) = InferenceSession(str(zoo["resnet8"]), providers=["cpu"]).run(None, {"input": x})
    session = InferenceSession(str(zoo["resnet8"]), providers=[("torch", {"device": "cpu"})],
                               cpu_fallback=False)
    real = tp.graph_runner(session._providers[0], session.graph)
    calls = []

    def broken(x):
        calls.append(1)
        raise RuntimeError("pretend the captured graph failed")

    monkeypatch.setattr(session, "_whole", lambda feeds: broken(feeds))
    for _ in range(2):
        (got,) = session.run(None, {"input": x})
        assert_exact(got, want, f"resnet8 layer by layer seed={seed}", names=("torch", "cpu"),
                     same_dtype=True)
        assert not any("whole_model" in e for e in session.profile())
    assert len(calls) == 1
    (y,) = real(session._providers[0].kernels.upload(x))
    assert_exact(y.numpy(), want, "graph_runner", names=("torch", "cpu"), same_dtype=True)


@pytest.mark.parametrize("path,mode", [("models/zoo/vit_qdq.onnx", "ort"),
                                       ("models/zoo/vit_qdq.onnx", "integer"),
                                       ("models/zoo/rowgru_qdq.onnx", "ort")])
def test_sequence_models_identical_to_cpu(path, mode, seed):
    from models.zoo import load_digits_split

    rng = np.random.default_rng(seed)
    x = load_digits_split()[2][rng.choice(450, 16, replace=False)]
    cpu = InferenceSession(path, providers=["cpu"], sequence_mode=mode)
    name = cpu.get_inputs()[0].name
    x = x.reshape(16, 1, 8, 8)
    (want,) = cpu.run(None, {name: x})
    session = InferenceSession(path, providers=[("torch", {"device": "cpu",
                                                           "costs": tp.ALWAYS_CHOSEN}), "cpu"],
                               sequence_mode=mode)
    (got,) = session.run(None, {name: x})
    assert_exact(got, want, f"{path} {mode} seed={seed}", names=("torch", "cpu"),
                 same_dtype=True)
    on_torch = {e["op"] for e in session.profile() if e["provider"] == "torch"}
    assert {"Dense", "Quantize", "Dequantize"} <= on_torch
    if "vit" in path:
        assert "MatMul" in on_torch
    if mode == "integer":
        assert {"IntSoftmax", "IntLayerNorm", "IntGelu"} <= on_torch


#: A fake calibration with a GPU's figures (no timing involved): a fixed 30 us per layer,
#: then 500 GMAC/s and 50 G elements/s.
GPU_LIKE = tp.TorchCostModel(macs_per_second=5e11, layer_seconds=30e-6,
                             elements_per_second=5e10, source="fake GPU calibration")


def _placed(path, providers, batch):
    from sw_driver.importer import import_model
    from sw_driver.planner import Planner

    placement = Planner(batch=batch).place(import_model(str(path)), providers)
    return {layer.name: (layer.op, provider, reason) for layer, provider, reason in placement}


def test_calibrated_gpu_takes_the_heavy_layers(zoo):
    """providers=["gpu", "cpu"] on CUDA, with the calibration faked: every convolution of
    ResNet-8 goes to the GPU, and a layer too small to pay its fixed cost stays on the
    CPU."""
    gpu = TorchProvider("cpu", costs=GPU_LIKE)
    gpu.name = "gpu"
    placed = _placed(zoo["resnet8"], [gpu, CPUProvider()], batch=64)
    for name, (op, chosen, reason) in placed.items():
        if op == "Conv":
            assert chosen is gpu, f"{name}: {reason}"
            assert "fake GPU calibration" in reason and "beats cpu est." in reason
    # The 10x64 Dense at batch 1: 640 MACs, 20.3 us on the CPU against 30 us here.
    placed = _placed(zoo["resnet8"], [gpu, CPUProvider()], batch=1)
    assert placed["fc"][1].name == "cpu", placed["fc"][2]
    assert placed["b3_conv2"][1] is gpu


def test_torch_on_the_cpu_does_not_beat_the_cpu_provider(zoo):
    """With its default (CPU) figures the torch provider, even listed first, loses every
    layer the cpu provider has an estimate for; a faster calibration wins them."""
    torch_cpu = TorchProvider("cpu")
    assert torch_cpu.costs is tp.CPU_COSTS
    placed = _placed(zoo["resnet8"], [torch_cpu, CPUProvider()], batch=64)
    ops = {op for op, chosen, _ in placed.values() if chosen.name == "cpu"}
    assert {"Conv", "Add", "Dense"} <= ops
    faster = TorchProvider("cpu", costs=tp.TorchCostModel(4e9, 10e-6, 2e9, "fake"))
    placed = _placed(zoo["resnet8"], [faster, CPUProvider()], batch=64)
    assert all(chosen is faster for op, chosen, _ in placed.values() if op == "Conv")


def test_measured_costs_are_rates(provider):
    costs = tp.measure_costs(provider, repeats=1)
    assert costs.macs_per_second > 0 and costs.elements_per_second > 0
    assert costs.layer_seconds > 0 and costs.source == "measured on cpu"
    with pytest.raises(ValueError, match="macs_per_second must be a positive number"):
        tp.TorchCostModel(0, 1e-6, 1e9)
    with pytest.raises(TypeError, match="TorchCostModel"):
        TorchProvider("cpu", costs={"macs_per_second": 1e9})


def test_refusals_say_why(provider):
    layer = g.FloatOp("erf", ("x",), "y", op_type="Erf")
    assert "integer layers only" in str(provider.supports(layer))
    pool = g.MaxPool("mp", ("x",), "y", kernel=(2, 2), padding=(2, 0, 0, 0))
    assert "padding" in str(provider.supports(pool))
    if not torch.cuda.is_available():
        with pytest.raises(ProviderUnavailableError, match="no CUDA"):
            TorchProvider("cuda")
    with pytest.raises(ProviderUnavailableError, match="device must be"):
        TorchProvider("tpu")


def test_without_torch_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ProviderUnavailableError, match=r"tessera\[gpu\]"):
        TorchProvider()
    monkeypatch.setattr(tp.importlib.util, "find_spec", lambda name: None)
    ok, why = tp.torch_cuda_status()
    assert not ok and "tessera[gpu]" in why


def test_gpu_without_cuda_is_not_the_torch_provider():
    """Without CUDA, "gpu" is the OpenCL GPU path; its refusal names both reasons."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: 'gpu' is the torch provider here")
    from sw_driver.providers import GPUProvider

    try:
        gpu = GPUProvider()
    except ProviderUnavailableError as exc:
        assert "no GPU" in str(exc) and "no CUDA device" in str(exc)
    else:
        assert not isinstance(gpu, TorchProvider)


def test_gpu_without_cuda_or_pyopencl_names_both(monkeypatch):
    """A runtime-only machine without CUDA and without pyopencl: the refusal says both."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: 'gpu' is the torch provider here")
    from sw_driver.providers import GPUProvider, opencl

    monkeypatch.setattr(opencl, "_IMPORT_ERROR", ImportError("pyopencl is not installed"))
    with pytest.raises(ProviderUnavailableError) as refusal:
        GPUProvider()
    message = str(refusal.value)
    assert "no GPU" in message and "no CUDA device" in message
    assert "pyopencl is not installed" in message


def test_the_runtime_does_not_import_torch():
    child = textwrap.dedent("""
        import sys
        import numpy as np
        import sw_driver.providers
        from models.zoo import DIGITS_QDQ
        from sw_driver import InferenceSession
        session = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
        session.run(None, {"input": np.zeros((1, 1, 8, 8), np.float32)})
        assert "torch" not in sys.modules, "the runtime imported torch"
    """)
    subprocess.run([sys.executable, "-c", child], check=True)
