"""The post-processing bank: one set of rescalers serving the requantization of CONV passes
and the residual add of ADD passes.

A rescaler is ``hw.fixedpoint.rounding_shift`` of a 32-bit value by a 31-bit multiplier
(four MULT18X18D, ``hw.wide_multiply``). The bank owns
``contract.postprocess.bank_rescalers(lanes)`` of them (four for eight lanes) and a mode,
``adding``, that the sequencer sets per pass (CONV and ADD passes never overlap):

- **requantization** (``adding`` low, ``models.requant.requantize`` of ``acc + bias``):
  each of ``requant_units`` rescalers takes a lane a cycle, so a beat of ``lanes``
  accumulators takes ``lanes // requant_units`` cycles (2 on the 8x8 array);
- **residual add** (``adding`` high, ``models.eltwise.add``): a datapath of three
  rescalers per ``add_units`` lanes, one lane a cycle each: two rescale ``a - z_a`` and
  ``b - z_b`` side by side, the third rescales their sum, which is a requantization of
  ``acc = a1 + b1`` with no bias (8 cycles a beat on the 8x8 array, as before).

```
 accumulators ─┐ holding  lanes   stage 1        rescale (8)       stage 10
 operands ─────┴► beat ─► by phase ─► acc+bias ─► r0 ─────────────┬─► +z ─┐
                                      a - z_a  ─► r0 (a1) ──┐     │       │  requant: out
                                      b - z_b  ─► r1 (b1) ──┴─► a1+b1 ─┐  │  at stage 10
                                      acc+bias ─► r2 ◄── (add: sum) ◄──┘  │  add: r2 again
                                                         └─► +z ─► clamp ─┴► collector
```

The requantization path is as long as the requantizer's (``REQUANT_LATENCY``); the add
path runs the third rescaler after the first two (``ADD_LATENCY``). Its output is taken from
the stage of the current mode, and the stages past the requantization's output stay empty in
that mode, so ``adding`` may change whenever the bank is empty (between passes).

The pipeline never stalls: its registers have no enable. A group of lanes enters only
against a credit, one of ``credit_groups(...)`` places in a queue of groups before the
collector (a FIFO with a registered read), given back when the collector takes a group.
So a consumer that is not ready fills the queue instead of stopping the pipeline, and its
``ready`` reaches only the collector and the queue, not the enable of every rescaler
register across the die (the 85F's critical path). Under a ready consumer the queue is
passed by and the timing is the same as a stalling pipeline's; the credits are enough for
a group a cycle.
"""

from amaranth import C, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from contract.config import ADD_LANES_PER_UNIT, check_bool, check_positive_int
from contract.descriptor import ADD_PARAM_FIELDS
from contract.postprocess import (
    ADD_LATENCY,
    REQUANT_LATENCY,
    add_units,
    bank_rescalers,
    requant_units,
)
from contract.requant import ACC_WIDTH, BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH
from models.eltwise import ADD_LEFT_SHIFT

from .fixedpoint import rounding_shift, saturate
from .wide_multiply import PRODUCT_LATENCY

__all__ = [
    "NARROW_BITS",
    "PostProcessBank",
    "RequantParams",
    "accumulator_layout",
    "add_params_layout",
    "credit_groups",
    "operand_pair_layout",
    "output_layout",
    "sum_layout",
]


# --- the beats in and out of the bank (the engine, the loader, the output writer and the
# testbenches share them) ------------------------------------------------------------------

def accumulator_layout(lanes, acc_width=ACC_WIDTH):
    """A beat of ``lanes`` accumulators into the bank (requantization)."""
    return data.StructLayout({"acc": data.ArrayLayout(signed(acc_width), lanes), "last": 1})


def output_layout(lanes):
    """A beat of ``lanes`` int8 results out of the bank (and of the engine)."""
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


def operand_pair_layout(lanes):
    """A beat of ``lanes`` operand pairs into the bank (residual add)."""
    return data.StructLayout({
        "a": data.ArrayLayout(signed(8), lanes),
        "b": data.ArrayLayout(signed(8), lanes),
        "last": 1,
    })


def sum_layout(lanes):
    """A beat of ``lanes`` int8 sums out of the bank: the same beat as a result's."""
    return output_layout(lanes)


class RequantParams(data.Struct):
    """Per-layer requantization constants shared by all lanes."""
    zero_point: signed(8)
    lo: signed(8)
    hi: signed(8)


