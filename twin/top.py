"""The accelerator top as the twin compiles it: the same core, with every input registered.

Verilator re-evaluates all logic that depends on a top-level input on every ``eval()``,
twice a cycle, and Amaranth's synchronous reset makes every register's next-state logic
depend on the ``rst`` input. Registering the reset and the other inputs (CSR port, stream
valid/payload/ready, fault line) leaves nothing for that per-``eval`` pass: all logic runs
once per clock edge. The cost is one cycle of latency on each input, which the harness
(``twin/harness/harness.cpp``) accounts for.
"""

from amaranth import ClockDomain, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.double_pumped import ARRAY_DOMAIN
from hw.resident import accelerator_top


def clock_ports(config):
    """The ports a twin top's clocks take: ``clock`` and ``reset``, and ``array_clock``
    where the array runs on its own clock (``config.array.pump`` 2; the harness drives it
    at ``config.array_clock_ratio()`` times ``clock`` when built with
    ``-DTWIN_ARRAY_CLOCK``: ``harness/array_clock.h``)."""
    ports = {"clock": In(1), "reset": In(1)}
    if config.array.pump != 1:
        ports["array_clock"] = In(1)
    return ports


def add_clock_domains(m, top, config):
    """``sync`` and ``unreset`` on ``top.clock`` (and the array's domain on
    ``top.array_clock`` where there is one), ``sync`` and the array's reset from a register
    of ``top.reset`` (why: the module docstring)."""
    m.domains.sync = sync = ClockDomain()
    m.domains.unreset = unreset = ClockDomain(reset_less=True)
    reset = Signal(init=1)
    m.d.comb += [sync.clk.eq(top.clock), unreset.clk.eq(top.clock), sync.rst.eq(reset)]
    m.d.unreset += reset.eq(top.reset)
    if config.array.pump != 1:
        array = ClockDomain(ARRAY_DOMAIN)
        m.domains += array
        m.d.comb += [array.clk.eq(top.array_clock), array.rst.eq(reset)]


class TwinTop(wiring.Component):
    """``AcceleratorTop`` (behind the resident block on a configuration with one:
    ``hw.resident.accelerator_top``) with registered inputs and ports ``clock``/``reset``.

    What changes at the ports: a CSR access reaches the core one cycle after it is driven;
    ``h2c`` is a pipeline register (full throughput, ``ready`` from flip-flops);
    ``c2h.ready`` reaches the core one cycle late, so ``c2h.valid`` here means "the core
    hands over a beat this cycle" and the harness takes every beat it shows. ``flush``
    empties the ``h2c`` register, as aborting a transfer empties a bridge's FIFO.
    """

    def __init__(self, config):
        self.core = accelerator_top(config)
        self.config = config
        super().__init__({**dict(self.core.signature.members), **clock_ports(config),
                          "flush": In(1)})

    def elaborate(self, platform):
        m = Module()
        add_clock_domains(m, self, self.config)
        m.submodules.core = core = self.core

        csr = core.csr
        m.d.sync += [csr.addr.eq(self.csr.addr), csr.w_data.eq(self.csr.w_data),
                     csr.w_en.eq(self.csr.w_en), csr.r_en.eq(self.csr.r_en)]
        m.d.comb += self.csr.r_data.eq(csr.r_data)

        h2c_valid = Signal()
        h2c_payload = Signal.like(self.h2c.payload)
        m.d.comb += [self.h2c.ready.eq(~h2c_valid | core.h2c.ready),
                     core.h2c.valid.eq(h2c_valid), core.h2c.payload.eq(h2c_payload)]
        with m.If(self.h2c.ready):
            m.d.sync += [h2c_valid.eq(self.h2c.valid), h2c_payload.eq(self.h2c.payload)]
        with m.If(self.flush):
            m.d.sync += h2c_valid.eq(0)

        c2h_ready = Signal()
        m.d.sync += c2h_ready.eq(self.c2h.ready)
        m.d.comb += [core.c2h.ready.eq(c2h_ready),
                     self.c2h.valid.eq(core.c2h.valid & c2h_ready),
                     self.c2h.payload.eq(core.c2h.payload)]

        force_error = Signal()
        m.d.sync += force_error.eq(self.dbg_force_error)
        m.d.comb += [self.irq.eq(core.irq), core.dbg_force_error.eq(force_error)]
        return m
