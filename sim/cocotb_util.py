"""Shared pieces of the cocotb testbenches: clock and reset, a cycle counter, and a stream
driver and receiver that follow the valid/ready rules (sample in the read-only phase,
transfer on the edge)."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer


class CycleCounter:
    """Counts rising edges of ``dut.clk`` from when it is started."""

    def __init__(self, dut):
        self.dut, self.value = dut, 0

    async def run(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.value += 1


#: The array clock's period (ns) where a design has one (a double-pumped array,
#: ``hw.double_pumped``): twice the 100 MHz design clock, its edges between the design
#: clock's (the crossings need no phase relation; this keeps the two from coinciding).
ARRAY_CLOCK_NS = 5


async def clock_and_reset(dut, idle_inputs):
    """Start a 100 MHz clock (and the array's at twice that, on a design with one), hold the
    inputs named in ``idle_inputs`` low, reset for three cycles; returns a running
    :class:`CycleCounter`."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    array_clock = getattr(dut, "array_clk", None)
    if array_clock is not None:
        await Timer(1, unit="ns")
        cocotb.start_soon(Clock(array_clock, ARRAY_CLOCK_NS, unit="ns").start())
        dut.array_rst.value = 1
    for name in idle_inputs:
        getattr(dut, name).value = 0
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    if array_clock is not None:
        dut.array_rst.value = 0
    counter = CycleCounter(dut)
    cocotb.start_soon(counter.run())
    return counter


def testbench_seed():
    """The seed the runner gave this simulation (``TESSERA_SEED``; 1 when run by hand)."""
    return int(os.environ.get("TESSERA_SEED", "1"))


def _stream(dut, port):
    return (getattr(dut, f"{port}__{name}") for name in ("valid", "payload", "ready"))


async def send_stream(dut, port, words, *, rng=None, idle=0.0, accepted=None):
    """Drive the payload integers ``words`` into stream ``port``, one per handshake, idle
    cycles between beats with probability ``idle``; ``accepted(index)`` is called as each
    beat transfers."""
    valid, payload, ready = _stream(dut, port)
    for index, word in enumerate(words):
        while idle and rng.random() < idle:
            valid.value = 0
            await RisingEdge(dut.clk)
        payload.value = int(word)
        valid.value = 1
        while True:
            await ReadOnly()
            taken = bool(ready.value)
            await RisingEdge(dut.clk)
            if taken:
                break
        if accepted is not None:
            accepted(index)
    valid.value = 0


async def receive_stream(dut, port, count, *, rng=None, stall=0.0, received=None):
    """Accept ``count`` beats from stream ``port`` (``ready`` low with probability
    ``stall``); returns their payload integers. ``received(word)`` is called per beat."""
    valid, payload, ready = _stream(dut, port)
    words = []
    while len(words) < count:
        ready.value = 0 if stall and rng.random() < stall else 1
        await ReadOnly()
        if valid.value and ready.value:
            words.append(payload.value.to_unsigned())
            if received is not None:
                received(words[-1])
        await RisingEdge(dut.clk)
    ready.value = 0
    return words


def first_difference(got, want):
    """Text naming the first index where ``got`` and ``want`` differ, with both values."""
    index = tuple(int(i) for i in np.argwhere(np.asarray(got) != np.asarray(want))[0])
    return f"first difference at {list(index)}: RTL {got[index]} != golden {want[index]}"


class StreamMonitor:
    """A passive watcher of stream ``port``: records every transfer and fails the test on
    a broken handshake rule (``valid`` dropped, or the payload changed, before ``ready``
    took the beat). It drives nothing; start it with ``cocotb.start_soon(monitor.run())``."""

    def __init__(self, dut, port):
        self.dut, self.port, self.beats, self.errors = dut, port, [], []
        self.valid, self.payload, self.ready = _stream(dut, port)

    async def run(self):
        offered = None  # the payload offered and not yet taken
        while True:
            await ReadOnly()
            cycle_valid = bool(self.valid.value)
            if offered is not None and not cycle_valid:
                self.errors.append(f"{self.port}: valid dropped before the beat was taken")
            if cycle_valid:
                payload = self.payload.value.to_unsigned()
                if offered is not None and payload != offered:
                    self.errors.append(f"{self.port}: payload changed from {offered:#x} to "
                                       f"{payload:#x} while waiting for ready")
                if self.ready.value:
                    self.beats.append(payload)
                    offered = None
                else:
                    offered = payload
            else:
                offered = None
            await RisingEdge(self.dut.clk)

    def check(self):
        assert not self.errors, "; ".join(self.errors[:3])