def add_params_layout():
    """Per-layer constants of the residual add (``models.eltwise.add_multipliers`` and the
    zero points), from ``contract.descriptor.ADD_PARAM_FIELDS``."""
    return data.StructLayout({name: signed(width) if is_signed else unsigned(width)
                              for name, width, is_signed, _ in ADD_PARAM_FIELDS})


#: Width the rescaled value is saturated to before the zero point and the int8 clamp
#: (any width from 9 bits is exact: 2**8 - 1 - 128 is still the top of int8).
NARROW_BITS = 10

#: Register stages of one pipelined rescale (``rounding_shift(stages=4, pipelined=True)``),
#: then its saturation to a narrow width in a stage of its own (``_saturate``).
RESCALE_STAGES = 3 + PRODUCT_LATENCY + 1
#: Data stages between the holding register and the collector in each mode: the lanes
#: picked for the phase, the rescaler's input, a rescale and the zero point; the add's
#: second rescale follows its sum.
_REQUANT_STAGES = 2 + RESCALE_STAGES + 1
_ADD_STAGES = _REQUANT_STAGES + RESCALE_STAGES + 1
#: Width the input rescales of the add keep: ``|a1|, |b1| < 255 * 2**19 < 2**27``
#: (``add_multipliers`` gives input multipliers of at most 1/2), so 28 signed bits hold
#: them exactly; the sum takes 29.
_OPERAND_BITS = 28
if (_REQUANT_STAGES + 2, _ADD_STAGES + 2) != (REQUANT_LATENCY, ADD_LATENCY):
    raise AssertionError("contract.postprocess's latencies do not match the bank's stages")


def credit_groups(residual_add):
    """Groups the bank's queue holds (its credits): one for each group that can be between
    its entry and the collector when a group enters every cycle, plus one for the credit's
    way back, so a ready consumer never waits on a credit."""
    return (_ADD_STAGES if residual_add else _REQUANT_STAGES) + 2


def bank_ports(lanes):
    """The ports of a post-processing unit of ``lanes`` lanes (this bank's, and the serial
    requantizer's of ``hw.postprocess_lean``): requantization in and out with its
    constants, the add's operands, sums and constants, and the mode."""
    return {
        "adding": In(1),
        "accumulators": In(stream.Signature(accumulator_layout(lanes))),
        "results": Out(stream.Signature(output_layout(lanes))),
        "bias": In(data.ArrayLayout(signed(BIAS_WIDTH), lanes)),
        "multiplier": In(data.ArrayLayout(unsigned(MULTIPLIER_WIDTH), lanes)),
        "shift": In(data.ArrayLayout(unsigned(SHIFT_WIDTH), lanes)),
        "params": In(RequantParams),
        "operands": In(stream.Signature(operand_pair_layout(lanes))),
        "sums": Out(stream.Signature(sum_layout(lanes))),
        "add_params": In(add_params_layout()),
    }


