"""`make gpu-check`: the torch provider's device check, one JSON file, installs nothing.

On a machine with CUDA it measures the "torch" provider there; without one it runs the same
checks on PyTorch's CPU and says that the GPU figures are missing. Written to
``bench/results/gpu_check.json`` (or ``--out PATH``):

- ``device``: torch and CUDA versions, the device's name, the driver (nvidia-ml-py, where
  installed);
- ``exact``: bit-identity with the "cpu" provider on the zoo models and on random layers,
  among them the 3x3 stride-1 many-channel convolutions a library would most likely give to
  Winograd, and reductions of 1024, 1025 and 2304 products;
- ``speed``: the ResNet-8-like zoo model at batch 1, 64 and 256: images/s and latency of the
  session (layer by layer), of the whole model captured once as a CUDA graph (CUDA only),
  and of PyTorch float16 on the same architecture (channels-last, cuDNN; eager and as a
  CUDA graph) in the same run; joules per image where nvidia-ml-py reads the energy counter.
  The ``*_compiled`` figures are the provider with ``compile=True`` (requantization and
  im2col through torch.compile), whose exactness ``exact_models_compiled`` checks.

Usage: ``python scripts/gpu_check.py [--out PATH] [--quick]`` (``--quick``: fewer repeats).
"""

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCHES = (1, 64, 256)
#: The zoo models checked again with ``compile=True`` (each compiles for a while).
COMPILED_MODELS = ("digits", "resnet8", "dwsep")
SEED = 33


def _device_info(torch):
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}")
        try:
            import pynvml

            pynvml.nvmlInit()
            info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception as exc:  # optional: nvidia-ml-py may be absent
            info["driver"] = f"unknown (nvidia-ml-py: {exc})"
    else:
        info["name"] = f"CPU ({platform.processor() or platform.machine()})"
    return info


def _exact_models(provider_spec, out_dir, batch, only=None):
    from models.zoo import DIGITS_QDQ, load_digits_split, random_models
    from sw_driver import InferenceSession

    rng = np.random.default_rng(SEED)
    digits = load_digits_split()[2]
    cases = [("digits", str(DIGITS_QDQ), "ort", digits[:batch])]
    for name in random_models.MODELS:
        cases.append((name, str(random_models.build(name, out_dir)[1]), "ort",
                      random_models.random_inputs(rng, batch)))
    seq = digits[:batch].reshape(-1, 1, 8, 8)
    cases += [("vit", str(ROOT / "models/zoo/vit_qdq.onnx"), "ort", seq),
              ("vit-integer", str(ROOT / "models/zoo/vit_qdq.onnx"), "integer", seq),
              ("rowgru", str(ROOT / "models/zoo/rowgru_qdq.onnx"), "ort", seq)]
    results = {}
    for name, path, mode, x in cases:
        if only is not None and name not in only:
            continue
        cpu = InferenceSession(path, providers=["cpu"], sequence_mode=mode)
        feed = {cpu.get_inputs()[0].name: x}
        (want,) = cpu.run(None, feed)
        session = InferenceSession(path, providers=[provider_spec, "cpu"], sequence_mode=mode)
        (got,) = session.run(None, feed)
        placed = sorted({e["op"] for e in session.profile() if e["provider"] != "cpu"})
        results[name] = {"identical": bool(np.array_equal(got, want)), "batch": len(x),
                         "layers_on_provider": placed}
    return results


