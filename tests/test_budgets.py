"""The testbenches' hang budgets follow the cycle model of the configuration under test
(``sim/tb_budgets.py``), and the worst layer the random draws can make is the one
``sim/tb_conv.py``'s ``test_worst_random_layer`` runs against its budget on the RTL."""

import itertools

import numpy as np
import pytest
from test_conv_engine import RTL_CONFIGS

from bench import conv_cases
from sim.streams import run_bounded
from sim.tb_budgets import BUDGET_MARGIN, pass_budget, stretched
from sw_driver.conv_lowering import lower_conv2d
from sw_driver.cycle_model import pass_cycles


def _passes(layer, config):
    return lower_conv2d(layer["x"], layer["w"], layer["bias"], layer["multiplier"],
                        layer["shift"], x_zero_point=layer["zx"], y_zero_point=layer["zy"],
                        lo=layer["lo"], hi=layer["hi"], stride=layer["stride"],
                        padding=layer["padding"], groups=layer["groups"], config=config)


def _modelled(layer, config):
    return sum(pass_cycles(p, config) for p in _passes(layer, config))


@pytest.mark.parametrize("config", RTL_CONFIGS, ids=lambda c: c.name)
def test_worst_random_layer_is_the_slowest_draw(config, rng):
    # Every kernel, stride, channel count and depthwise choice, at the largest image and
    # batch (more pixels only add cycles) and each choice's slowest shift.
    worst = _modelled(conv_cases.worst_random_layer(rng, config.cols), config)
    cols = config.cols
    for kernel, stride, c_in, c_out, depthwise in itertools.product(
            conv_cases.KERNELS, conv_cases.STRIDES, conv_cases.IN_CHANNELS,
            conv_cases.out_channels(cols), (False, True)):
        layer = conv_cases.make_layer(
            rng, kernel=kernel, stride=stride, c_in=c_in, c_out=c_out,
            size=(max(conv_cases.HEIGHTS), max(conv_cases.WIDTHS)), depthwise=depthwise,
            batch=max(conv_cases.BATCHES), pads=(kernel // 2,) * 4)
        k = (1 if depthwise else c_in) * kernel * kernel
        layer["shift"][:] = conv_cases.centre_shift(k) + conv_cases.SHIFT_SPREAD
        cycles = _modelled(layer, config)
        assert cycles <= worst, (
            f"config={config.name}: kernel {kernel} stride {stride} {c_in}->{c_out} "
            f"depthwise={depthwise} models {cycles} cycles, more than the 'worst' layer's "
            f"{worst}")


def test_the_lean_layer_that_timed_out_gets_a_budget_from_its_requantizer(rng):
    # The draw that hung the watchdog: a 1x1 layer x(1, 3, 5, 7), w(9, 3, 1, 1) on the lean
    # 3x5 engine, given 11 040 cycles by a beat count, while its serial requantizer alone
    # needs more (5 lanes of about 40 cycles for each of 72 output beats).
    lean = next(c for c in RTL_CONFIGS if not c.pipelined)
    layer = conv_cases.make_layer(rng, kernel=1, stride=1, c_in=3, c_out=9, size=(5, 7))
    stall = 0.35
    for p in _passes(layer, lean):
        modelled = pass_cycles(p, lean)
        budget = pass_budget(p, lean, stall=stall)
        assert modelled > 11_040
        assert budget >= BUDGET_MARGIN * stretched(modelled, stall), (budget, modelled)


def test_budgets_grow_with_stalls_and_refuse_impossible_rates():
    assert stretched(1000, 0.0) == 1000
    assert stretched(1000, 0.5) == 2000
    for bad in (1.0, -0.1, 2):
        with pytest.raises(ValueError, match=f"stall must be in \\[0, 1\\), not {bad!r}"):
            stretched(1000, bad)


def test_the_random_sweep_draws_only_from_the_stated_choices(rng):
    for index in range(24):
        layer = conv_cases.draw_random_layer(rng, index, 5)
        n, c_in, _, _ = layer["x"].shape
        assert layer["w"].shape[2] == conv_cases.KERNELS[index % 4]
        assert n in conv_cases.BATCHES and c_in in conv_cases.IN_CHANNELS
        assert layer["stride"] in conv_cases.STRIDES
        if layer["groups"] == 1:
            assert layer["w"].shape[0] in conv_cases.out_channels(5)
        assert np.all(layer["shift"] <= conv_cases.centre_shift(c_in * 49)
                      + conv_cases.SHIFT_SPREAD)


def _counter_sim():
    from amaranth import Module, Signal
    from amaranth.sim import Simulator

    m = Module()
    count = Signal(8)
    m.d.sync += count.eq(count + 1)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    return sim, count


def test_run_bounded_stops_when_the_testbench_ends_and_reports_a_hang():
    sim, count = _counter_sim()
    seen = {}

    async def finishes(ctx):
        await ctx.tick().repeat(5)
        seen["count"] = ctx.get(count)

    sim.add_testbench(finishes)
    assert run_bounded(sim, 1e-3) is True
    assert seen["count"] == 5

    sim, count = _counter_sim()

    async def hangs(ctx):
        while ctx.get(count) != 300:  # an 8-bit counter never gets there
            await ctx.tick()

    sim.add_testbench(hangs)
    assert run_bounded(sim, 1e-8 * 1000) is False
