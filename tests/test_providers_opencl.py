"""The "opencl" and "gpu" providers of ``InferenceSession`` against the "cpu" provider.

The CPU provider is the golden model, so the contract is identity: every test model of
``tests/qdq_models.py`` gives float outputs equal bit for bit (``np.array_equal``) on both,
at batch 1 and 5, with every layer placed on OpenCL. Also checked: weights uploaded once per
session, one read back (one wait) per run for a model that runs wholly on the device, no
new device buffer after the first run, mixed placements, the profile's bytes, and the
fallback to the CPU with a warning when OpenCL cannot be used at all.

The "gpu" identity test is skipped, saying so, on a machine without an OpenCL GPU; the
"no GPU" error itself is tested everywhere else.
"""

import numpy as np
import pyopencl as cl
import pytest
import qdq_models
from assertions import assert_exact

from sw_driver import InferenceSession
from sw_driver.errors import ProviderUnavailableError
from sw_driver.opencl import (
    DeviceNotFoundError,
    DeviceOutOfMemoryError,
    KernelBuildError,
    NoPlatformError,
    OpenCLRuntime,
)
from sw_driver.providers import (
    GPUProvider,
    OpenCLGPUProvider,
    OpenCLProvider,
    Refusal,
    TorchProvider,
    make_provider,
)
from sw_driver.providers import opencl as opencl_module
from sw_driver.providers.torch_provider import torch_cuda_status

