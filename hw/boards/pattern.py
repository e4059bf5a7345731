"""A self-contained load for the systolic array: pseudo-random operands in, a checksum out.

A board top needs the array to be fed and drained by something on the chip, and every
result bit must reach a pin, or synthesis removes the array. ``PatternHarness`` feeds
``operands`` from xorshift32 generators (tiles of ``tile_k`` beats), accepts ``results``
(optionally with a pseudo-random backpressure pattern, so the array's stall path is used
too) and folds every result bit into a 32-bit checksum register.

The checksum is a pure function of the number of result beats taken: operands advance one
step per accepted beat and results leave in order, so stalls change *when* beats move,
never *which* beats. :func:`expected_checksums` is the host-side model; a board shows the
checksum on its LEDs, and a test compares the two.
"""

import numpy as np
from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from contract.config import ArrayConfig, check_positive_int

from ..systolic import SystolicArray

CHECKSUM_WIDTH = 32
_MASK32 = (1 << 32) - 1


def generator_seeds(count):
    """Distinct non-zero 32-bit seeds, one per xorshift32 generator."""
    return [((0x9E3779B9 * (n + 1)) & _MASK32) | 1 for n in range(count)]


def xorshift32(x):
    """One step of Marsaglia's xorshift32 on a Python int (the model of :func:`_xorshift`)."""
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    x ^= (x << 5) & _MASK32
    return x


def _xorshift(value):
    """One xorshift32 step as an Amaranth expression (a few XOR levels, no carry chain)."""
    value = value ^ (value << 13)[:32]
    value = value ^ (value >> 17)
    return value ^ (value << 5)[:32]


def fold_bits(value, width):
    """XOR of ``value``'s ``width``-bit chunks (the last one zero-padded), so every bit of
    ``value`` reaches the result."""
    folded = value[:width]
    for start in range(width, len(value), width):
        folded = folded ^ value[start:start + width]
    return folded[:width]


def _rotl(value, amount=1):
    """``value`` rotated left by ``amount`` bits."""
    return Cat(value[-amount:], value[:-amount])


class PatternHarness(wiring.Component):
    """Drive a :class:`~hw.systolic.SystolicArray` with a fixed pseudo-random pattern.

    Every cycle the operand stream offers a beat; its ``a`` and ``b`` bytes are the
    little-endian bytes of ``ceil((rows + cols) / 4)`` xorshift32 generators, which step
    once per accepted beat. ``last`` is set on every ``tile_k``-th beat. Each accepted
    result beat updates ``checksum <= rotl(checksum, 1) ^ fold32(payload)``, where the
    payload is the row of ``cols`` accumulators (column 0 in the low bits) followed by
    ``last``.

    Parameters
    ----------
    config : ArrayConfig
        Array to instantiate.
    tile_k : int
        Beats per tile (the K of each ``R x K @ K x C`` product).
    backpressure : bool
        Accept results only when a second generator says so (about 3 cycles in 4), which
        makes the array stall now and then; otherwise results are always accepted.
    """

    checksum: Out(CHECKSUM_WIDTH)

    def __init__(self, config=None, *, tile_k=16, backpressure=True):
        if config is None:
            config = ArrayConfig()
        elif not isinstance(config, ArrayConfig):
            raise TypeError(f"config must be an ArrayConfig, not {config!r}")
        self.config = config
        self.tile_k = check_positive_int("tile_k", tile_k)
        if not isinstance(backpressure, bool):
            raise TypeError(f"backpressure must be a bool, not {backpressure!r}")
        self.backpressure = backpressure
        #: The array under load (public so testbenches can watch its streams).
        self.array = SystolicArray(config)
        super().__init__()

    @property
    def generator_count(self):
        """Number of xorshift32 generators feeding the operand bytes."""
        return -(-(self.config.rows + self.config.cols) // 4)

    def elaborate(self, platform):
        m = Module()
        rows, cols = self.config.rows, self.config.cols
        m.submodules.array = array = self.array

        # Operand source: the generators' state *is* the offered payload, so it stays
        # stable while valid waits for ready (stream rule) and needs no extra register.
        states = [Signal(32, init=seed, name=f"gen{n}")
                  for n, seed in enumerate(generator_seeds(self.generator_count))]
        pool = Cat(*states)
        k = Signal(range(self.tile_k), init=0)
        m.d.comb += [
            array.operands.valid.eq(1),
            array.operands.payload.last.eq(k == self.tile_k - 1),
        ]
        for i in range(rows):
            m.d.comb += array.operands.payload.a[i].eq(pool[8 * i:8 * i + 8])
        for j in range(cols):
            base = 8 * (rows + j)
            m.d.comb += array.operands.payload.b[j].eq(pool[base:base + 8])
        with m.If(array.operands.ready):
            m.d.sync += [state.eq(_xorshift(state)) for state in states]
            with m.If(k == self.tile_k - 1):
                m.d.sync += k.eq(0)
            with m.Else():
                m.d.sync += k.eq(k + 1)

        # Result sink.
        if self.backpressure:
            # ready straight from a flip-flop, like a FIFO's would be.
            seed = generator_seeds(self.generator_count + 1)[-1]
            sink_state = Signal(32, init=seed)
            sink_ready = Signal(init=bool(seed & 3))
            next_state = _xorshift(sink_state)
            m.d.sync += [sink_state.eq(next_state),
                         sink_ready.eq(next_state[0] | next_state[1])]
            m.d.comb += array.results.ready.eq(sink_ready)
        else:
            m.d.comb += array.results.ready.eq(1)
        with m.If(array.results.valid & array.results.ready):
            folded = fold_bits(array.results.payload.as_value(), CHECKSUM_WIDTH)
            m.d.sync += self.checksum.eq(_rotl(self.checksum) ^ folded)
        return m


def operand_stream(config, beats):
    """The first ``beats`` operand beats the harness offers: int8 arrays ``a`` (beats x
    rows) and ``b`` (beats x cols)."""
    count = -(-(config.rows + config.cols) // 4)
    states = generator_seeds(count)
    a = np.empty((beats, config.rows), dtype=np.int8)
    b = np.empty((beats, config.cols), dtype=np.int8)
    for n in range(beats):
        pool = np.array(states, dtype="<u4").view(np.int8)
        a[n] = pool[:config.rows]
        b[n] = pool[config.rows:config.rows + config.cols]
        states = [xorshift32(s) for s in states]
    return a, b


def expected_checksums(config, *, tile_k, tiles):
    """Checksum after each result beat of the first ``tiles`` tiles (``tiles * rows``
    values), computed from the golden GEMM."""
    from models.gemm import gemm_int8

    check_positive_int("tile_k", tile_k)
    a, b = operand_stream(config, tile_k * tiles)
    mask = (1 << config.acc_width) - 1
    checksum = 0
    sums = []
    for t in range(tiles):
        span = slice(t * tile_k, (t + 1) * tile_k)
        product = gemm_int8(a[span].T.copy(), b[span].copy())
        for i in range(config.rows):
            payload = 0
            for j in range(config.cols):
                payload |= (int(product[i, j]) & mask) << (j * config.acc_width)
            payload |= int(i == config.rows - 1) << (config.cols * config.acc_width)
            folded = 0
            while payload:
                folded ^= payload & _MASK32
                payload >>= 32
            checksum = (((checksum << 1) | (checksum >> 31)) & _MASK32) ^ folded
            sums.append(checksum)
    return sums
