"""The accelerator as the driver sees it: discover, program a layer, run it, read back.

Everything here speaks only to a :class:`sw_driver.transport.Transport`, so the same code
runs on the Verilator twin and on a board. Layers are lowered to engine passes by
``sw_driver.conv_lowering``; each pass is one descriptor, one ``start`` and one DMA
exchange in the order ``hw/top.py`` documents.
"""

import math
from dataclasses import dataclass, replace

import numpy as np

from contract.config import ArrayConfig, ConvEngineConfig
from contract.descriptor import ADD_PARAM_FIELDS, DEPTHWISE_FIELDS, DESCRIPTOR_FIELDS
from contract.regmap import unpack_add_lanes, unpack_config, unpack_features
from contract.streams import (
    ACTIVATIONS_PER_WORD,
    POOL_MAX_WIDTH,
    add_words,
    output_words,
    pack_param_entry,
    weight_words,
)
from sw_driver import regs
from sw_driver.conv_lowering import assemble_output, lower_conv2d
from sw_driver.cycle_model import pass_cycles
from sw_driver.errors import DeviceError
from sw_driver.gap_lowering import dense_chunk, gap_group, gap_requantization, gap_weights
from sw_driver.regs import ERROR_MEANINGS, Opcode, Reg
from sw_driver.transport.base import Deadline, TransportError

#: Why a device without the residual add (``CONFIG.no_add``) runs no Add, for the driver's
#: error and the device provider's refusal alike.
NO_ADD = ("this device was built without the residual add (its CONFIG register's no_add "
          "bit is set)")
#: Why a device has no cycle or MAC counts to give: written once, read by the driver's
#: errors and the benches'.
NO_PERF = ("this device was built without performance counters (its CONFIG register's "
           "no_perf bit is set; its PERF_* registers read 0, which is not a measurement)")


class AcceleratorError(DeviceError):
    """A layer failed on the device; the message names the layer and what was seen."""


@dataclass(frozen=True)
class DeadlinePolicy:
    """How long the driver waits for a pass, from the cycles the cycle model expects.

    A pass may take ``margin`` times its expected cycles, and never fewer than
    ``min_cycles``; in wall-clock time, those cycles at the transport's slowest rate
    (:attr:`~sw_driver.transport.Transport.min_cycles_per_second`), and never less than
    ``min_seconds``. The model (:func:`sw_driver.cycle_model.pass_cycles`) is within 10 % of
    the twin's counters, so the margin is for what it cannot see (a board's link stalling);
    the floors keep tiny passes from being cut short by scheduling noise. With the defaults
    a stuck small layer on the twin is reported after 100 000 simulated cycles (about
    0.1 s) or 1 s, instead of the transport's whole budget.

    Parameters
    ----------
    margin : float
        Multiple of the expected cycles a pass may take.
    min_cycles : int
        Floor of the cycle limit.
    min_seconds : float
        Floor of the wall-clock limit.
    """

    margin: float = 8.0
    min_cycles: int = 100_000
    min_seconds: float = 1.0

    def __post_init__(self):
        for name in ("margin", "min_cycles", "min_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be a positive number, not {value!r}")
        if self.margin < 1:
            raise ValueError(f"margin must be at least 1 (the expected cycles), not "
                             f"{self.margin!r}")

    def deadline(self, expected_cycles, min_cycles_per_second):
        """The :class:`~sw_driver.transport.base.Deadline` of a pass expected to take
        ``expected_cycles`` on a device whose cycles pass at least this fast."""
        cycles = max(self.min_cycles, math.ceil(self.margin * expected_cycles))
        seconds = max(self.min_seconds, cycles / min_cycles_per_second)
        return Deadline(cycles, seconds, f"deadline {cycles:,} cycles or {seconds:.3g} s "
                                         f"for ~{expected_cycles:,} expected")


