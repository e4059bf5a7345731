"""Fixed-point building blocks shared by the post-processing units.

``rounding_shift`` is the hardware twin of ``models.requant.rounding_shift``:
``(p + 2**(n - 1) - 1 + p[n]) >> n`` with ``p = value * M`` exact and an arithmetic shift,
so the result is ``value * M / 2**n`` rounded to nearest with ties to even (ONNX
QuantizeLinear's rule).

The hardware computes the same number without the wide addition in front of the shifter:
with ``p = q * 2**n + r`` (``q = p >> n``, ``0 <= r < 2**n``), the sum above carries into
``q`` exactly when ``r > 2**(n - 1)`` or ``r == 2**(n - 1)`` and ``q`` is odd, that is
``round = p[n - 1] & (p[n - 2:0] != 0 | q[0])``, and the result is ``q + round``. The
shifter, the round bit and the sticky OR of the bits below it all read the product side by
side, and the increment can take a stage of its own.
"""

from amaranth import Array, Cat, Const, Mux, Signal, signed

from contract.requant import SHIFT_MAX, SHIFT_MIN

from .wide_multiply import PRODUCT_LATENCY, pipelined_product


def rounding_shift(m, value, multiplier, shift, *, en, name, stages=2, pipelined=False,
                   narrow=None, platform=None):
    """Register stages computing ``value * multiplier / 2**shift``, rounded half to even.

    Stage 1 registers the exact product with its shift amount and the mask of the bits
    below the round bit (decoded from ``shift`` beside the multiplier, so the shift
    stage decodes nothing). With ``stages=2`` stage 2 registers the rounded, shifted
    result; with ``stages=3`` stage 2 registers the truncated quotient, its round and
    sticky bits, and stage 3 the increment, which halves the longest path (for a clock
    near the array's); ``stages=4`` (with ``pipelined``) also splits the shifter, a coarse
    shift by a multiple of 8 registered before the last 1 to 8 bits. All stages advance
    while ``en``. Registering the shift lets ``multiplier`` and ``shift`` change every
    cycle (a unit time-shared between lanes or operands). ``shift`` below 1 is outside
    the contract and treated as 1 so the rounding term stays an integer. With
    ``pipelined`` the product takes
    ``hw.wide_multiply.PRODUCT_LATENCY`` stages instead of one (DSP blocks with their own
    registers, then two sums; ``platform`` picks the DSP primitive), for a clock above
    ~80 MHz on ECP5. Latency:
    ``stages - 1 + (PRODUCT_LATENCY if pipelined else 1)``. Returns the last stage's
    register (64-bit signed).

    ``narrow=b`` (with ``stages=3``) saturates for a consumer that clamps to a range well
    inside ``b`` bits: the register is ``b + 1`` bits, equal to the result whenever the
    truncated quotient fits ``b`` signed bits, and otherwise ``+-2**(b - 1)`` (give or
    take the rounding increment) with the result's sign. The test for "fits" reads the
    quotient register beside the increment, so the wide value never reaches a
    comparator.
    """
    if stages not in (2, 3, 4) or (stages == 4 and not pipelined):
        raise ValueError(f"stages must be 2 or 3, or 4 with pipelined, not {stages!r}")
    if narrow is not None and (stages < 3 or not 2 <= narrow <= 63):
        raise ValueError(f"narrow must be 2..63 bits with stages 3 or 4, not {narrow!r}")
    width = len(value) + len(multiplier) + 1
    # Sign-extended so that every bit the shift amount can select exists (a variable bit
    # select past the top of a signal is undefined, not the sign).
    extended = Signal(signed(max(width, SHIFT_MAX + 1)), name=f"{name}_extended")
    held = Signal(range(SHIFT_MAX + 1), name=f"{name}_shift")  # goes with `product`
    below = Signal(SHIFT_MAX, name=f"{name}_below")  # 2**(n - 1) - 1: bits under the round bit
    clamped = Signal(range(SHIFT_MAX + 1), name=f"{name}_amount")
    m.d.comb += clamped.eq(Mux(shift < SHIFT_MIN, SHIFT_MIN, shift))
    quotient = Signal(signed(64), name=f"{name}_quotient")
    round_bit = Signal(name=f"{name}_round")
    sticky = Signal(name=f"{name}_sticky")
    if stages < 4:
        m.d.comb += [
            quotient.eq(extended >> held),
            round_bit.eq(extended.bit_select((held - 1)[:6], 1)),
            sticky.eq((extended & below).any()),
        ]
    result = Signal(signed(64), name=f"{name}_shifted")
    def decode(amount):
        # 2**(n - 1) - 1 bit by bit (bit i is set when i < n - 1): a comparison of six
        # bits with a constant per bit, rather than a shifter and a 63-bit borrow chain.
        return Cat(*(amount > i + 1 for i in range(SHIFT_MAX)))

    if pipelined:
        product = pipelined_product(m, value, multiplier, en=en, name=name,
                                    platform=platform)
        # The shift travels beside the product's stages; its mask is decoded from the
        # first of them (a register), not from the input's multiplexers.
        first = Signal.like(held, name=f"{name}_shift_d0")
        with m.If(en):
            m.d.sync += first.eq(clamped)
        clamped, decoded = first, decode(first)
        for stage in range(1, PRODUCT_LATENCY - 1):
            next_held = Signal.like(held, name=f"{name}_shift_d{stage}")
            next_below = Signal.like(below, name=f"{name}_below_d{stage}")
            with m.If(en):
                m.d.sync += [next_held.eq(clamped), next_below.eq(decoded)]
            clamped, decoded = next_held, next_below
    else:
        decoded = decode(clamped)
        product = Signal(signed(width), name=f"{name}_product")
        with m.If(en):
            m.d.sync += product.eq(value * multiplier)
    with m.If(en):
        m.d.sync += [held.eq(clamped), below.eq(decoded)]
    m.d.comb += extended.eq(product)
    if stages == 4:
        quotient, round_bit, sticky = _two_step_shift(m, extended, clamped, en=en,
                                                      name=name)
    if stages == 2:
        with m.If(en):
            m.d.sync += result.eq(quotient + (round_bit & (sticky | quotient[0])))
        return result
    q = Signal(signed(64), name=f"{name}_q")
    q_round = Signal(name=f"{name}_q_round")
    with m.If(en):
        m.d.sync += [q.eq(quotient), q_round.eq(round_bit & (sticky | quotient[0]))]
    if narrow is None:
        with m.If(en):
            m.d.sync += result.eq(q + q_round)
        return result
    narrowed = Signal(signed(narrow + 1), name=f"{name}_narrowed")
    with m.If(en):
        m.d.sync += narrowed.eq(saturate(q, narrow) + q_round)
    return narrowed


