"""The performance counters the driver reads after a pass (``PERF_*`` registers): cycles
since reset, cycles busy, cycles computing with every input in, stalled cycles of the
engine, and multiply-accumulates issued (R x C per issued array step)."""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class PerfCounters(wiring.Component):
    """Free-running counters (32-bit, MACs 64-bit); they wrap, the driver takes differences.

    Parameters
    ----------
    macs_per_issue : int
        Multiply-accumulates of one issued array step (rows x cols).
    """

    def __init__(self, macs_per_issue):
        self.macs_per_issue = macs_per_issue
        super().__init__({
            "busy": In(1), "computing": In(1), "stalled": In(1), "issued": In(1),
            "cycles": Out(32), "busy_cycles": Out(32), "compute_cycles": Out(32),
            "stall_cycles": Out(32), "macs": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.cycles.eq(self.cycles + 1)
        with m.If(self.busy):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
            with m.If(self.computing):
                m.d.sync += self.compute_cycles.eq(self.compute_cycles + 1)
        with m.If(self.stalled):
            m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
        with m.If(self.issued):
            m.d.sync += self.macs.eq(self.macs + self.macs_per_issue)
        return m
