"""The "sim" (Verilator twin) and "pcie" providers against the "cpu" provider.

The contract is identity: float outputs equal bit for bit (``np.array_equal``) with every
Conv and Dense layer the engine can run placed on the accelerator. The twin tests share one
4x4 twin (built once, cached under build/twin/) and are marked slow; the "pcie" discovery
and fallback tests use ordinary files and run everywhere.
"""

import numpy as np
import pytest
import qdq_models
from assertions import assert_exact
from onnx import helper

from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.errors import ProviderUnavailableError
from sw_driver.providers import CPUProvider, PCIeProvider, SimProvider
from sw_driver.providers.costs import CostModel, device_work

#: Small enough to build quickly, large enough for the digits CNN's conv2 (1152 weight
#: words) and the test models; activations up to 2048 bytes per image.
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
MODEL_SEEDS = {"lenet": 101, "residual": 202, "separable": 303}
ACCELERATED = {"Conv", "Dense", "MaxPool", "GlobalAveragePool", "Add"}


@pytest.fixture(scope="module")
def sim():
    provider = SimProvider(CONFIG, log=lambda message: None)
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qdq")
    models = {name: qdq_models.build(name, seed, tmp) for name, seed in MODEL_SEEDS.items()}
    models["refused"] = (None, _refused_model(tmp), (4, 24, 24))
    return models


def _refused_model(tmp):
    """Conv layers the 4x4 engine refuses for two reasons, one it must split, then ones it
    runs whole."""
    rng = np.random.default_rng(7)
    w = qdq_models._weights
    nodes = [
        # 4x24x24 = 2304 activations > 2048: split into row bands at the input shape.
        qdq_models._conv("big", "x", "b", 3, (1, 1, 1, 1), stride=2),
        helper.make_node("Relu", ["b"], ["br"], name="big_relu"),
        # Dilation 2: refused by the engine whatever the shape.
        helper.make_node("Conv", ["br", "dil_W", "dil_B"], ["d"], name="dil",
                         kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2]),
        # Kernel 9x9 (> 7x7).
        qdq_models._conv("wide", "d", "k9", 9, (4, 4, 4, 4)),
        qdq_models._conv("ok", "k9", "o", 3, (1, 1, 1, 1)),
        helper.make_node("Relu", ["o"], ["or"], name="ok_relu"),
        helper.make_node("GlobalAveragePool", ["or"], ["gp"], name="gap"),
        helper.make_node("Flatten", ["gp"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_W", "fc_B"], ["y"], name="fc", transB=1),
    ]
    inits = {"big_W": w(rng, 8, 4, 3, 3), "big_B": rng.standard_normal(8) * 0.1,
             "dil_W": w(rng, 8, 8, 3, 3), "dil_B": rng.standard_normal(8) * 0.1,
             "wide_W": w(rng, 8, 8, 9, 9), "wide_B": rng.standard_normal(8) * 0.1,
             "ok_W": w(rng, 8, 8, 3, 3), "ok_B": rng.standard_normal(8) * 0.1,
             "fc_W": w(rng, 10, 8), "fc_B": rng.standard_normal(10) * 0.1}
    model = qdq_models.float_model(nodes, ["N", 4, 24, 24], ["N", 10], inits, "refused")
    return qdq_models.quantize(model, (4, 24, 24), 8, tmp)


def assert_identical(got, want, what):
    """Bit-for-bit equality, dtype included."""
    assert_exact(got, want, what, names=("sim", "cpu"), same_dtype=True)


def _on(session, provider_name):
    return {layer.name for layer, provider, _ in session._placement
            if provider.name == provider_name}


@pytest.mark.slow
def test_digits_identical_to_cpu(sim):
    _, _, x, labels = load_digits_split()
    x = x[:32]
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": x})
    session = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
    assert _on(session, "sim") == {"conv1", "pool1", "conv2", "gap", "fc"}
    (got,) = session.run(None, {"input": x})
    assert_identical(got, want, "digits, 32 test images")
    for entry in session.profile():
        if entry["layer"] == "pool1":  # computed in conv1's pass
            assert (entry["provider"], entry["cycles"], entry["bytes"]) == ("sim", 0, 0)
            assert "fused into 'conv1'" in entry["reason"], entry
        elif entry["provider"] == "sim":
            assert entry["cycles"] > 0 and entry["bytes"] > 0, entry
            assert "Verilator twin" in entry["reason"], entry
        else:
            assert "cycles" not in entry and entry["bytes"] == 0, entry
            assert entry["reason"].startswith("sim declined: "), entry


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", list(MODEL_SEEDS))
def test_test_models_identical_to_cpu(sim, built, name, batch, seed):
    _, path, shape = built[name]
    x = np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)
    what = f"model={name} model_seed={MODEL_SEEDS[name]} input_seed={seed} batch={batch}"
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    session = InferenceSession(path, providers=[sim, "cpu"])
    accelerated = {layer.name for layer in session.graph.layers if layer.op in ACCELERATED}
    assert _on(session, "sim") == accelerated, what
    (got,) = session.run(None, {"x": x})
    assert_identical(got, want, what)


