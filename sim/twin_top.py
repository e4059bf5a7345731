"""The accelerator top as the twin compiles it: the same design, with its reset registered.

Amaranth's synchronous reset makes every register's next-state logic depend on the ``rst``
input. Verilator re-evaluates logic that depends on a top-level input on every ``eval()``,
twice a cycle, which made the 8x8 twin ~15x slower than it needs to be. Registering the
reset inside the design moves all of that logic to once per clock edge. The only visible
difference is that reset takes effect one cycle later.
"""

from amaranth import ClockDomain, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.top import AcceleratorTop


class TwinTop(wiring.Component):
    """``AcceleratorTop`` with ports ``clock`` and ``reset`` instead of ``clk``/``rst``."""

    def __init__(self, config):
        self.core = AcceleratorTop(config)
        super().__init__({**dict(self.core.signature.members), "clock": In(1), "reset": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain()
        m.domains.unreset = unreset = ClockDomain(reset_less=True)
        reset = Signal(init=1)
        m.d.comb += [sync.clk.eq(self.clock), unreset.clk.eq(self.clock), sync.rst.eq(reset)]
        m.d.unreset += reset.eq(self.reset)
        m.submodules.core = core = self.core
        for name in ("csr", "h2c", "c2h"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(core, name))
        m.d.comb += [self.irq.eq(core.irq), core.dbg_force_error.eq(self.dbg_force_error)]
        return m
