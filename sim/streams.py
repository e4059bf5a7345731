"""Async helpers for Amaranth simulator testbenches: move one beat over a stream, or make
one access on a CSR bus (``hw.csr.csr_bus_signature``), by offset or by register name."""

from contract.regmap import by_name


async def stream_put(ctx, stream, payload):
    """Offer ``payload`` on ``stream`` and return after the transfer."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Accept one beat from ``stream`` and return its payload."""
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


async def csr_write(ctx, bus, offset, value):
    """Write ``value`` to the register at ``offset``; returns after the write cycle."""
    ctx.set(bus.addr, offset)
    ctx.set(bus.w_data, value)
    ctx.set(bus.w_en, 1)
    await ctx.tick()
    ctx.set(bus.w_en, 0)


async def csr_read(ctx, bus, offset):
    """Read the register at ``offset`` (one cycle of read latency)."""
    ctx.set(bus.addr, offset)
    ctx.set(bus.r_en, 1)
    await ctx.tick()
    ctx.set(bus.r_en, 0)
    return ctx.get(bus.r_data)


def register_access(ctx, bus):
    """``(write, read)``: coroutines that write and read the register map's registers by
    name (``contract.regmap``) on ``bus``, in the testbench ``ctx``."""
    registers = by_name()

    async def write(name, value):
        await csr_write(ctx, bus, registers[name].offset, value)

    async def read(name):
        return await csr_read(ctx, bus, registers[name].offset)

    return write, read


def run_bounded(sim, deadline):
    """Run ``sim`` until its critical testbenches finish, or until ``deadline`` seconds of
    simulated time when they hang; returns whether they finished.

    ``Simulator.run_until`` always runs to its deadline, so a generous hang bound there is
    paid by every passing test too; here only a hang pays it. The watchdog is a background
    testbench, so it never keeps the simulation running by itself.
    """
    late = []

    async def watchdog(ctx):
        await ctx.delay(deadline)
        late.append(True)

    sim.add_testbench(watchdog, background=True)
    while sim.advance():
        if late:
            return False
    return True