def saturate(value, bits):
    """``value`` when it fits ``bits`` signed bits, otherwise the bound of its sign
    (``-2**(bits - 1)`` or ``2**(bits - 1) - 1``), as a ``bits``-wide expression."""
    top = value[bits - 1:]
    fits = (top == 0) | (top == (1 << len(top)) - 1)
    bound = 1 << (bits - 1)
    return Mux(fits, value[:bits].as_signed(), Mux(value[-1], -bound, bound - 1))


def _two_step_shift(m, extended, amount, *, en, name):
    """The quotient, round bit and sticky bit of ``extended >> n`` over two stages:
    a coarse shift by the multiple of 8 below ``n - 1`` (with the OR of the bits it drops),
    registered, then the remaining 1 to 8 bits. Each stage is an 8-way selection rather
    than a 64-way one. ``amount`` is ``n`` one stage ahead of ``extended``'s register
    stage; returns expressions for the stage after the coarse one."""
    n_minus_1 = Signal(6, name=f"{name}_nm1")
    with m.If(en):
        m.d.sync += n_minus_1.eq(amount - 1)  # beside `held`: goes with the product
    hi, lo = n_minus_1[3:], n_minus_1[:3]
    coarse = Signal(signed(len(extended)), name=f"{name}_coarse")
    coarse_sticky = Signal(name=f"{name}_coarse_sticky")
    fine = Signal(3, name=f"{name}_fine")
    with m.If(en):
        m.d.sync += [
            coarse.eq(Array([extended >> (8 * k) for k in range(8)])[hi]),
            coarse_sticky.eq(Array([Const(0, 1)] + [extended[:8 * k].any()
                                                    for k in range(1, 8)])[hi]),
            fine.eq(lo),
        ]
    # n - 1 = 8 * hi + lo: the round bit p[n - 1] is coarse[lo], the quotient
    # p >> n = coarse >> (lo + 1), and the bits below the round bit are p[:8 * hi]
    # (`coarse_sticky`) and coarse[:lo].
    quotient = Array([coarse >> (j + 1) for j in range(8)])[fine]
    round_bit = coarse.bit_select(fine, 1)
    sticky = coarse_sticky | Array([Const(0, 1)] + [coarse[:j].any()
                                                    for j in range(1, 8)])[fine]
    return quotient, round_bit, sticky