def _exact_layers(provider):
    from models.requant import quantize_multiplier
    from sw_driver import graph as g
    from sw_driver.providers import CPUProvider

    rng = np.random.default_rng(SEED)
    cpu = CPUProvider()
    cases = {  # name: (C, O, kernel, stride, groups, H)
        "3x3 s1 256->256 (Winograd-prone)": (256, 256, 3, 1, 1, 16),
        "3x3 s1 64->64 (Winograd-prone)": (64, 64, 3, 1, 1, 32),
        "1x1 K=1024": (1024, 64, 1, 1, 1, 8),
        "1x1 K=1025": (1025, 64, 1, 1, 1, 8),
        "3x3 K=2304": (256, 64, 3, 1, 1, 8),
        "depthwise 3x3 s2": (64, 64, 3, 2, 64, 16),
        "grouped 3x3 g=8": (64, 64, 3, 1, 8, 16),
    }
    results = {}
    for name, (c, o, k, s, groups, h) in cases.items():
        cg = c // groups
        m, n = quantize_multiplier(rng.uniform(0.5, 2, o) / (np.sqrt(cg * k * k) * 2**7))
        for zx in (-128, 127):
            layer = g.Conv(name, ("x",), "y",
                           weight=rng.integers(-128, 128, (o, cg, k, k), dtype=np.int8),
                           bias=rng.integers(-2**20, 2**20, o, dtype=np.int32),
                           x_zero_point=zx, multiplier=m, shift=n, y_zero_point=3,
                           stride=(s, s), padding=(k // 2,) * 4, groups=groups)
            x = rng.integers(-128, 128, (8, c, h, h), dtype=np.int8)
            same = np.array_equal(np.asarray(provider.run(layer, [x])), cpu.run(layer, [x]))
            results[f"{name} zx={zx}"] = bool(same)
    q = g.Quantize("q", ("x",), "y", scale=0.0371, zero_point=-5)
    xf = (rng.standard_normal((64, 3, 32, 32)) * 4).astype(np.float32)
    results["quantize"] = bool(np.array_equal(np.asarray(provider.run(q, [xf])),
                                               cpu.run(q, [xf])))
    return results


def _timed(run, sync, repeats, min_seconds):
    """Median seconds per call over ``repeats`` bursts lasting at least ``min_seconds``."""
    run()
    sync()
    times = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            run()
            calls += 1
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        times.append(elapsed / calls)
    return statistics.median(times)


def _float16_model(torch, graph, device):
    """PyTorch float16 on the same architecture: the graph's convolutions, adds, pools and
    dense layers with its int8 weights scaled by 1/128 (values do not change the speed)."""
    from sw_driver import graph as g

    F = torch.nn.functional
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    params = {}
    for layer in graph.layers:
        if isinstance(layer, (g.Conv, g.Dense)):
            params[layer.name] = torch.from_numpy(layer.weight.astype(np.float32) / 128).to(
                device, dtype)

    def forward(x):
        env = {graph.layers[0].inputs[0]: x}
        for layer in graph.layers:
            a = [env[name] for name in layer.inputs]
            if isinstance(layer, g.Conv):
                top, left = layer.padding[0], layer.padding[1]
                y = F.conv2d(a[0], params[layer.name], None, tuple(layer.stride), (top, left),
                             tuple(layer.dilation), layer.groups)
                y = F.relu(y) if layer.lo > -128 else y
            elif isinstance(layer, g.Dense):
                y = F.linear(a[0], params[layer.name])
            elif isinstance(layer, g.Add):
                y = F.relu(a[0] + a[1]) if layer.lo > -128 else a[0] + a[1]
            elif isinstance(layer, g.GlobalAveragePool):
                y = a[0].mean(dim=(2, 3), keepdim=True)
            elif isinstance(layer, g.MaxPool):
                y = F.max_pool2d(a[0], tuple(layer.kernel), tuple(layer.stride))
            elif isinstance(layer, g.Flatten):
                y = a[0].flatten(1)
            else:  # Quantize, Dequantize: the float model has none
                y = a[0]
            env[layer.output] = y
        return env[graph.outputs[0].name]

    def make(batch):
        x = torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        return lambda: forward(x), x

    return make


def _cuda_graph(torch, fn):
    """``fn`` (no arguments, static tensors) captured once as a CUDA graph; a replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        out = fn()
    return cuda_graph.replay, out


def _energy(torch):
    """A function returning the GPU's energy counter in joules, or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
    except Exception:
        return None


def _speed(torch, provider, out_dir, quick):
    from models.zoo import random_models
    from sw_driver import InferenceSession
    from sw_driver.providers import TorchProvider
    from sw_driver.providers.torch_provider import ALWAYS_CHOSEN

    cuda = provider.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    repeats, min_seconds = (3, 0.2) if quick else (5, 0.5)
    path = str(random_models.build("resnet8", out_dir)[1])
    session = InferenceSession(path, providers=[provider])
    fused = TorchProvider(provider.device, costs=ALWAYS_CHOSEN, compile=True)
    fused_session = InferenceSession(path, providers=[fused])
    float_model = _float16_model(torch, session.graph, provider.device)
    energy = _energy(torch) if cuda else None
    rng = np.random.default_rng(SEED)
    rows = {}
    for batch in BATCHES:
        x = random_models.random_inputs(rng, batch)
        timing = (sync, repeats, min_seconds)
        row = _provider_figures(torch, provider, session, energy, timing, x)
        peer = _pytorch_figures(torch, float_model(batch)[0], timing, cuda, batch)
        fused_row = _provider_figures(torch, fused, fused_session, energy, timing, x)
        row.update(peer, ratio_to_pytorch_float=_ratio(row, peer))
        row.update({f"{key}_compiled": value for key, value in fused_row.items()},
                   ratio_to_pytorch_float_compiled=_ratio(fused_row, peer))
        rows[str(batch)] = row
        print(f"batch {batch}: {json.dumps(row)}", flush=True)
    return rows


def _figures(batch, seconds, **more):
    return {"images_per_s": batch / seconds, "latency_ms": seconds * 1e3, **more}


def _provider_figures(torch, provider, session, energy, timing, x):
    """The session's and the captured whole model's images/s, and joules per image."""
    from sw_driver.providers.torch_provider import graph_runner

    sync = timing[0]
    batch, cuda = len(x), provider.device.type == "cuda"
    row = {"session": _figures(batch, _timed(lambda: session.run(None, {"input": x}),
                                             *timing))}
    runner = graph_runner(provider, session.graph)
    static = provider.kernels.upload(x)
    replay = None
    if cuda:
        try:
            replay, _ = _cuda_graph(torch, lambda: runner(static))
            row["captured"] = _figures(batch, _timed(replay, *timing), what="CUDA graph")
        except Exception as exc:
            row["captured"] = {"error": f"{type(exc).__name__}: {exc}"}
    else:
        row["captured"] = _figures(batch, _timed(lambda: runner(static), *timing),
                                   what="whole model on the device, no CUDA graph (CPU)")
    if energy is not None and replay is not None:
        start, calls, t0 = energy(), 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            replay()
            calls += 1
        sync()
        row["joules_per_image"] = (energy() - start) / (calls * batch)
    return row


def _pytorch_figures(torch, float_fn, timing, cuda, batch):
    """The peer: PyTorch's float model, eagerly and (on CUDA) as a CUDA graph."""
    row = {}
    with torch.inference_mode():
        row["pytorch_float"] = _figures(batch, _timed(float_fn, *timing),
                                        dtype="float16" if cuda else "float32")
        if cuda:
            try:
                float_replay, _ = _cuda_graph(torch, float_fn)
                row["pytorch_float_graph"] = _figures(batch, _timed(float_replay, *timing))
            except Exception as exc:
                row["pytorch_float_graph"] = {"error": f"{type(exc).__name__}: {exc}"}
    return row


def _ratio(row, peer):
    """The provider's best images/s over the peer's best."""
    best = max(row[k]["images_per_s"] for k in ("session", "captured")
               if "images_per_s" in row.get(k, {}))
    return best / max(v["images_per_s"] for v in peer.values() if "images_per_s" in v)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench/results/gpu_check.json"))
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    args = parser.parse_args(argv)
    report = {"check": "gpu-check", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import torch
    except ImportError as exc:
        report["error"] = f"PyTorch does not import ({exc}): pip install 'tessera[gpu]'"
        return _write(report, args.out, 1)
    from sw_driver.providers import TorchProvider
    from sw_driver.providers.torch_provider import ALWAYS_CHOSEN, measure_costs

    report["device"] = _device_info(torch)
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    if threads and not torch.cuda.is_available():
        # PyTorch's CPU path on the cpu provider's thread count (bench_torch does the same):
        # its default, every core, spins against other jobs on a shared machine.
        torch.set_num_threads(int(threads))
    # Every layer it can run goes to the provider under test, whatever is faster here.
    provider = TorchProvider(costs=ALWAYS_CHOSEN)
    report["provider_device"] = str(provider.device)
    try:  # the planner's calibration on this device (what a session measures on CUDA)
        report["costs"] = dataclasses.asdict(measure_costs(TorchProvider(provider.device)))
    except Exception:
        report["costs"] = {"error": traceback.format_exc()}
    if provider.device.type != "cuda":
        report["gpu_figures"] = ("missing: PyTorch sees no CUDA device here, so every figure "
                                 "below is PyTorch's CPU path")
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for key, run in (("exact_models", lambda: _exact_models(
                              ("torch", {"device": str(provider.device),
                                         "costs": ALWAYS_CHOSEN}), Path(tmp),
                              64 if provider.device.type == "cuda" else 16)),
                         ("exact_models_compiled", lambda: _exact_models(
                              ("torch", {"device": str(provider.device),
                                         "costs": ALWAYS_CHOSEN, "compile": True}),
                              Path(tmp), 64 if provider.device.type == "cuda" else 16,
                              only=COMPILED_MODELS)),
                         ("exact_layers", lambda: _exact_layers(provider)),
                         ("speed", lambda: _speed(torch, provider, Path(tmp), args.quick))):
            started = time.perf_counter()
            try:
                report[key] = run()
            except Exception:
                report[key] = {"error": traceback.format_exc()}
                status = 1
            print(f"{key}: {time.perf_counter() - started:.1f} s", flush=True)
    flags = [v["identical"] for key in ("exact_models", "exact_models_compiled")
             for v in report.get(key, {}).values() if isinstance(v, dict) and "identical" in v]
    flags += [v for v in report.get("exact_layers", {}).values() if isinstance(v, bool)]
    report["bit_exact"] = bool(flags) and all(flags)
    if not report["bit_exact"]:
        status = 1
    return _write(report, args.out, status)


def _write(report, out, status):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"gpu-check: wrote {out} (bit_exact={report.get('bit_exact')})")
    return status


if __name__ == "__main__":
    sys.exit(main())
