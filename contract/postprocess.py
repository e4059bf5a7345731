"""How many arithmetic units the post-processing blocks share between their lanes.

The requantizer and the residual-add unit take beats of C lanes (the array's columns) but
own fewer multiplier datapaths, time-shared: a beat takes ``C // units`` cycles. The
array yields at most R*C results every K cycles, so a few units keep up with it at a
fraction of the array's multipliers (docs/conv-engine.md, "Post-processing"). Read by the
RTL (``hw.requant``, ``hw.residual_add``) and by the driver's cycle model.
"""

__all__ = ["ADD_LANES_PER_UNIT", "REQUANT_LANES_PER_UNIT", "add_units", "requant_units",
           "shared_units"]

#: Lanes one 32 x 31-bit rescaler serves in the requantizer (four MULT18X18D each).
REQUANT_LANES_PER_UNIT = 4
#: Lanes one residual-add datapath serves (two narrowed input rescalers and one output
#: rescaler: eight MULT18X18D).
ADD_LANES_PER_UNIT = 8


def shared_units(lanes, per_unit):
    """The largest divisor of ``lanes`` that is at most ``max(1, lanes // per_unit)``."""
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
    target = max(1, lanes // per_unit)
    return max(d for d in range(1, target + 1) if lanes % d == 0)


def requant_units(lanes):
    """Rescalers of a requantizer ``lanes`` wide (2 for the 8x8 array: 8 MULT18X18D)."""
    return shared_units(lanes, REQUANT_LANES_PER_UNIT)


def add_units(lanes):
    """Datapaths of a residual-add unit ``lanes`` wide (1 for the 8x8 array: 8
    MULT18X18D)."""
    return shared_units(lanes, ADD_LANES_PER_UNIT)
