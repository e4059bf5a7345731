"""The soft reset: its register write on the CSR bus, and the registered copies of it that
blocks reset on.

``CTRL.soft_reset`` is a write-one-pulse bit (``hw.csr``): high for the cycle after the
write. A block that resets on its own register copy, written from the same bus write, sees
it in that same cycle. The copy also takes the domain's own reset (a cycle later), and the
block runs in a clock domain of its own whose reset is that copy alone: one flip-flop
drives the block's resets, with no LUT between it and them. (A LUT that ORed the soft
reset with the domain's reset, and one more per nested block, drove every reset of the
engine across the die: the 16x8 board builds' engine-clock critical path.) On an ECP5
that flip-flop reaches them over a global network (``hw.global_net``), not through the
general routing around the block.
"""

from amaranth import ClockDomain, ClockSignal, ResetSignal, Signal
from amaranth.hdl import DomainRenamer

from contract.regmap import by_name

from .global_net import global_net

_CTRL = by_name()["CTRL"]
#: The bit of ``CTRL`` that resets the accelerator.
SOFT_RESET_BIT = {f.name: f for f in _CTRL.fields}["soft_reset"].lsb


def soft_reset_write(bus):
    """High in the cycle a write on the CSR ``bus`` sets ``CTRL.soft_reset``: the soft
    reset a cycle early."""
    return bus.w_en & (bus.addr == _CTRL.offset) & bus.w_data[SOFT_RESET_BIT]


def with_own_reset(m, name, reset_next, block, platform=None):
    """``block`` (its ``sync`` domain) in a domain ``{name}_sync`` of its own on ``sync``'s
    clock, reset by a register copy of ``reset_next`` or of ``sync``'s reset, a cycle
    later; the copy is named ``{name}_reset_copy`` so that board builds keep it apart
    (hw/bitstream/tops.py), and on ``platform``'s global network where it has one."""
    copy = Signal(name=f"{name}_reset_copy", init=1, reset_less=True)
    m.d.sync += copy.eq(reset_next | ResetSignal("sync"))
    domain = ClockDomain(f"{name}_sync", local=True)
    m.domains += domain
    m.d.comb += [domain.clk.eq(ClockSignal("sync")),
                 domain.rst.eq(global_net(m, platform, copy, f"{name}_reset"))]
    return DomainRenamer({"sync": domain.name})(block)