class PostProcessBank(wiring.Component):
    """Requantization (CONV passes) or residual add (ADD passes) through shared rescalers.

    The requantization side has ``accumulators`` in and ``results`` out
    (:func:`accumulator_layout`, :func:`output_layout`), per-lane ``bias`` / ``multiplier``
    / ``shift`` and ``params`` (:class:`RequantParams`); the add side ``operands`` in,
    ``sums`` out and ``add_params`` (:func:`operand_pair_layout`, :func:`sum_layout`,
    :func:`add_params_layout`).
    ``adding`` picks the side; the other side's streams are not ready and not valid. Change
    ``adding`` only while the bank is empty.

    Parameters
    ----------
    lanes : int
        Results per beat (the systolic array's columns).
    residual_add : bool
        Whether the add's datapath is built. Without it the bank is a requantizer alone:
        ``adding`` is ignored, ``operands`` is never ready and ``sums`` never valid, and
        only ``requant_units`` rescalers remain (``contract.postprocess.bank_rescalers``).
    add_lanes : int
        Lanes each residual-add datapath serves (``ConvEngineConfig.add_lanes``): 8 lanes
        with 4 give two datapaths, an ADD beat every 4 cycles instead of 8.
    """

    #: ``contract.postprocess``'s latencies, which the driver's cycle model reads.
    REQUANT_LATENCY = REQUANT_LATENCY
    ADD_LATENCY = ADD_LATENCY

    def __init__(self, *, lanes, residual_add=True, add_lanes=ADD_LANES_PER_UNIT):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.residual_add = check_bool("residual_add", residual_add)
        self.requant_units = requant_units(lanes)
        # Without the add, no datapath: the loops below see no unit in an add role.
        self.add_units = add_units(lanes, add_lanes) if residual_add else 0
        self.rescalers = bank_rescalers(lanes, residual_add=residual_add, add_lanes=add_lanes)
        super().__init__(bank_ports(lanes))

    def cycles_per_beat(self, adding):
        """Cycles a beat takes in a mode (``adding`` false: requantization)."""
        if adding and not self.residual_add:
            raise ValueError("a bank built without the residual add has no add mode")
        return self.lanes // (self.add_units if adding else self.requant_units)

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        # A bank without the add is always requantizing: with `adding` a constant, the
        # add's multiplexers and stages fold away in synthesis.
        adding = self.adding if self.residual_add else C(0, 1)
        rq_units, add_dp = self.requant_units, self.add_units
        rq_groups = lanes // rq_units
        add_groups = lanes // add_dp if add_dp else 1
        last_stage = _ADD_STAGES if self.residual_add else _REQUANT_STAGES
        p, rq = self.add_params, self.params

        # --- the holding register and the phase: which lanes enter the pipeline -------
        # Data with no reset (`held` says when they hold a beat): the reset, ORed with the
        # soft reset through a LUT, reached acc_beat across the die (the 8x8 pumped
        # build's engine-clock critical path, 18.95 ns).
        acc_beat = Signal.like(self.accumulators.payload, name="acc_beat", reset_less=True)
        pair_beat = Signal.like(self.operands.payload, name="pair_beat", reset_less=True)
        held = Signal()
        phase = Signal(range(max(rq_groups, add_groups)))
        # `phase` is the mode's last group: a register decided one group ahead, since it
        # gates both sinks' `ready`.
        final_in = Signal()
        # A group enters against a credit (`credit_ok`: a register, so the sinks' `ready`
        # depends on registers only); the collector gives it back.
        depth = credit_groups(self.residual_add)
        credits = Signal(range(depth + 1), init=depth)
        credit_ok = Signal(init=1)
        give_back = Signal()
        take_in = Signal()
        m.d.comb += [
            take_in.eq(held & credit_ok),
            self.accumulators.ready.eq(~adding & (~held | (credit_ok & final_in))),
            self.operands.ready.eq(adding & (~held | (credit_ok & final_in))),
        ]
        credits_next = credits - take_in + give_back
        m.d.sync += [credits.eq(credits_next), credit_ok.eq(credits_next != 0)]
        with m.If(~held):  # phase 0 (a beat's groups are taken back to back)
            m.d.sync += final_in.eq(Mux(adding, add_groups == 1, rq_groups == 1))
        with m.If(take_in):
            with m.If(final_in):
                m.d.sync += [phase.eq(0), held.eq(0),
                             final_in.eq(Mux(adding, add_groups == 1, rq_groups == 1))]
            with m.Else():
                m.d.sync += [phase.eq(phase + 1),
                             final_in.eq(Mux(adding, phase == add_groups - 2,
                                             phase == rq_groups - 2))]
        with m.If(self.accumulators.valid & self.accumulators.ready):
            m.d.sync += [acc_beat.eq(self.accumulators.payload), held.eq(1)]
        with m.If(self.operands.valid & self.operands.ready):
            m.d.sync += [pair_beat.eq(self.operands.payload), held.eq(1)]

        # --- valid and last through the stages; the output stage depends on the mode ---
        out_valid = Signal()
        valids = [take_in]
        lasts = [Mux(adding, pair_beat.last, acc_beat.last) & final_in]
        for stage in range(1, last_stage + 1):
            valid = Signal(name=f"valid_s{stage}")
            last = Signal(name=f"last_s{stage}")
            # Past the requantization's output the stages stay empty unless adding.
            entering = valids[-1] & adding if stage == _REQUANT_STAGES + 1 else valids[-1]
            m.d.sync += [valid.eq(entering), last.eq(lasts[-1])]
            valids.append(valid)
            lasts.append(last)
        out_last = Mux(adding, lasts[last_stage], lasts[_REQUANT_STAGES])
        m.d.comb += out_valid.eq(Mux(adding, valids[last_stage], valids[_REQUANT_STAGES]))
        # Every data register moves every cycle (no enable): the valid bits say which
        # stages hold a group.

        def pick(values, units, groups, unit, name):
            """The element of ``values`` (a lane array) for ``unit`` at this phase, in a
            register (stage 1: the selection does not share a cycle with the sums)."""
            picked = Signal.like(values[unit], name=name)
            with m.Switch(phase):
                for group in range(groups):
                    with m.Case(group):
                        m.d.sync += picked.eq(values[group * units + unit])
            return picked

        # --- stage 1 and the rescalers ---------------------------------------------------
        # The output constants of the mode, registered: static for a pass, and the mode
        # changes only while the bank is empty (more than a cycle before a result).
        # The clamp is decided beside the zero point's addition, against the bounds less
        # the zero point (`x + z < lo` is `x < lo - z`), so the collector only selects.
        zero_point, lo, hi = Signal(signed(8)), Signal(signed(8)), Signal(signed(8))
        lo_less_z, hi_less_z = Signal(signed(10)), Signal(signed(10))
        m.d.sync += [zero_point.eq(Mux(adding, p.y_zero_point, rq.zero_point)),
                     lo.eq(Mux(adding, p.lo, rq.lo)), hi.eq(Mux(adding, p.hi, rq.hi)),
                     lo_less_z.eq(Mux(adding, p.lo - p.y_zero_point, rq.lo - rq.zero_point)),
                     hi_less_z.eq(Mux(adding, p.hi - p.y_zero_point, rq.hi - rq.zero_point))]
        operand_out = {}  # (datapath, 0 for a / 1 for b) -> rescaled operand
        clamped = {}  # rescaler -> its clamped result at the collector
        for unit in range(self.rescalers):
            datapath, role = divmod(unit, 3)
            if datapath >= add_dp:
                role = None
            value = Signal(signed(ACC_WIDTH), name=f"value{unit}")
            multiplier = Signal(unsigned(MULTIPLIER_WIDTH), name=f"m{unit}")
            shift = Signal(unsigned(SHIFT_WIDTH), name=f"n{unit}")
            rq_value, rq_m, rq_n = 0, 0, 0
            if unit < rq_units:
                rq_value = (pick(acc_beat.acc, rq_units, rq_groups, unit, f"acc{unit}")
                            + pick(self.bias, rq_units, rq_groups, unit, f"bias{unit}"))
                rq_m = pick(self.multiplier, rq_units, rq_groups, unit, f"rq_m{unit}")
                rq_n = pick(self.shift, rq_units, rq_groups, unit, f"rq_n{unit}")
            if role in (0, 1):
                # rnd((x - z) << 20, M, n) == rnd(x - z, M, n - 20) (docs/conv-engine.md).
                side = "ab"[role]
                x = pick(getattr(pair_beat, side), add_dp, add_groups, datapath,
                         f"{side}_in{datapath}")
                add_value = x - getattr(p, f"{side}_zero_point")
                add_m = getattr(p, f"{side}_multiplier")
                add_n = getattr(p, f"{side}_shift") - ADD_LEFT_SHIFT
                m.d.sync += [value.eq(Mux(adding, add_value, rq_value)),
                             multiplier.eq(Mux(adding, add_m, rq_m)),
                             shift.eq(Mux(adding, add_n, rq_n))]
            else:
                m.d.sync += [value.eq(rq_value), multiplier.eq(rq_m), shift.eq(rq_n)]
            if role == 2:
                # The output rescale of the add takes the sum of the first two, which is
                # ready RESCALE_STAGES + 1 stages after stage 1.
                total = Signal(signed(_OPERAND_BITS + 1), name=f"sum{datapath}")
                m.d.sync += total.eq(operand_out[datapath, 0] + operand_out[datapath, 1])
                value = Mux(adding, total, value)
                multiplier = Mux(adding, p.y_multiplier, multiplier)
                shift = Mux(adding, p.y_shift, shift)
            narrow = _OPERAND_BITS if role in (0, 1) else NARROW_BITS
            # The rounded result whole, then saturated in a stage of its own: with the
            # saturation beside the rounding increment (``rounding_shift``'s ``narrow``)
            # the 28-bit operands' path limited the bank's clock.
            rounded = rounding_shift(m, value, multiplier, shift, en=C(1, 1), name=f"r{unit}",
                                     stages=4, pipelined=True, platform=platform)
            shifted = _saturate(m, rounded, narrow, name=f"r{unit}_narrowed")
            if role in (0, 1):
                operand_out[datapath, role] = shifted
            # The clamp flags compare the whole (saturated) value; z + shifted is kept
            # only to 8 bits, all the collector takes when neither flag is set (the sum is
            # then inside int8). A value saturated to `narrow` bits lands on the same
            # bound as the exact one (|z| <= 128).
            biased = Signal(signed(8), name=f"biased{unit}")
            below, above = Signal(name=f"below{unit}"), Signal(name=f"above{unit}")
            m.d.sync += [biased.eq(shifted + zero_point), below.eq(shifted < lo_less_z),
                         above.eq(shifted > hi_less_z)]
            clamped[unit] = Mux(below, lo, Mux(above, hi, biased))

        # --- the queue of groups: passed by while the collector takes, filled while not ---
        # A group is the mode's output units' results (the add's third rescalers, or the
        # requantization's units) in its first lanes, and `last`.
        group_lanes = max(rq_units, add_dp)
        group_layout = data.StructLayout({"y": data.ArrayLayout(signed(8), group_lanes),
                                          "last": 1})
        arriving = Signal(group_layout)
        with m.If(adding):
            m.d.comb += [arriving.y[d].eq(clamped[3 * d + 2]) for d in range(add_dp)]
        with m.Else():
            m.d.comb += [arriving.y[u].eq(clamped[u]) for u in range(rq_units)]
        m.d.comb += arriving.last.eq(out_last)
        # Its read is registered (a memory read port in the clocked logic, which the
        # energy twin counts); one place more than the credits, so that a group written
        # while the output register is empty always finds room.
        m.submodules.queue = queue = SyncFIFOBuffered(width=group_layout.size,
                                                      depth=depth + 1)
        queue_empty = queue.level == 0
        group = data.View(group_layout, Mux(queue.r_rdy, queue.r_data, arriving))
        group_valid = queue.r_rdy | (out_valid & queue_empty)

        # --- the collector: group results go into the output beat in place -------------
        out_valid_reg, out_last_reg = Signal(), Signal()
        beat_y = Signal(data.ArrayLayout(signed(8), lanes))
        count = Signal(range(max(rq_groups, add_groups)))
        final_out = Mux(adding, count == add_groups - 1, count == rq_groups - 1)
        sink_ready = Mux(adding, self.sums.ready, self.results.ready)
        out_ready, take = Signal(), Signal()
        m.d.comb += [out_ready.eq(~out_valid_reg | sink_ready),
                     take.eq(group_valid & out_ready),
                     give_back.eq(take),
                     queue.w_data.eq(arriving),
                     # The queue keeps the order: an arriving group passes it by only
                     # when it is empty (its output register included) and the collector
                     # takes.
                     queue.w_en.eq(out_valid & (~queue_empty | ~out_ready)),
                     queue.r_en.eq(out_ready)]
        with m.If(take):
            with m.If(final_out):
                m.d.sync += [out_valid_reg.eq(1), out_last_reg.eq(group.last), count.eq(0)]
            with m.Else():
                m.d.sync += count.eq(count + 1)
                with m.If(sink_ready):
                    m.d.sync += out_valid_reg.eq(0)
            with m.If(adding):
                with m.Switch(count):
                    for index in range(add_groups):
                        with m.Case(index):
                            m.d.sync += [beat_y[index * add_dp + d].eq(group.y[d])
                                         for d in range(add_dp)]
            with m.Else():
                with m.Switch(count):
                    for index in range(rq_groups):
                        with m.Case(index):
                            m.d.sync += [beat_y[index * rq_units + u].eq(group.y[u])
                                         for u in range(rq_units)]
        with m.Elif(sink_ready):
            m.d.sync += out_valid_reg.eq(0)
        m.d.comb += [
            self.results.payload.y.eq(beat_y), self.results.payload.last.eq(out_last_reg),
            self.results.valid.eq(out_valid_reg & ~adding),
            self.sums.payload.y.eq(beat_y), self.sums.payload.last.eq(out_last_reg),
            self.sums.valid.eq(out_valid_reg & adding),
        ]
        return m


def _saturate(m, value, bits, *, name):
    """A register of ``bits`` signed bits holding ``value`` when it fits, otherwise the
    bound of its sign. Every consumer clamps to a range well inside ``bits``, so a
    saturated value lands on the same bound as the exact one (and the add's operands fit
    ``_OPERAND_BITS`` exactly)."""
    narrowed = Signal(signed(bits), name=name)
    m.d.sync += narrowed.eq(saturate(value, bits))
    return narrowed
