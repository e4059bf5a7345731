"""The soft reset: its register write on the CSR bus, and the registered copies of it that
blocks reset on.

``CTRL.soft_reset`` is a write-one-pulse bit (``hw.csr``): high for the cycle after the
write. A block that resets on its own register copy, written from the same bus write, sees
it in that same cycle, and the LUT that ORs it with the domain's reset then drives that
block's flip-flops only, not every one of the design's across the die (the 16x8 board
build's critical path).
"""

from amaranth import ResetInserter, Signal

from contract.regmap import by_name

_CTRL = by_name()["CTRL"]
#: The bit of ``CTRL`` that resets the accelerator.
SOFT_RESET_BIT = {f.name: f for f in _CTRL.fields}["soft_reset"].lsb


def soft_reset_write(bus):
    """High in the cycle a write on the CSR ``bus`` sets ``CTRL.soft_reset``: the soft
    reset a cycle early."""
    return bus.w_en & (bus.addr == _CTRL.offset) & bus.w_data[SOFT_RESET_BIT]


def with_own_reset(m, name, reset_next, block):
    """``block`` reset by its own register copy of ``reset_next`` (a cycle later), named
    ``{name}_reset_copy`` so that board builds keep it apart (hw/bitstream/tops.py)."""
    copy = Signal(name=f"{name}_reset_copy")
    m.d.sync += copy.eq(reset_next)
    return ResetInserter(copy)(block)
