"""A pipelined wide multiplier (up to 35 x 34 bits) out of four 18 x 18 products.

``value * multiplier`` with ``value`` signed and ``multiplier`` unsigned, both split at bit
17: ``v = vh * 2**17 + vl``, ``M = Mh * 2**17 + Ml`` with ``vl``, ``Ml`` unsigned 17-bit
and ``vh`` signed, ``Mh`` unsigned, each at most 18 bits signed, so each partial product
is one MULT18X18D. Then ``v * M = vl*Ml + (vl*Mh + vh*Ml) * 2**17 + vh*Mh * 2**34``, and
since ``0 <= vl*Ml < 2**34`` the outer two terms are a concatenation, not an addition.

Stages: the DSP's input registers, its output registers (inside the block on ECP5: a
multiplier with its registers in the fabric runs at about half the speed), the middle sum
beside the concatenation, and the final sum. :data:`PRODUCT_LATENCY` in all.

On iCE40 (``platform.family``) the DSP block, SB_MAC16, multiplies 16 x 16 bits, so the
18-bit split would cost a fifth block and logic for the leftover bits. There the value is
taken as its 32-bit two's-complement pattern ``u`` (``v = u - s * 2**32``, ``s`` its sign)
and split at bit 16 with the multiplier: four unsigned 16 x 16 products give ``u * M``
exactly, and ``v * M = u * M - s * M * 2**32`` is a subtraction in the final sum. Same
stages, four SB_MAC16 per 32 x 31-bit product (the UP5K has eight).
"""

from amaranth import Cat, Signal, signed

from .multiplier import mult18x18d

__all__ = ["PRODUCT_LATENCY", "multiply18", "pipelined_product"]

#: Enabled cycles from the operands to the product of :func:`pipelined_product`.
PRODUCT_LATENCY = 4

_SPLIT = 17
#: The iCE40 split: SB_MAC16 multiplies 16 x 16 bits.
_SPLIT16 = 16


def multiply18(m, a, b, *, en, name, platform):
    """``a * b`` (signed 18 x 18 -> 36 bits), two enabled cycles after ``a``, ``b``.

    On ECP5 (``platform.family``) one MULT18X18D with its input and output registers,
    instantiated in ``m`` itself (as a submodule of its own, several of them tripped an
    assertion in Yosys 0.70's ABC reintegration); elsewhere (simulation) behavioural with
    the same latency.
    """
    p = Signal(signed(36), name=f"{name}_p")
    if getattr(platform, "family", None) == "ecp5":
        a18, b18 = Signal(signed(18), name=f"{name}_a"), Signal(signed(18), name=f"{name}_b")
        m.d.comb += [a18.eq(a), b18.eq(b)]
        m.submodules[f"{name}_dsp"] = mult18x18d(a18, b18, p, en=en)
    else:
        a18, b18 = Signal(signed(18), name=f"{name}_a"), Signal(signed(18), name=f"{name}_b")
        with m.If(en):
            m.d.sync += [a18.eq(a), b18.eq(b), p.eq(a18 * b18)]
    return p