MODEL_SEEDS = {"lenet": 101, "residual": 202, "separable": 303}
FLOAT_EDGE = {"Quantize", "Dequantize", "Softmax"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every test model built and quantized once: name -> (float model, QDQ path, shape)."""
    tmp = tmp_path_factory.mktemp("qdq")
    return {name: qdq_models.build(name, seed, tmp) for name, seed in MODEL_SEEDS.items()}


@pytest.fixture(scope="module")
def provider():
    """One OpenCL provider for the module (the program is built once per device anyway)."""
    return OpenCLProvider()


def _inputs(shape, batch, seed):
    return np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)


def assert_identical(got, want, what):
    """Bit-for-bit equality, dtype included."""
    assert_exact(got, want, what, names=("opencl", "cpu"), same_dtype=True)


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("name", list(MODEL_SEEDS))
def test_identical_to_cpu(built, name, batch, seed):
    _, path, shape = built[name]
    x = _inputs(shape, batch, seed)
    what = f"model={name} model_seed={MODEL_SEEDS[name]} input_seed={seed} batch={batch}"
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    session = InferenceSession(path, providers=["opencl"])
    assert session.get_providers() == ["opencl", "cpu"]  # cpu appended, as in onnxruntime
    for attempt in ("first run", "second run"):  # the second one uses the cached weights
        (got,) = session.run(None, {"x": x})
        assert_identical(got, want, f"{what} {attempt}")
        profile = session.profile()
        assert [p["layer"] for p in profile] == [layer.name for layer in session.graph.layers]
        assert {p["provider"] for p in profile} == {"opencl"}, profile
        for entry in profile:
            where = "host" if entry["op"] in FLOAT_EDGE else "OpenCL"
            assert where in entry["reason"] or "view" in entry["reason"], entry


@pytest.mark.parametrize("name", list(MODEL_SEEDS))
def test_one_read_per_run_and_weights_once(built, name, provider, monkeypatch, seed):
    """Layers chain on the device: the only wait is the read before the first Dequantize."""
    _, path, shape = built[name]
    rt = provider.runtime
    counts = {"read": 0, "upload": 0}

    def counting(key, method):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return method(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(rt, "read", counting("read", rt.read))
    for upload in ("upload_conv_weights", "upload_dense_weights", "upload_depthwise_weights"):
        monkeypatch.setattr(rt, upload, counting("upload", getattr(rt, upload)))
    session = InferenceSession(path, providers=[provider])
    # upload_dense_weights calls upload_conv_weights: two counted calls per Dense layer.
    uploads = sum({"Conv": 1, "Dense": 2}.get(layer.op, 0) for layer in session.graph.layers)
    x = _inputs(shape, 3, seed)
    for run in range(3):
        session.run(None, {"x": x})
        assert counts["read"] == run + 1, f"{name}: {counts['read']} reads after {run + 1} runs"
    assert counts["upload"] == uploads, f"{name}: weights uploaded more than once: {counts}"


def test_no_new_device_buffers_after_first_run(built, provider, monkeypatch, seed):
    _, path, shape = built["residual"]
    session = InferenceSession(path, providers=[provider])
    x = _inputs(shape, 4, seed)
    (first,) = session.run(None, {"x": x})
    made = []
    real = cl.Buffer

    def counting_buffer(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cl, "Buffer", counting_buffer)
    for _ in range(3):
        (again,) = session.run(None, {"x": x})
        assert_identical(again, first, f"residual input_seed={seed} repeated run")
    assert made == [], f"{len(made)} device buffers allocated after the first run"


def test_profile_reports_bytes_moved(built, seed):
    _, path, shape = built["residual"]
    batch = 5
    session = InferenceSession(path, providers=["opencl"])
    x = _inputs(shape, batch, seed)
    for run in range(2):
        session.run(None, {"x": x})
        by_name = {p["layer"]: p for p in session.profile()}
        layers = {layer.name: layer for layer in session.graph.layers}
        image = batch * int(np.prod(shape))
        stem = layers["stem"].weight
        weights = stem.nbytes + 12 * stem.shape[0] if run == 0 else 0
        # int8 image up, plus the stem's weights and tables on the first run only.
        assert by_name["stem"]["bytes"] == image + weights
        assert by_name["body1"]["bytes"] == (0 if run else layers["body1"].weight.nbytes
                                             + 12 * layers["body1"].weight.shape[0])
        assert by_name["residual_add"]["bytes"] == 0 and by_name["flatten"]["bytes"] == 0
        assert by_name["y_DequantizeLinear"]["bytes"] == batch * 10  # int8 logits back
        assert all(p["seconds"] >= 0 for p in by_name.values())


def test_mixed_placement_reads_back_where_needed(built, monkeypatch, seed):
    """OpenCL declines GlobalAveragePool: the CPU runs it between two OpenCL layers."""
    _, path, shape = built["lenet"]
    real = OpenCLProvider.supports

    def declines_gap(self, layer, shape=None):
        if layer.op == "GlobalAveragePool":
            return Refusal("declined by the test")
        return real(self, layer, shape)

    monkeypatch.setattr(OpenCLProvider, "supports", declines_gap)
    x = _inputs(shape, 5, seed)
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    session = InferenceSession(path, providers=["opencl", "cpu"])
    (got,) = session.run(None, {"x": x})
    assert_identical(got, want, f"lenet mixed placement input_seed={seed}")
    placed = {p["layer"]: p["provider"] for p in session.profile()}
    assert placed["gap"] == "cpu" and placed["conv2"] == "opencl" and placed["fc"] == "opencl"
    by_name = {p["layer"]: p for p in session.profile()}
    assert by_name["conv2"]["bytes"] > 0  # read back for the CPU
    assert "declined by the test" in by_name["gap"]["reason"]


# ------------------------------------------------------------------ fallback

@pytest.mark.parametrize("error", [NoPlatformError("no OpenCL platform is installed"),
                                   KernelBuildError("OpenCL program failed to build"),
                                   DeviceOutOfMemoryError("the OpenCL device ran out of memory")],
                         ids=["no-platform", "kernel-build", "out-of-memory"])
def test_falls_back_to_cpu_with_a_warning(built, monkeypatch, error, seed):
    def broken(device=None):
        raise error

    monkeypatch.setattr(opencl_module, "OpenCLRuntime", broken)
    _, path, shape = built["separable"]
    x = _inputs(shape, 2, seed)
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    with pytest.warns(RuntimeWarning, match="'opencl' is unavailable") as caught:
        session = InferenceSession(path, providers=["opencl", "cpu"])
    assert str(error) in str(caught[0].message)
    assert session.get_providers() == ["cpu"]
    (got,) = session.run(None, {"x": x})
    assert_identical(got, want, f"fallback {type(error).__name__}")
    assert {p["provider"] for p in session.profile()} == {"cpu"}

    with pytest.raises(ProviderUnavailableError, match=str(error)) as info:
        InferenceSession(path, providers=["opencl"])
    assert info.value.__cause__ is error


def test_missing_device_falls_back_or_lists_devices(built, monkeypatch):
    monkeypatch.setenv("TESSERA_OPENCL_DEVICE", "no-such-device")
    _, path, _ = built["lenet"]
    with pytest.warns(RuntimeWarning, match="no-such-device"):
        session = InferenceSession(path, providers=["opencl", "cpu"])
    assert session.get_providers() == ["cpu"]
    with pytest.raises(ProviderUnavailableError, match="no-such-device") as info:
        InferenceSession(path, providers=["opencl"])
    assert "Available" in str(info.value) and "TESSERA_OPENCL_DEVICE" in str(info.value)
    assert isinstance(info.value.__cause__, DeviceNotFoundError)


def test_device_option_overrides_the_environment(monkeypatch):
    """The variable is the session's fallback for a missing option (options.py); the
    provider and the runtime built directly read no environment."""
    monkeypatch.setenv("TESSERA_OPENCL_DEVICE", "no-such-device")
    name = OpenCLRuntime("0:0").device_name
    assert OpenCLProvider(device="0:0").device_name == name
    assert make_provider("opencl", OpenCLProvider, {"device": "0:0"}).device_name == name
    assert OpenCLProvider().device_name == OpenCLRuntime().device_name
    with pytest.raises(ProviderUnavailableError, match="no-such-device") as info:
        make_provider("opencl", OpenCLProvider)
    assert "from $TESSERA_OPENCL_DEVICE" in str(info.value)


# ------------------------------------------------------------------ gpu

def _gpu_or_reason():
    # The OpenCL path by name: where PyTorch sees CUDA, GPUProvider() is the torch provider.
    try:
        return OpenCLGPUProvider(), None
    except ProviderUnavailableError as exc:
        return None, str(exc)


def test_gpu_without_a_gpu_says_so(built):
    gpu, reason = _gpu_or_reason()
    if gpu is not None:
        assert gpu.runtime.device.type & cl.device_type.GPU
        return
    assert "no GPU" in reason
    _, path, _ = built["lenet"]
    if torch_cuda_status()[0]:  # "gpu" in a session is the torch provider on CUDA here
        assert isinstance(GPUProvider(), TorchProvider)
        return
    with pytest.raises(ProviderUnavailableError, match="no GPU"):
        InferenceSession(path, providers=["gpu"])
    with pytest.warns(RuntimeWarning, match="no GPU"):
        assert InferenceSession(path, providers=["gpu", "cpu"]).get_providers() == ["cpu"]


@pytest.mark.parametrize("name", list(MODEL_SEEDS))
def test_gpu_identical_to_cpu(built, name, seed):
    gpu, reason = _gpu_or_reason()
    if gpu is None:
        pytest.skip(f"no OpenCL GPU on this machine, so the 'gpu' provider cannot run: "
                    f"{reason.splitlines()[0]}")
    _, path, shape = built[name]
    x = _inputs(shape, 5, seed)
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    session = InferenceSession(path, providers=[gpu])
    (got,) = session.run(None, {"x": x})
    assert_identical(got, want, f"gpu model={name} input_seed={seed}")
    assert {p["provider"] for p in session.profile()} == {"gpu"}


@pytest.mark.parametrize("name", ["digits", "resnet8", "dwsep"])
def test_zoo_models_identical_to_cpu(zoo, name, seed):
    """Every zoo model through providers=["opencl"] gives the CPU provider's outputs."""
    from models.zoo import load_digits_split, random_models

    rng = np.random.default_rng(seed)
    if name == "digits":
        x = load_digits_split()[2][rng.choice(450, 16, replace=False)]
    else:
        x = random_models.random_inputs(rng, 4)
    feeds = {"input": x}
    (want,) = InferenceSession(zoo[name], providers=["cpu"]).run(None, feeds)
    session = InferenceSession(zoo[name], providers=["opencl"])
    (got,) = session.run(None, feeds)
    assert_identical(got, want, f"zoo {name}, seed={seed}")
    assert {e["provider"] for e in session.profile()} == {"opencl"}
