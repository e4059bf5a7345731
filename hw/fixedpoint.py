"""Fixed-point building blocks shared by the post-processing units.

``rounding_shift`` is the hardware twin of ``models.requant.rounding_shift``:
``(p + 2**(n - 1) - 1 + p[n]) >> n`` with ``p = value * M`` exact and an arithmetic shift,
so the result is ``value * M / 2**n`` rounded to nearest with ties to even (ONNX
QuantizeLinear's rule). Bit ``n`` of the product is the only addition to a ties-up
rounder: one multiplexer into the same adder.
"""

from amaranth import Const, Mux, Signal, signed

from contract.requant import SHIFT_MAX, SHIFT_MIN


def rounding_shift(m, value, multiplier, shift, *, en, name):
    """Two register stages computing ``value * multiplier / 2**shift``, rounded half to even.

    Stage 1 registers the exact product together with its shift, stage 2 the rounded,
    shifted result; both advance while ``en``. Registering the shift lets ``multiplier``
    and ``shift`` change every cycle (a unit time-shared between lanes or operands).
    ``shift`` below 1 is outside the contract and treated as 1 so the rounding term stays
    an integer. Returns the stage-2 register (64-bit signed).
    """
    width = len(value) + len(multiplier) + 1
    product = Signal(signed(width), name=f"{name}_product")
    # Sign-extended so that bit ``amount`` exists for every shift (a variable bit select
    # past the top of a signal is undefined, not the sign).
    extended = Signal(signed(max(width, SHIFT_MAX + 1)), name=f"{name}_extended")
    amount = Signal(range(SHIFT_MAX + 1), name=f"{name}_amount")
    rounding = Signal(signed(64), name=f"{name}_rounding")
    odd = Signal(name=f"{name}_odd")
    result = Signal(signed(64), name=f"{name}_shifted")
    held = Signal(SHIFT_MAX.bit_length(), name=f"{name}_shift")  # goes with `product`
    m.d.comb += [
        amount.eq(held),
        rounding.eq((Const(1, 64) << (amount - 1)[:6]) - 1),
        extended.eq(product),
        # The parity of the truncated quotient: a tie rounds up only when it is odd.
        odd.eq(extended.bit_select(amount, 1)),
    ]
    with m.If(en):
        m.d.sync += [
            product.eq(value * multiplier),
            held.eq(Mux(shift < SHIFT_MIN, SHIFT_MIN, shift)),
            result.eq((product + rounding + odd) >> amount),
        ]
    return result


def clamp(value, lo, hi):
    """``min(max(value, lo), hi)`` as an expression."""
    return Mux(value < lo, lo, Mux(value > hi, hi, value))