def _product16(m, value, multiplier, *, en, name):
    """The iCE40 form of :func:`pipelined_product` (see the module docstring): ``value``
    signed of at most 32 bits, ``multiplier`` unsigned of at most 32."""
    if len(value) > 2 * _SPLIT16 or len(multiplier) > 2 * _SPLIT16:
        raise ValueError(f"{name}: operands of at most {2 * _SPLIT16} x {2 * _SPLIT16} bits "
                         f"on iCE40, not {len(value)} x {len(multiplier)}")
    pattern = Signal(2 * _SPLIT16, name=f"{name}_u")  # the value's two's-complement bits
    m.d.comb += pattern.eq(value.as_signed())
    halves_v = (pattern[:_SPLIT16], pattern[_SPLIT16:])
    halves_m = (multiplier[:_SPLIT16], multiplier[_SPLIT16:])
    partial = []
    for index, (vi, mi) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        # Input registers, then the output register: SB_MAC16 absorbs both.
        a16 = Signal(_SPLIT16, name=f"{name}_pp{index}_a")
        b16 = Signal(_SPLIT16, name=f"{name}_pp{index}_b")
        p = Signal(2 * _SPLIT16, name=f"{name}_pp{index}_p")
        with m.If(en):
            m.d.sync += [a16.eq(halves_v[vi]), b16.eq(halves_m[mi]), p.eq(a16 * b16)]
        partial.append(p)
    # The sign's correction, M when the value is negative, travels beside the products.
    correction = value.as_signed()[-1].replicate(len(multiplier)) & multiplier
    for stage in range(3):
        delayed = Signal(len(multiplier), name=f"{name}_correction_d{stage}")
        with m.If(en):
            m.d.sync += delayed.eq(correction)
        correction = delayed
    width = len(value) + len(multiplier) + 1
    outer = Signal(4 * _SPLIT16, name=f"{name}_outer")      # ul*Ml + uh*Mh * 2**32
    middle = Signal(2 * _SPLIT16 + 1, name=f"{name}_middle")  # ul*Mh + uh*Ml
    product = Signal(signed(width), name=f"{name}_product")
    with m.If(en):
        m.d.sync += [outer.eq(Cat(partial[0], partial[3])),
                     middle.eq(partial[1] + partial[2]),
                     product.eq(outer + (middle << _SPLIT16)
                                - (correction << 2 * _SPLIT16))]
    return product


def pipelined_product(m, value, multiplier, *, en, name, platform=None):
    """``value * multiplier`` (``value`` signed, ``multiplier`` unsigned) after
    :data:`PRODUCT_LATENCY` cycles that advance while ``en``; returns the register."""
    if getattr(platform, "family", None) == "iCE40":
        return _product16(m, value, multiplier, en=en, name=name)
    if len(value) > 2 * _SPLIT + 1 or len(multiplier) > 2 * _SPLIT:
        raise ValueError(f"{name}: operands of at most {2 * _SPLIT + 1} x {2 * _SPLIT} "
                         f"bits, not {len(value)} x {len(multiplier)}")
    v_lo, v_hi = value.as_unsigned()[:_SPLIT], value.as_signed() >> _SPLIT
    m_lo, m_hi = multiplier[:_SPLIT], multiplier >> _SPLIT
    width = len(value) + len(multiplier) + 1
    if len(value) <= _SPLIT + 1:
        # A value that fits one DSP input takes two products, v*Ml + v*Mh * 2**17, on the
        # same stages (so the same latency): the residual add's int8-sized operands.
        low = multiply18(m, value, m_lo, en=en, name=f"{name}_pp0", platform=platform)
        high = multiply18(m, value, m_hi, en=en, name=f"{name}_pp1", platform=platform)
        low_q = Signal(signed(36), name=f"{name}_low")
        high_q = Signal(signed(36), name=f"{name}_high")
        product = Signal(signed(width), name=f"{name}_product")
        with m.If(en):
            m.d.sync += [low_q.eq(low), high_q.eq(high),
                         product.eq(low_q + (high_q << _SPLIT))]
        return product
    partial = []
    for index, (a, b) in enumerate(((v_lo, m_lo), (v_lo, m_hi), (v_hi, m_lo), (v_hi, m_hi))):
        partial.append(multiply18(m, a, b, en=en, name=f"{name}_pp{index}",
                                  platform=platform))
    outer = Signal(signed(width), name=f"{name}_outer")   # vl*Ml + vh*Mh * 2**34
    middle = Signal(signed(38), name=f"{name}_middle")    # vl*Mh + vh*Ml
    product = Signal(signed(width), name=f"{name}_product")
    with m.If(en):
        m.d.sync += [outer.eq(Cat(partial[0][:2 * _SPLIT], partial[3]).as_signed()),
                     middle.eq(partial[1] + partial[2]),
                     product.eq(outer + (middle << _SPLIT))]
    return product
