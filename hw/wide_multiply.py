"""A pipelined wide multiplier (up to 35 x 34 bits) out of four 18 x 18 products.

``value * multiplier`` with ``value`` signed and ``multiplier`` unsigned, both split at bit
17: ``v = vh * 2**17 + vl``, ``M = Mh * 2**17 + Ml`` with ``vl``, ``Ml`` unsigned 17-bit
and ``vh`` signed, ``Mh`` unsigned, each at most 18 bits signed, so each partial product
is one MULT18X18D. Then ``v * M = vl*Ml + (vl*Mh + vh*Ml) * 2**17 + vh*Mh * 2**34``, and
since ``0 <= vl*Ml < 2**34`` the outer two terms are a concatenation, not an addition.

Stages: the DSP's input registers, its output registers (inside the block on ECP5: a
multiplier with its registers in the fabric runs at about half the speed), the middle sum
beside the concatenation, and the final sum. :data:`PRODUCT_LATENCY` in all.
"""

from amaranth import Cat, Signal, signed

from .multiplier import mult18x18d

__all__ = ["PRODUCT_LATENCY", "multiply18", "pipelined_product"]

#: Enabled cycles from the operands to the product of :func:`pipelined_product`.
PRODUCT_LATENCY = 4

_SPLIT = 17


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


def pipelined_product(m, value, multiplier, *, en, name, platform=None):
    """``value * multiplier`` (``value`` signed, ``multiplier`` unsigned) after
    :data:`PRODUCT_LATENCY` cycles that advance while ``en``; returns the register."""
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