@pytest.mark.slow
def test_fused_pool_falling_back_gets_the_full_conv_output(sim, monkeypatch):
    """conv1 runs fused with pool1; when pool1 then fails on the device and falls back to
    the CPU, the CPU is given conv1's whole output (the golden model's), not the pooled."""
    from sw_driver.errors import DeviceError

    _, _, x, _ = load_digits_split()
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": x[:3]})
    session = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
    real = sim.run

    def pool_fails(layer, inputs):
        if layer.name == "pool1":
            raise DeviceError("stand-in fault on pool1")
        return real(layer, inputs)

    monkeypatch.setattr(sim, "run", pool_fails)
    (got,) = session.run(None, {"input": x[:3]})
    assert_identical(got, want, "digits, pool1 fused then fallen back")
    profile = {entry["layer"]: entry for entry in session.profile()}
    assert profile["pool1"]["provider"] == "cpu" and profile["conv1"]["provider"] == "sim"


@pytest.mark.slow
def test_max_pool_and_add_layers_identical_to_cpu(sim, seed):
    """Provider level, in one sequence on one twin: a pool with an odd height (its last row
    is in no window; sent, it stayed in the stream and spoiled the next pass), then Adds of
    two tensors and of a broadcast constant, then a pool too wide for the device."""
    from sw_driver import graph as g
    from sw_driver.providers import CPUProvider

    rng = np.random.default_rng(seed)
    cpu = CPUProvider()
    pool = g.MaxPool("pool", ("x",), "y", kernel=(2, 2), stride=(2, 2))
    add = g.Add("add", ("a", "b"), "y", a_scale=0.05, a_zero_point=3, b_scale=0.02,
                b_zero_point=-128, y_scale=0.07, y_zero_point=-4, lo=-4)
    constant = g.Add("addc", ("a",), "y", a_scale=0.03, b_scale=0.5, y_scale=0.1,
                     constant=rng.integers(-128, 128, (6, 1, 1), dtype=np.int8))
    int8 = lambda *shape: rng.integers(-128, 128, shape, dtype=np.int8)  # noqa: E731
    cases = [(pool, [int8(2, 6, 7, 9)]), (add, [int8(2, 5, 3, 3), int8(2, 5, 3, 3)]),
             (constant, [int8(1, 6, 4, 5)]), (pool, [int8(1, 4, 8, 8)])]
    for layer, inputs in cases:
        assert sim.supports(layer, inputs[0].shape) is None, layer.name
        assert_identical(sim.run(layer, inputs), cpu.run(layer, inputs),
                         f"{layer.name} on {[list(x.shape) for x in inputs]}, seed={seed}")
        assert sim.cycles(layer) > 0 and sim.bytes_moved(layer, inputs, None) > 0
    width = sim.accelerator.pool_max_width
    refusal = sim.supports(pool, (1, 4, 4, width + 2))
    assert f"2 to {width} wide (POOL_MAX_WIDTH)" in str(refusal)


@pytest.mark.slow
def test_refused_layers_fall_back_with_a_reason(sim, built, seed):
    _, path, shape = built["refused"]
    x = np.random.default_rng(seed).standard_normal((2, *shape)).astype(np.float32)
    (want,) = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})
    session = InferenceSession(path, providers=[sim, "cpu"])
    (got,) = session.run(None, {"x": x})
    assert_identical(got, want, f"refused model, input_seed={seed}")
    profile = {entry["layer"]: entry for entry in session.profile()}
    # "big" exceeds the activation buffer and runs split into row bands.
    assert {name for name, e in profile.items() if e["provider"] == "sim"} == \
        {"ok", "gap", "fc", "big"}
    assert "dilation (2, 2) is not supported" in profile["dil"]["reason"]
    assert "kernel 9x9 exceeds" in profile["wide"]["reason"]
    for name in ("dil", "wide"):
        assert profile[name]["provider"] == "cpu"
        assert profile[name]["reason"].startswith("sim declined: ")


@pytest.mark.slow
def test_cycle_model_matches_the_twin(sim, monkeypatch):
    """The planner's cycles are within 10 % of the twin's PERF_CYCLES, layer by layer (as
    the planner counts them: a Conv and its MaxPool as two passes)."""
    _, _, x, _ = load_digits_split()
    fused = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
    fused.run(None, {"input": x[:4]})
    monkeypatch.setattr(sim, "fuse", False)
    session = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
    session.run(None, {"input": x[:4]})
    moved = {e["layer"]: e["bytes"] for e in session.profile()}
    # Fused, conv1 returns its 4x16x8x8 output pooled (a quarter: 3072 bytes fewer), and
    # pool1's round trip is gone.
    fused_moved = {e["layer"]: e["bytes"] for e in fused.profile()}
    assert (fused_moved["conv1"], fused_moved["pool1"]) == (moved["conv1"] - 3072, 0)
    layers = {layer.name: layer for layer in session.graph.layers}
    shapes = {"conv1": (4, 1, 8, 8), "pool1": (4, 16, 8, 8), "conv2": (4, 16, 4, 4),
              "gap": (4, 32, 4, 4), "fc": (4, 32)}
    for entry in session.profile():
        if entry["provider"] == "sim":
            model = device_work(layers[entry["layer"]], shapes[entry["layer"]], CONFIG)
            assert abs(model.cycles - entry["cycles"]) <= 0.1 * entry["cycles"], \
                (entry["layer"], model.cycles, entry["cycles"])
            assert model.bytes == entry["bytes"], (entry["layer"], model, entry["bytes"])


