"""The planner (``sw_driver/planner.py``) and the providers' cost models
(``sw_driver/providers/costs.py``) without a device: shapes, the cycle and link model, and
placement by cost and by order.

The "pcie" provider here runs over :class:`Registers`, a transport that answers only the
discovery registers of an 8x8 engine, so its estimates are the real ones and nothing runs.
The model's agreement with the twin's cycle counters is in ``test_providers_sim.py``.
"""

from dataclasses import replace

import numpy as np
import pytest
from fake_device import Registers

from models.zoo import DIGITS_QDQ
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.importer import import_model
from sw_driver.planner import Planner
from sw_driver.providers import CPUProvider, PCIeProvider, Provider, Refusal
from sw_driver.providers.costs import CostModel, LinkModel, cpu_estimate, device_work
from sw_driver.providers.device import engine_refusal
from sw_driver.providers.sim import DEFAULT_CONFIG
from sw_driver.regs import Reg
from sw_driver.shapes import infer_shapes


@pytest.fixture
def pcie():
    return PCIeProvider(transport=Registers())


def conv_layer(c, o, k=3, stride=1, pad=1, groups=1, dilation=1, rng=None):
    rng = rng or np.random.default_rng(0)
    return g.Conv(f"conv{c}x{o}k{k}", ("x",), "y",
                  weight=rng.integers(-127, 128, (o, c // groups, k, k), dtype=np.int8),
                  bias=np.zeros(o, np.int32), x_zero_point=-128,
                  multiplier=np.full(o, 1 << 30), shift=np.full(o, 20), y_zero_point=-128,
                  stride=(stride, stride), padding=(pad,) * 4,
                  dilation=(dilation, dilation), groups=groups)


def one_layer_graph(layer, shape):
    return g.Graph(layers=[layer], inputs=[g.TensorInfo("x", ["N", *shape], "tensor(int8)")],
                   outputs=[g.TensorInfo("y", None)])


def test_shapes_of_the_digits_model():
    graph = import_model(DIGITS_QDQ)
    shapes = infer_shapes(graph, 5)
    by_layer = {layer.name: shapes[layer.output] for layer in graph.layers}
    assert by_layer["conv1"] == (5, 16, 8, 8)
    assert by_layer["pool1"] == (5, 16, 4, 4)
    assert by_layer["conv2"] == (5, 32, 4, 4)
    assert by_layer["gap"] == (5, 32, 1, 1)
    assert by_layer["flatten"] == (5, 32)
    assert by_layer["fc"] == (5, 10)


def test_device_work_counts_the_drivers_passes():
    layer = conv_layer(16, 32)
    one = device_work(layer, (1, 16, 4, 4), DEFAULT_CONFIG)
    # 2 pixel groups x 4 column tiles x K = 144: the array's beats, plus loading.
    assert one.passes == 1 and one.cycles > 2 * 4 * 144
    assert device_work(layer, (3, 16, 4, 4), DEFAULT_CONFIG).cycles == 3 * one.cycles
    dense = g.Dense("fc", ("x",), "y", weight=np.ones((10, 32), np.int8),
                    bias=np.zeros(10, np.int32), multiplier=np.full(10, 1 << 30),
                    shift=np.full(10, 20))
    # The batch is the pixels of one pass until the activation buffer (16384) is full.
    assert device_work(dense, (512, 32), DEFAULT_CONFIG).passes == 1
    assert device_work(dense, (513, 32), DEFAULT_CONFIG).passes == 2


def test_shape_dependent_refusal_is_a_value_error():
    # Taller layers are split into row bands; a row too wide for the buffer is refused.
    with pytest.raises(ValueError, match="exceed the activation buffer of 16384"):
        device_work(conv_layer(64, 64), (1, 64, 8, 128), DEFAULT_CONFIG)
    assert device_work(conv_layer(64, 64), (1, 64, 32, 32), DEFAULT_CONFIG).passes > 1


@pytest.mark.parametrize("layer, message", [
    (conv_layer(4, 4, k=9, pad=4), "kernel 9x9 exceeds"),
    (conv_layer(4, 4, dilation=2, pad=2), "dilation"),
    (conv_layer(4, 8, groups=2), "groups=2"),
    # 200 output channels are split into passes; one column tile's K = 9216 is not.
    (conv_layer(1024, 8), "more than the weight buffer's 8192"),
    (g.AveragePool("pool", ("x",), "y"), "runs Conv, Dense, MatMul, 2x2 MaxPool, "
                                          "GlobalAveragePool and Add, not AveragePool"),
])
def test_engine_refusals_name_the_limit(layer, message):
    assert message in engine_refusal(layer, DEFAULT_CONFIG)


def pool_layer(kernel=2, stride=2, pad=0):
    return g.MaxPool("pool", ("x",), "y", kernel=(kernel, kernel), stride=(stride, stride),
                     padding=(pad,) * 4)


def test_max_pool_and_add_refusals_read_the_device():
    """The pool's limits come from the POOL_MAX_WIDTH register; 0 means no pool."""
    without = PCIeProvider(transport=Registers())
    assert "no max pool (its POOL_MAX_WIDTH register reads 0)" in str(
        without.supports(pool_layer()))
    registers = Registers()
    registers.values[Reg.POOL_MAX_WIDTH] = 16
    device = PCIeProvider(transport=registers)
    assert device.supports(pool_layer()) is None
    assert device.supports(pool_layer(), (1, 8, 7, 16)) is None
    assert "2x2, stride 2, no padding; not kernel (3, 3)" in str(
        device.supports(pool_layer(kernel=3)))
    wide = device.supports(pool_layer(), (1, 8, 8, 18))
    assert str(wide).startswith("at input shape [1, 8, 8, 18]: ") and "2 to 16 wide" in \
        str(wide)
    add = g.Add("add", ("a", "b"), "y", a_scale=0.1, b_scale=0.1, y_scale=0.1)
    assert device.supports(add) is None
    add.b_scale = 1e-12  # a multiplier below 2**-32: not representable
    assert "cannot be requantized" in str(device.supports(add))
    assert "Add on the adder of the 8x8 engine" in device.describe(g.Add("a", ("a",), "y"))


def test_small_pools_stay_on_the_cpu_under_pcie_defaults():
    registers = Registers()
    registers.values[Reg.POOL_MAX_WIDTH] = 128
    pcie = PCIeProvider(transport=registers)
    planner = Planner()
    [(_, provider, reason)] = planner.place(one_layer_graph(pool_layer(), (16, 8, 8)),
                                            [pcie, CPUProvider()])
    assert provider.name == "cpu" and "beats pcie est." in reason, reason
    work = device_work(pool_layer(), (1, 16, 8, 8), DEFAULT_CONFIG)
    assert (work.passes, work.h2c_bytes, work.c2h_bytes) == (1, 2 * 64 * 8, 2 * 16 * 8)


def test_unequal_strides_are_refused():
    layer = conv_layer(4, 4)
    layer.stride = (1, 2)
    assert "stride (1, 2)" in engine_refusal(layer, DEFAULT_CONFIG)


def test_tiny_layers_stay_on_the_cpu_under_pcie_defaults(pcie):
    session = InferenceSession(DIGITS_QDQ, providers=[pcie, "cpu"])
    for entry_layer, provider, reason in session._placement:
        if entry_layer.op in ("Conv", "Dense"):
            assert provider.name == "cpu", reason
            assert "beats pcie est." in reason, reason
    # The link alone (two ~55 us transfers per pass) outweighs the CPU's time.
    conv1 = session.graph.layers[1]
    estimate = pcie.estimate(conv1, (1, 1, 8, 8))
    assert estimate.seconds > 2 * LinkModel().transfer_seconds
    assert estimate.seconds > 5 * cpu_estimate(conv1, (1, 1, 8, 8), CostModel()).seconds


def test_a_large_convolution_goes_to_the_accelerator(pcie):
    layer = conv_layer(64, 64)
    planner = Planner()
    [(_, provider, reason)] = planner.place(one_layer_graph(layer, (64, 16, 16)),
                                            [pcie, CPUProvider()])
    assert provider is pcie, reason
    assert "beats cpu est." in reason and "cycles at 150 MHz" in reason
    estimates = planner.estimates[layer.name]
    assert estimates["pcie"].seconds * 2 < estimates["cpu"].seconds


def test_the_clock_and_link_are_configurable():
    layer = conv_layer(64, 64)
    graph = one_layer_graph(layer, (64, 16, 16))
    slow = PCIeProvider(transport=Registers(), clock_hz=5e6)
    [(_, provider, _)] = Planner().place(graph, [slow, CPUProvider()])
    assert provider.name == "cpu"
    fast_cpu = CPUProvider(costs=CostModel(cpu_macs_per_second=1e12))
    [(_, provider, _)] = Planner().place(graph, [PCIeProvider(transport=Registers()),
                                                fast_cpu])
    assert provider.name == "cpu"
    with pytest.raises(ValueError, match="cpu_macs_per_second"):
        CostModel(cpu_macs_per_second=0)
    with pytest.raises(ValueError, match="clock_hz"):
        PCIeProvider(transport=Registers(), clock_hz=0)


def test_batch_changes_the_estimate(pcie):
    layer = conv_layer(16, 32)
    graph = one_layer_graph(layer, (16, 4, 4))
    small, large = Planner(batch=1), Planner(batch=64)
    small.place(graph, [pcie, CPUProvider()])
    large.place(graph, [pcie, CPUProvider()])
    assert large.estimates[layer.name]["pcie"].seconds > \
        30 * small.estimates[layer.name]["pcie"].seconds
    with pytest.raises(ValueError, match="batch"):
        Planner(batch=0)


def test_activation_buffer_too_small_falls_back(pcie):
    [(_, provider, reason)] = Planner().place(
        one_layer_graph(conv_layer(64, 64), (64, 8, 128)), [pcie, CPUProvider()])
    assert provider.name == "cpu"
    assert reason.startswith("pcie declined: at input shape [1, 64, 8, 128]: ")
    assert "activation buffer" in reason


class Untimed(Provider):
    """Runs Conv without a time estimate (like "opencl")."""

    name = "untimed"

    def supports(self, layer, shape=None):
        return None if isinstance(layer, g.Conv) else Refusal("stand-in runs Conv only")

    def describe(self, layer):
        return "stand-in"

    def run(self, layer, inputs):
        raise AssertionError("placement only")


def test_without_a_time_estimate_the_order_decides(pcie):
    graph = one_layer_graph(conv_layer(64, 64), (64, 16, 16))
    [(_, provider, reason)] = Planner().place(graph, [Untimed(), pcie, CPUProvider()])
    assert provider.name == "untimed" and reason == "untimed: stand-in"
    # Without shapes (a symbolic spatial size) nothing is estimated: first that supports.
    graph.inputs = [g.TensorInfo("x", ["N", 64, "H", "W"], "tensor(int8)")]
    [(_, provider, _)] = Planner().place(graph, [pcie, CPUProvider()])
    assert provider is pcie


@pytest.mark.parametrize("shape", [(1, 16, 7, 9), (2, 5, 8, 8), (1, 8, 3, 2)])
def test_pool_work_moves_the_bytes_the_driver_sends(shape):
    """The POOL estimate counts every input pixel the driver streams, odd last row and
    column included, and one output beat per 2x2 window."""
    from sw_driver.accelerator import pool_program

    layer = g.MaxPool("pool", ("x",), "y", kernel=(2, 2), stride=(2, 2), padding=(0,) * 4)
    program = pool_program(np.zeros(shape, np.int8), DEFAULT_CONFIG)
    work = device_work(layer, shape, DEFAULT_CONFIG)
    assert (work.h2c_bytes, work.c2h_bytes) == (len(program.h2c), program.c2h_bytes), \
        (shape, work)


def test_add_work_counts_the_time_shared_adder():
    """An ADD beat of 8 pairs takes 8 cycles on the 8x8 engine with one add datapath (the
    boards' presets), 4 with the default preset's two, not its 4 words (measured on the
    twin: bench/results/utilization.json)."""
    from sw_driver.accelerator import add_program

    layer = g.Add("add", ("a", "b"), "y", a_scale=0.1, b_scale=0.1, y_scale=0.1)
    shape = (1, 16, 32, 32)
    beats = 16 * 32 * 32 // 8
    one_datapath = replace(DEFAULT_CONFIG, add_lanes=8)
    assert device_work(layer, shape, one_datapath).cycles == 75 + 8 * beats == 16_459
    work = device_work(layer, shape, DEFAULT_CONFIG)
    assert DEFAULT_CONFIG.add_lanes == 4
    assert work.cycles == 75 + 4 * beats == 8_267, work  # the twin's PERF_CYCLES
    a = np.zeros(shape, np.int8)
    program = add_program(a, a, {name: 0 for name in (
        "a_zero_point", "b_zero_point", "y_zero_point", "lo", "hi", "a_multiplier",
        "a_shift", "b_multiplier", "b_shift", "y_multiplier", "y_shift")}, DEFAULT_CONFIG)
    assert (work.h2c_bytes, work.c2h_bytes) == (len(program.h2c), program.c2h_bytes)
