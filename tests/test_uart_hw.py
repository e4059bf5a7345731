# amaranth: UnusedElaboratable=no
# (the parameter-check tests build components that raise before they can be used)
"""The bit-level UART (hw/uart.py) in Amaranth's simulator: a transmitter looped into a
receiver at a small divisor, the bit timing on the wire, framing errors and overruns."""

import pytest
from amaranth import Module
from amaranth.sim import Simulator

from hw.uart import UartRx, UartTx
from sim.streams import stream_get, stream_put

DIVISOR = 5


def loopback():
    m = Module()
    m.submodules.tx = tx = UartTx(divisor=DIVISOR)
    m.submodules.rx = rx = UartRx(divisor=DIVISOR)
    m.d.comb += rx.rx.eq(tx.tx)
    return m, tx, rx


def test_loopback_random_bytes(rng, seed):
    m, tx, rx = loopback()
    data = [int(b) for b in rng.integers(0, 256, 40)]
    got = []

    async def sender(ctx):
        for byte in data:
            await stream_put(ctx, tx.data, byte)

    async def receiver(ctx):
        for _ in data:
            got.append(await stream_get(ctx, rx.data))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(sender)
    sim.add_testbench(receiver)
    sim.run_until(1e-8 * DIVISOR * 10 * (len(data) + 4))
    assert got == data, f"seed={seed}: sent {data}, received {got}"


def test_tx_bit_timing():
    tx = UartTx(divisor=DIVISOR)
    levels = []

    async def bench(ctx):
        await stream_put(ctx, tx.data, 0b1010_0011)
        for _ in range(DIVISOR * 11):
            levels.append(ctx.get(tx.tx))
            await ctx.tick()

    sim = Simulator(tx)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    bits = levels[DIVISOR // 2::DIVISOR][:10]  # mid-bit samples
    assert bits == [0, 1, 1, 0, 0, 0, 1, 0, 1, 1], f"line levels {levels}"


def drive_character(ctx, rx, bits):
    async def run():
        for bit in bits:
            ctx.set(rx.rx, bit)
            await ctx.tick().repeat(DIVISOR)
        ctx.set(rx.rx, 1)
    return run()


def test_framing_error_and_overrun_are_counted():
    rx = UartRx(divisor=DIVISOR)
    seen = {}

    async def bench(ctx):
        # 0x55 with a low stop bit: dropped, counted; then the line idles.
        await drive_character(ctx, rx, [0, 1, 0, 1, 0, 1, 0, 1, 0, 0])
        await ctx.tick().repeat(DIVISOR * 3)
        # Two good characters nobody takes: the second is an overrun.
        for byte in (0x12, 0x34):
            await drive_character(ctx, rx, [0, *((byte >> i) & 1 for i in range(8)), 1])
        await ctx.tick().repeat(DIVISOR * 2)
        seen["framing"] = ctx.get(rx.framing_errors)
        seen["overruns"] = ctx.get(rx.overruns)
        seen["byte"] = ctx.get(rx.data.payload) if ctx.get(rx.data.valid) else None

    sim = Simulator(rx)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"framing": 1, "overruns": 1, "byte": 0x12}


@pytest.mark.parametrize("cls", [UartRx, UartTx])
def test_divisor_is_checked(cls):
    with pytest.raises(ValueError, match="divisor must be an integer >= 2 .* not 1"):
        cls(divisor=1)