@dataclass(frozen=True)
class Counters:
    """Performance counter deltas over one layer."""
    cycles: int = 0
    busy: int = 0
    macs: int = 0
    stalls: int = 0
    compute: int = 0  # busy cycles after loading (computing and sending results)

    def _values(self):
        return (self.cycles, self.busy, self.macs, self.stalls, self.compute)

    def __add__(self, other):
        return Counters(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def __sub__(self, other):
        return Counters(*(a - b for a, b in zip(self._values(), other._values(), strict=True)))


def _words(data, words_per_item):
    """int8 rows -> little-endian bytes, each row padded to ``words_per_item`` words."""
    if len(data) == 0:
        return b""
    rows = np.asarray(data, dtype=np.int8).reshape(len(data), -1).view(np.uint8)
    padded = np.zeros((rows.shape[0], 4 * words_per_item), np.uint8)
    padded[:, :rows.shape[1]] = rows
    return padded.tobytes()


@dataclass(frozen=True)
class PassProgram:
    """What the host does for one engine pass, independent of how it reaches the device:
    the register writes (ending with the start), the host-to-device bytes, and how many
    bytes come back. The driver runs it over a Transport; the cocotb system testbench
    (``sim/tb_system.py``) runs the very same program against the RTL."""

    name: str
    csr_writes: tuple
    h2c: bytes
    c2h_bytes: int
    output_beats: int
    cols: int

    def decode(self, raw):
        """Device-to-host bytes -> output beats, shape (output_beats, C) int8."""
        per_beat = self.c2h_bytes // self.output_beats
        beats = np.frombuffer(raw, np.int8).reshape(self.output_beats, per_beat)
        return beats[:, :self.cols]


def pooled_pass(engine_pass):
    """``engine_pass`` as seen after the fused 2x2 max pool (its output size halved)."""
    oh, ow = engine_pass.out_size
    return replace(engine_pass, out_size=(oh // 2, ow // 2), row0=engine_pass.row0 // 2)


def pass_program(engine_pass, config, *, pool=False):
    """The :class:`PassProgram` of one :class:`~sw_driver.conv_lowering.EnginePass` on an
    accelerator with ``config`` (the stream format ``hw/top.py`` documents); with ``pool``
    the engine's output goes through the fused 2x2 / stride 2 max pool."""
    p, cols = engine_pass, config.cols
    entries = [pack_param_entry({"bias": p.bias[tile], "multiplier": p.multiplier[tile],
                                 "shift": p.shift[tile]}, cols)
               for tile in range(p.bias.shape[0])]
    activations = p.activations.astype(np.int8).tobytes()
    activations += bytes(-len(activations) % ACTIVATIONS_PER_WORD)
    writes = [(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK),
              (Reg.OPCODE, Opcode.CONV)]
    # The depthwise fields only to a device with the mode (elsewhere their registers do
    # not exist, and a pass would carry register writes for nothing).
    writes += [(Reg[f"CONV_{name.upper()}"], int(p.descriptor[name]) & 0xFFFFFFFF)
               for name, _, _, _ in DESCRIPTOR_FIELDS
               if name not in DEPTHWISE_FIELDS or config.depthwise]
    oh, ow = p.out_size
    writes += [(Reg.POOL_ENABLE, int(pool)), (Reg.POOL_WIDTH, ow), (Reg.POOL_HEIGHT, oh),
               (Reg.POOL_FRAMES, p.descriptor["col_tiles"])]
    writes += [(Reg.LOAD_PARAMS, len(entries)), (Reg.LOAD_WEIGHTS, p.weights.shape[0]),
               (Reg.LOAD_ACT, p.activations.size), (Reg.CTRL, regs.CTRL_START_MASK)]
    beats = pooled_pass(p).output_beats if pool else p.output_beats
    # The first column tile's weights, the activations, then the other tiles' weights,
    # which the device loads while it computes (hw/top.py); a depthwise pass's weights
    # all come first.
    first = p.first_weight_rows
    return PassProgram(
        name=p.name, csr_writes=tuple((int(o), int(v)) for o, v in writes),
        h2c=(b"".join(entries) + _words(p.weights[:first], weight_words(cols)) + activations
             + _words(p.weights[first:], weight_words(cols))),
        c2h_bytes=beats * output_words(cols) * 4, output_beats=beats, cols=cols)


def skip_strided_1x1(x, w, stride, padding):
    """``(x, stride)`` for the engine: a 1x1 convolution with stride s > 1 and no padding
    reads only every s-th row and column, so the host sends just those (a quarter of the
    bytes at stride 2) and the engine runs it at stride 1, with the same outputs exactly.
    Anything else is returned unchanged (the lowering checks it)."""
    try:
        sh, sw = (stride, stride) if np.ndim(stride) == 0 else tuple(stride)
        pads = (padding,) if np.ndim(padding) == 0 else tuple(padding)
    except (TypeError, ValueError):
        return x, stride
    if (np.shape(w)[2:] != (1, 1) or sh != sw or not isinstance(sh, (int, np.integer))
            or isinstance(sh, bool) or sh < 2 or any(pads)):
        return x, stride
    return np.ascontiguousarray(np.asarray(x)[:, :, ::sh, ::sh]), 1


def pool_program(x, config, *, name="maxpool", max_width=POOL_MAX_WIDTH):
    """The program of a 2x2 / stride 2 max pool of int8 NCHW ``x``: every (image, group of
    C channels) is one frame of row-major pixels. ``max_width`` is the widest feature map
    the device's pool takes (its ``POOL_MAX_WIDTH`` register)."""
    n, c, h, w = x.shape
    if not 2 <= w <= max_width or h < 2:
        raise ValueError(f"layer {name!r}: the 2x2 max pool takes feature maps 2 to "
                         f"{max_width} wide and at least 2 high, not {h}x{w}")
    cols = config.cols
    groups = -(-c // cols)
    padded = np.full((n, groups * cols, h, w), -128, np.int8)
    padded[:, :c] = x
    pixels = padded.reshape(n, groups, cols, h, w).transpose(0, 1, 3, 4, 2)
    frames = n * groups
    beats = frames * (h // 2) * (w // 2)
    writes = [(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK),
              (Reg.OPCODE, Opcode.POOL), (Reg.POOL_WIDTH, w), (Reg.POOL_HEIGHT, h),
              (Reg.POOL_FRAMES, frames), (Reg.STREAM_BEATS, frames * h * w),
              (Reg.CTRL, regs.CTRL_START_MASK)]
    return PassProgram(name=name, csr_writes=tuple((int(o), int(v)) for o, v in writes),
                       h2c=_words(pixels.reshape(-1, cols), output_words(cols)),
                       c2h_bytes=beats * output_words(cols) * 4, output_beats=beats,
                       cols=cols)


def add_program(a, b, params, config, *, name="add"):
    """The program of a residual add of two int8 tensors of one shape; ``params`` maps each
    ``contract.descriptor.ADD_PARAM_FIELDS`` name to its value."""
    cols = config.cols
    size = a.size
    beats = -(-size // cols)
    flat = np.zeros((2, beats * cols), np.int8)
    flat[0, :size] = a.reshape(-1)
    flat[1, :size] = b.reshape(-1)
    pairs = flat.reshape(2, beats, cols).transpose(1, 0, 2)  # beat: C of a, then C of b
    writes = [(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK),
              (Reg.OPCODE, Opcode.ADD), (Reg.STREAM_BEATS, beats)]
    writes += [(Reg[f"ADD_{field.upper()}"], int(params[field]) & 0xFFFFFFFF)
               for field, _, _, _ in ADD_PARAM_FIELDS]
    writes.append((Reg.CTRL, regs.CTRL_START_MASK))
    return PassProgram(name=name, csr_writes=tuple((int(o), int(v)) for o, v in writes),
                       h2c=_words(pairs.reshape(beats, 2 * cols), add_words(cols)),
                       c2h_bytes=beats * output_words(cols) * 4, output_beats=beats,
                       cols=cols)


def _version_fields(word):
    """``(major, minor)`` of a VERSION register word."""
    return ((word & regs.VERSION_MAJOR_MASK) >> regs.VERSION_MAJOR_SHIFT,
            (word & regs.VERSION_MINOR_MASK) >> regs.VERSION_MINOR_SHIFT)


class Accelerator:
    """One Tessera accelerator behind ``transport``.

    Parameters
    ----------
    transport : sw_driver.transport.Transport
    deadlines : DeadlinePolicy, optional
        How long a pass with a cycle estimate may take (default ``DeadlinePolicy()``).
    """

    def __init__(self, transport, *, deadlines=None):
        self.transport = transport
        self.deadlines = DeadlinePolicy() if deadlines is None else deadlines
        read = transport.csr_read
        ident = read(Reg.ID)
        if ident != regs.ID_VALUE:
            raise AcceleratorError(f"no Tessera accelerator: ID register reads {ident:#010x}, "
                                   f"expected {regs.ID_VALUE:#010x}")
        version = read(Reg.VERSION)
        major, minor = _version_fields(version)
        #: ``(major, minor)`` of the device's register map.
        self.map_version = (major, minor)
        if major != _version_fields(regs.MAP_VERSION)[0]:
            raise AcceleratorError(f"register map version {major}.{minor} is not supported by "
                                   f"this driver ({regs.MAP_VERSION:#x})")
        config_word = read(Reg.CONFIG)
        array = ArrayConfig(**unpack_config(config_word))
        self.config = ConvEngineConfig(array=array, act_depth=read(Reg.ACT_DEPTH),
                                       weight_depth=read(Reg.WEIGHT_DEPTH),
                                       max_col_tiles=read(Reg.PARAM_DEPTH),
                                       # 0 and 0 on a build without resident execution (and
                                       # on one from before the registers).
                                       resident_words=read(Reg.RES_DATA_WORDS),
                                       program_words=read(Reg.RES_PROGRAM_WORDS),
                                       add_lanes=unpack_add_lanes(config_word),
                                       **unpack_features(config_word))
        #: Widest feature map the device's 2x2 max pool takes.
        self.pool_max_width = read(Reg.POOL_MAX_WIDTH)
        transport.csr_write(Reg.IRQ_ENABLE, 0b11)
        #: Whether the device has its performance counters (``CONFIG.no_perf`` clear).
        self.has_counters = self.config.perf_counters
        self._last_counters = Counters() if self.has_counters else None

    # --- layers -----------------------------------------------------------------------

    def conv2d(self, x, w, bias, multiplier, shift, *, x_zero_point, y_zero_point,
               lo=-128, hi=127, stride=1, padding=0, groups=1, pool=False, name="conv"):
        """``requantize(conv2d(x, w, bias), ...)`` on the device (``models`` semantics);
        ``groups`` equal to the channel count makes it depthwise; ``pool`` fuses a 2x2 /
        stride 2 max pool (``models.pool.max_pool2d(y, 2, 2)``)."""
        x, stride = skip_strided_1x1(x, w, stride, padding)
        passes = lower_conv2d(x, w, bias, multiplier, shift, x_zero_point=x_zero_point,
                              y_zero_point=y_zero_point, lo=lo, hi=hi, stride=stride,
                              padding=padding, groups=groups, config=self.config, name=name,
                              row_multiple=2 if pool else 1)
        total = Counters() if self.has_counters else None
        outputs = []
        for engine_pass in passes:
            beats, counters = self.run_program(
                pass_program(engine_pass, self.config, pool=pool),
                expected_cycles=pass_cycles(engine_pass, self.config))
            outputs.append(beats)
            if total is not None:
                total = total + counters
        self.last_counters = total
        if pool:
            passes = [pooled_pass(p) for p in passes]
        return assemble_output(passes, outputs, w.shape[0])

    def max_pool2d(self, x, *, name="maxpool"):
        """2x2 / stride 2 max pool of int8 NCHW ``x`` (``models.pool.max_pool2d(x, 2, 2)``)."""
        x = np.asarray(x)
        # An odd last row or column is sent too: the pool consumes and drops it before it
        # ends the pass (hw/maxpool.py), so the input stream is left empty.
        beats, self.last_counters = self.run_program(
            pool_program(x, self.config, name=name, max_width=self.pool_max_width))
        n, c, h, w = x.shape
        groups = -(-c // self.config.cols)
        out = beats.reshape(n, groups, h // 2, w // 2, self.config.cols)
        out = out.transpose(0, 1, 4, 2, 3).reshape(n, groups * self.config.cols, h // 2,
                                                   w // 2)
        return np.ascontiguousarray(out[:, :c])

    def add(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
            lo=-128, hi=127, *, name="add"):
        """Residual add of two int8 tensors (``models.eltwise.add`` semantics; inputs are
        broadcast on the host)."""
        from models.eltwise import add_multipliers

        if not self.config.residual_add:
            # The device would refuse the start (BAD_OPCODE); say why before sending it.
            raise AcceleratorError(f"{name}: {NO_ADD}")
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        ma, na, mb, nb, my, ny = add_multipliers(a_scale, b_scale, y_scale)
        params = {"a_zero_point": a_zero_point, "b_zero_point": b_zero_point,
                  "y_zero_point": y_zero_point, "lo": lo, "hi": hi, "a_multiplier": ma,
                  "a_shift": na, "b_multiplier": mb, "b_shift": nb, "y_multiplier": my,
                  "y_shift": ny}
        beats, self.last_counters = self.run_program(
            add_program(a, b, params, self.config, name=name))
        return beats.reshape(-1)[:a.size].reshape(a.shape).copy()

    def global_average_pool(self, x, *, x_scale, x_zero_point, y_scale, y_zero_point,
                            lo=-128, hi=127, name="gap"):
        """Global average pool of int8 NCHW ``x`` (``models.pool.global_avg_pool``), as
        Dense passes over groups of channels (:mod:`sw_driver.gap_lowering`); returns
        (N, C, 1, 1) int8."""
        x = np.asarray(x)
        n, c, h, w = x.shape
        hw = h * w
        group = gap_group(c, hw, self.config)
        if group < 1:
            raise ValueError(f"layer {name!r}: {hw} pixels per channel do not fit the "
                             f"engine's buffers")
        multiplier, shift = gap_requantization(x_scale, y_scale, hw, name)
        out = np.empty((n, c), np.int8)
        total = Counters() if self.has_counters else None
        for first in range(0, c, group):
            size = min(group, c - first)
            # Pixel-major: a pixel's channels side by side, as an HWC tensor holds them.
            xs = x[:, first:first + size].transpose(0, 2, 3, 1).reshape(n, hw * size)
            weights = gap_weights(size, hw)
            chunk = dense_chunk(hw * size, self.config)
            for start in range(0, n, chunk):
                out[start:start + chunk, first:first + size] = self.dense(
                    xs[start:start + chunk], weights, None, np.full(size, multiplier),
                    np.full(size, shift), x_zero_point=x_zero_point,
                    y_zero_point=y_zero_point, lo=lo, hi=hi, name=name)
                if total is not None:
                    total = total + self.last_counters
        self.last_counters = total
        return out.reshape(n, c, 1, 1)

    def depthwise_conv2d(self, x, w, bias, multiplier, shift, **options):
        """Depthwise convolution: ``w`` has shape (C, 1, kh, kw)."""
        return self.conv2d(x, w, bias, multiplier, shift, groups=x.shape[1], **options)

    def dense(self, x, w, bias, multiplier, shift, *, x_zero_point, y_zero_point, lo=-128,
              hi=127, name="dense"):
        """``requantize(dense(x, w, bias), ...)``: x (N, K), w (O, K) -> (N, O) int8.

        The batch becomes the pixels of a 1 x N image with K channels and a 1x1 kernel, so
        N samples fill the array's rows instead of one sample per pass.
        """
        x = np.asarray(x)
        if x.ndim != 2 or np.ndim(w) != 2:
            raise ValueError(f"layer {name!r}: dense expects x (N, K) and w (O, K), got "
                             f"{x.shape} and {np.shape(w)}")
        image = np.ascontiguousarray(x.T).reshape(1, x.shape[1], 1, x.shape[0])
        kernel = np.asarray(w).reshape(w.shape[0], w.shape[1], 1, 1)
        out = self.conv2d(image, kernel, bias, multiplier, shift, x_zero_point=x_zero_point,
                          y_zero_point=y_zero_point, lo=lo, hi=hi, name=name)
        return out[0, :, 0, :].T.copy()

    # --- one engine pass --------------------------------------------------------------

    def run_pass(self, engine_pass):
        """Program, run and read back one :class:`~sw_driver.conv_lowering.EnginePass`."""
        return self.run_program(pass_program(engine_pass, self.config),
                                expected_cycles=pass_cycles(engine_pass, self.config))

    def run_program(self, program, *, expected_cycles=None):
        """Run one :class:`PassProgram`; returns ``(beats, counters)`` with beats of shape
        (output_beats, C) int8 and counters None on a device without performance counters.

        With ``expected_cycles`` (the cycle model's figure) the wait for the results has
        the deadline :attr:`deadlines` derives from it; without, the transport's defaults.
        """
        t = self.transport
        deadline = None if expected_cycles is None else self.deadlines.deadline(
            expected_cycles, t.min_cycles_per_second)
        before = self.counters() if self.has_counters else None
        for offset, value in program.csr_writes:
            t.csr_write(offset, value)
        t.dma_write(program.h2c)
        try:
            raw = t.dma_read(program.c2h_bytes, deadline=deadline)
        except TransportError as error:
            status = t.csr_read(Reg.STATUS)
            if status & regs.STATUS_ERROR_MASK:
                self._fail(program.name, status)
            self.reset()
            raise AcceleratorError(
                f"layer pass {program.name!r} timed out: {error}; status was "
                f"{self._describe_status(status)}; the device has been reset") from error
        self._check_finished(program.name)
        return program.decode(raw), (self.counters() - before if self.has_counters else None)

    # --- status -----------------------------------------------------------------------

    @property
    def last_counters(self):
        """:class:`Counters` of the last layer; refused on a device without counters."""
        if not self.has_counters:
            raise AcceleratorError(f"no performance counters to read: {NO_PERF}")
        return self._last_counters

    @last_counters.setter
    def last_counters(self, counters):
        self._last_counters = counters

    @property
    def last_cycles(self):
        """Device cycles of the last layer, or None on a device without counters (for
        profiles, which then leave the figure out rather than show 0)."""
        return self._last_counters.cycles if self.has_counters else None

    def counters(self):
        """The counters' values now; refused on a device without them (:data:`NO_PERF`)."""
        if not self.has_counters:
            raise AcceleratorError(f"no performance counters to read: {NO_PERF}")
        read = self.transport.csr_read
        return Counters(cycles=read(Reg.PERF_CYCLES), busy=read(Reg.PERF_BUSY),
                        macs=read(Reg.PERF_MACS_LO) | read(Reg.PERF_MACS_HI) << 32,
                        stalls=read(Reg.PERF_STALLS), compute=read(Reg.PERF_COMPUTE))

    def reset(self):
        """Abort whatever runs and clear the status, leaving the device ready."""
        self.transport.csr_write(Reg.CTRL, regs.CTRL_SOFT_RESET_MASK)
        self.transport.abort_dma()
        self.transport.csr_write(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK)

    def _check_finished(self, name):
        status = self.transport.csr_read(Reg.STATUS)
        if status & regs.STATUS_ERROR_MASK or not status & regs.STATUS_DONE_MASK:
            self._fail(name, status)

    def _fail(self, name, status):
        code = self.transport.csr_read(Reg.ERROR_CODE)
        self.reset()
        raise AcceleratorError(
            f"layer pass {name!r} failed: status {self._describe_status(status)}, error "
            f"code {code} ({ERROR_MEANINGS.get(code, 'unknown')}); the device has been reset")

    @staticmethod
    def _describe_status(status):
        bits = [name for name, mask in (("busy", regs.STATUS_BUSY_MASK),
                                        ("done", regs.STATUS_DONE_MASK),
                                        ("error", regs.STATUS_ERROR_MASK)) if status & mask]
        return "+".join(bits) or "idle"