@pytest.mark.slow
def test_pcie_provider_on_the_twin_by_cost(sim):
    """The "pcie" provider's code over the twin's transport: the tiny digits layers stay on
    the CPU by default; with a slow CPU model they run on the device, identically."""
    _, _, x, _ = load_digits_split()
    x = x[:5]
    pcie = PCIeProvider(transport=sim.transport.inner)
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": x})
    session = InferenceSession(DIGITS_QDQ, providers=[pcie, "cpu"])
    assert _on(session, "pcie") == set()
    slow_cpu = CPUProvider(costs=CostModel(cpu_macs_per_second=1e5))
    session = InferenceSession(DIGITS_QDQ, providers=[pcie, slow_cpu])
    assert _on(session, "pcie") == {"conv1", "conv2", "fc"}
    (got,) = session.run(None, {"input": x})
    assert_identical(got, want, "digits on pcie-over-twin")
    assert {e["layer"] for e in session.profile() if e.get("cycles")} == \
        {"conv1", "conv2", "fc"}


# ---------------------------------------------------------------- pcie without a card

def test_pcie_without_devices_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_XDMA", str(tmp_path / "xdma7"))
    with pytest.raises(ProviderUnavailableError, match=r"no XDMA device at .*xdma7 .*"
                       r"xdma7_user, .*xdma7_h2c_0, .*xdma7_c2h_0 do not exist"):
        InferenceSession(DIGITS_QDQ, providers=["pcie"])
    # The prefix option wins over the environment.
    with pytest.raises(ProviderUnavailableError, match="xdma9"):
        InferenceSession(DIGITS_QDQ, providers=[("pcie", {"prefix": str(tmp_path / "xdma9")})])
    with pytest.raises(ProviderUnavailableError, match="xdma9"):
        PCIeProvider(str(tmp_path / "xdma9"))


def test_pcie_falls_back_to_cpu_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_XDMA", str(tmp_path / "xdma0"))
    _, _, x, _ = load_digits_split()
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": x[:8]})
    with pytest.warns(RuntimeWarning, match="'pcie' is unavailable.*no XDMA device"):
        session = InferenceSession(DIGITS_QDQ, providers=["pcie", "cpu"])
    assert session.get_providers() == ["cpu"]
    (got,) = session.run(None, {"input": x[:8]})
    assert_identical(got, want, "pcie fallback")
    with pytest.raises(ProviderUnavailableError, match="no XDMA device"):
        InferenceSession(DIGITS_QDQ, providers=["pcie"])


@pytest.mark.parametrize("user, message", [
    (b"", "short CSR read"),
    (bytes(1024), r"ID register reads 0x00000000"),
], ids=["empty", "zeros"])
def test_pcie_files_that_are_no_accelerator(tmp_path, user, message):
    """Ordinary files stand in for the devices: they open, but no accelerator answers."""
    prefix = tmp_path / "xdma0"
    for suffix, data in (("_user", user), ("_h2c_0", b""), ("_c2h_0", b"")):
        (tmp_path / f"xdma0{suffix}").write_bytes(data)
    with pytest.raises(ProviderUnavailableError,
                       match=f"no Tessera accelerator at {prefix}: .*{message}"):
        PCIeProvider(str(prefix))


@pytest.fixture(scope="module")
def random_zoo(tmp_path_factory):
    from models.zoo import random_models

    out = tmp_path_factory.mktemp("zoo")
    return {name: random_models.build(name, out) for name in random_models.MODELS}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet8", "dwsep"])
def test_random_zoo_models_on_the_twin_match_cpu(sim, random_zoo, name, seed):
    """Every zoo model: the twin and the CPU provider give identical outputs (the layers
    too large for this small twin's buffers run split into passes)."""
    from models.zoo import random_models

    _, qdq_path = random_zoo[name]
    x = random_models.random_inputs(np.random.default_rng(seed), 2)
    (want,) = InferenceSession(qdq_path, providers=["cpu"]).run(None, {"input": x})
    session = InferenceSession(qdq_path, providers=[sim, "cpu"])
    (got,) = session.run(None, {"input": x})
    assert_identical(got, want, f"zoo {name}, input_seed={seed}")
    on_twin = [entry["layer"] for entry in session.profile() if entry["provider"] == "sim"]
    assert len(on_twin) >= 4, f"expected the convolutions on the twin, got {on_twin}"
