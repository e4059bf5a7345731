"""How many rescalers the post-processing bank owns and how its lanes share them.

The engine's post-processing bank (``hw.postprocess.PostProcessBank``) takes beats of C
lanes (the array's columns) and owns a few full 32 x 31-bit rescalers (four MULT18X18D
each), time-shared between the lanes: a beat takes ``C // units`` cycles. The same
rescalers serve the requantization of CONV passes and the residual add of ADD passes, which
never run at the same time (docs/conv-engine.md, "Post-processing"). The array yields at
most R*C results every K cycles, so a few rescalers keep up with it at a fraction of the
array's multipliers. Read by the RTL and by the driver's cycle model.
"""

from .config import ADD_LANES_CHOICES, ADD_LANES_PER_UNIT, check_bool
from .requant import MULTIPLIER_WIDTH, SHIFT_MAX, SHIFT_MIN

__all__ = ["ADD_LANES_CHOICES", "ADD_LANES_PER_UNIT", "ADD_LATENCY", "ADD_RESCALERS_PER_UNIT",
           "MULTIPLIERS_PER_RESCALER", "REQUANT_LANES_PER_UNIT", "REQUANT_LATENCY",
           "add_units", "bank_rescalers", "postprocess_multipliers", "requant_units",
           "SERIAL_BEAT_CYCLES", "SERIAL_MAX_LANE_CYCLES", "serial_lane_cycles",
           "serial_requantizer", "shared_units"]

#: Lanes one rescaler serves in requantization (CONV passes): 4 rescalers for 8 lanes, a
#: beat every 2 cycles, as fast as a 1x1 layer with 16 input channels yields them.
REQUANT_LANES_PER_UNIT = 2
# ADD_LANES_PER_UNIT (lanes one residual-add datapath serves unless the configuration's
# ``add_lanes`` says fewer: 1 datapath for 8 lanes, a lane a cycle) and ADD_LANES_CHOICES
# live with the configuration that checks them (contract.config).
#: Rescalers one residual-add datapath takes: the two input rescales and the output one.
ADD_RESCALERS_PER_UNIT = 3
#: MULT18X18D of one 32 x 31-bit rescaler (``hw.wide_multiply``).
MULTIPLIERS_PER_RESCALER = 4
#: Cycles from a beat's transfer into the bank to its result, per mode, under a ready
#: consumer, for a beat of one group of lanes (each further group adds a cycle): the
#: holding register, the lanes of the phase, the rescaler's input, a rescale (seven
#: stages, then its saturation to a narrow width), the zero point and the collector; the
#: add's output rescale follows its sum (nine more). The bank's test measures both on the
#: RTL.
REQUANT_LATENCY = 13
ADD_LATENCY = 22


def shared_units(lanes, per_unit):
    """The largest divisor of ``lanes`` that is at most ``max(1, lanes // per_unit)``."""
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
    target = max(1, lanes // per_unit)
    return max(d for d in range(1, target + 1) if lanes % d == 0)


def requant_units(lanes):
    """Rescalers serving a beat ``lanes`` wide in requantization (4 for the 8x8 array: a
    beat every 2 cycles)."""
    return shared_units(lanes, REQUANT_LANES_PER_UNIT)


def add_units(lanes, add_lanes=ADD_LANES_PER_UNIT):
    """Residual-add datapaths (three rescalers each) serving a beat ``lanes`` wide, each
    for about ``add_lanes`` lanes (1 for the 8x8 array by default: a beat every 8 cycles;
    2 with ``add_lanes`` 4: a beat every 4)."""
    if add_lanes not in ADD_LANES_CHOICES or isinstance(add_lanes, bool):
        raise ValueError(f"add_lanes must be one of {list(ADD_LANES_CHOICES)}, "
                         f"not {add_lanes!r}")
    return shared_units(lanes, add_lanes)


def bank_rescalers(lanes, *, residual_add=True, add_lanes=ADD_LANES_PER_UNIT):
    """Rescalers of the post-processing bank: enough for either mode (4 for the 8x8; 6
    with ``add_lanes`` 4); a bank built without the residual add
    (``ConvEngineConfig.residual_add``) keeps only the requantizer's (1 for 2 lanes
    instead of 3)."""
    check_bool("residual_add", residual_add)
    if not residual_add:
        return requant_units(lanes)
    return max(requant_units(lanes), ADD_RESCALERS_PER_UNIT * add_units(lanes, add_lanes))


def serial_requantizer(*, residual_add=True, pipelined=True):
    """Whether post-processing is the serial requantizer (``hw.postprocess_lean``: a lane
    at a time, a shift-and-add multiply, no DSP block) rather than the bank: on a build
    without the residual add and without the timing registers
    (``ConvEngineConfig.pipelined``), the iCEBreaker's."""
    check_bool("residual_add", residual_add)
    check_bool("pipelined", pipelined)
    return not residual_add and not pipelined


def serial_lane_cycles(shift):
    """Cycles the serial requantizer (``hw.postprocess_lean``) takes for one lane with
    right shift ``shift``: the load, a multiply step per multiplier bit (31), the shift's
    ``shift - 1`` bits eight at a time and then one at a time, the rounding and the write.
    Each beat adds :data:`SERIAL_BEAT_CYCLES`. Read by the RTL's tests and the cycle
    model."""
    drop = max(shift, SHIFT_MIN) - 1
    return 1 + MULTIPLIER_WIDTH + drop // 8 + drop % 8 + 1 + 1


#: Cycles a beat of the serial requantizer adds to its lanes': the wait for the beat and
#: the offer of its result.
SERIAL_BEAT_CYCLES = 2
#: The most cycles one lane takes (the largest shift's).
SERIAL_MAX_LANE_CYCLES = max(serial_lane_cycles(n) for n in range(SHIFT_MIN, SHIFT_MAX + 1))


def postprocess_multipliers(lanes, *, residual_add=True, pipelined=True,
                            add_lanes=ADD_LANES_PER_UNIT):
    """MULT18X18D outside the array: the bank's rescalers (16 for the 8x8 array; 4 for a
    2-lane bank without the residual add; none for the serial requantizer)."""
    if serial_requantizer(residual_add=residual_add, pipelined=pipelined):
        return 0
    return MULTIPLIERS_PER_RESCALER * bank_rescalers(lanes, residual_add=residual_add,
                                                     add_lanes=add_lanes)
