"""The providers' cost models: what a layer costs on each kind of provider, for the planner.

Each provider owns its estimate (``estimate(layer, shape)``, a
:class:`~sw_driver.providers.Cost` or None); the models they make it with live here, beside
them, so the planner (``sw_driver/planner.py``) holds placement only and knows no model.

- **An accelerator** (:func:`device_work`): the pass list the driver would run, counted:
  device cycles ``ceil(OH*OW/R) * ceil(C_out/C) * C_in*kh*kw`` per image plus loading and
  output-stream cycles plus a fixed latency per pass (``sw_driver.cycle_model.pass_cycles``);
  MaxPool and Add stream their beats (:func:`pool_work`, :func:`add_work`). The "pcie"
  provider divides the cycles by its clock and adds the link (:class:`LinkModel`): a fixed
  cost per DMA transfer and per register access, and the bytes at the sustained bandwidth.
- **The CPU** (:func:`cpu_estimate`): a fixed cost per call plus its MACs (or elements, for
  MaxPool and Add) at a rate (:class:`CostModel`).
"""

from dataclasses import dataclass

import numpy as np

from contract.postprocess import add_units
from contract.streams import add_words, output_words

from .. import graph as g
from ..accelerator import pass_program, skip_strided_1x1
from ..cycle_model import pass_cycles
from ..gap_lowering import dense_chunk, gap_group
from ..shapes import conv_output_hw
from .base import Cost

__all__ = ["CSR_READS_PER_PASS", "CostModel", "DeviceWork", "LinkModel", "add_cycles_per_beat",
           "add_work", "cpu_estimate", "dense_chunk", "device_work", "format_seconds", "macs",
           "pool_work"]

#: CSR reads per pass the driver makes besides the descriptor writes: performance counters
#: before and after (6 registers each) and the final status.
CSR_READS_PER_PASS = 13


@dataclass(frozen=True)
class LinkModel:
    """What moving a pass over the host link costs (defaults: Xilinx XDMA, PCIe Gen3 x8).

    Parameters
    ----------
    transfer_seconds : float
        Fixed cost of one DMA transfer (system call, descriptor set-up, completion
        interrupt): about 55 us with the XDMA driver in published measurements.
    bytes_per_second : float
        Sustained DMA bandwidth: about 7 GB/s on Gen3 x8 (8 GT/s x 8 lanes after
        128b/130b coding and TLP overhead).
    csr_seconds : float
        One register access on the AXI4-Lite BAR (a read is a full round trip, about 1 us).
    """

    transfer_seconds: float = 55e-6
    bytes_per_second: float = 7e9
    csr_seconds: float = 1e-6

    def seconds(self, work):
        """Link time of :class:`DeviceWork`: two transfers per pass (h2c, c2h)."""
        return (2 * work.passes * self.transfer_seconds
                + (work.h2c_bytes + work.c2h_bytes) / self.bytes_per_second
                + work.csr_accesses * self.csr_seconds)


@dataclass(frozen=True)
class CostModel:
    """The rates the CPU provider's estimate is made with: ``layer_seconds + MACs / rate``.

    Parameters
    ----------
    cpu_macs_per_second : float
        The CPU provider's Conv/Dense rate: 2e9 MAC/s, between the 1 to 3 GMAC/s its exact
        float32 BLAS kernels reach on one core of the development machine for
        16 to 64-channel 3x3 layers.
    cpu_layer_seconds : float
        Fixed cost of one Conv/Dense call on the CPU (NumPy's per-call overhead, im2col
        set-up, requantization): about 20 us for the digits CNN's small layers; also taken
        for MaxPool and Add.
    cpu_elements_per_second : float
        The CPU provider's MaxPool and Add rate in int8 input elements: 1e9, a rough figure
        (a few NumPy passes over the data); what matters is that a small pool or add stays
        on the host rather than pay two DMA transfers over PCIe.
    """

    cpu_macs_per_second: float = 2e9
    cpu_layer_seconds: float = 20e-6
    cpu_elements_per_second: float = 1e9

    def __post_init__(self):
        for name in ("cpu_macs_per_second", "cpu_layer_seconds", "cpu_elements_per_second"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0) or (
                    name != "cpu_layer_seconds" and value == 0):
                raise ValueError(f"{name} must be a positive number, not {value!r}")


@dataclass(frozen=True)
class DeviceWork:
    """An accelerator's work for one layer run, counted from the passes the driver runs.

    Attributes
    ----------
    passes : int
        Engine passes (descriptor, start, one h2c and one c2h transfer each).
    cycles : int
        Modelled device cycles over all passes.
    h2c_bytes, c2h_bytes : int
        DMA bytes to and from the device.
    csr_accesses : int
        Register reads and writes.
    """

    passes: int
    cycles: int
    h2c_bytes: int
    c2h_bytes: int
    csr_accesses: int

    @property
    def bytes(self):
        return self.h2c_bytes + self.c2h_bytes

    def __add__(self, other):
        return DeviceWork(self.passes + other.passes, self.cycles + other.cycles,
                          self.h2c_bytes + other.h2c_bytes, self.c2h_bytes + other.c2h_bytes,
                          self.csr_accesses + other.csr_accesses)

    def __mul__(self, times):
        return DeviceWork(self.passes * times, self.cycles * times, self.h2c_bytes * times,
                          self.c2h_bytes * times, self.csr_accesses * times)


def _passes_work(passes, config):
    total = DeviceWork(0, 0, 0, 0, 0)
    for engine_pass in passes:
        program = pass_program(engine_pass, config)
        total = total + DeviceWork(1, pass_cycles(engine_pass, config), len(program.h2c),
                                   program.c2h_bytes,
                                   len(program.csr_writes) + CSR_READS_PER_PASS)
    return total


def _gap_work(input_shape, config):
    """A global average pool's Dense passes (:mod:`sw_driver.gap_lowering`)."""
    from ..conv_lowering import lower_conv2d

    n, c, h, w = input_shape
    hw = h * w
    group = gap_group(c, hw, config)
    if group < 1:
        raise ValueError(f"{hw} pixels per channel do not fit the engine's buffers")
    work = DeviceWork(0, 0, 0, 0, 0)
    for first in range(0, c, group):
        size = min(group, c - first)
        chunk = dense_chunk(hw * size, config)
        for start in range(0, n, chunk):
            x = np.zeros((1, hw * size, 1, min(chunk, n - start)), np.int8)
            weight = np.zeros((size, hw * size, 1, 1), np.int8)
            passes = lower_conv2d(x, weight, None, np.full(size, 1 << 30), np.full(size, 1),
                                  x_zero_point=0, y_zero_point=0, config=config, name="gap")
            work = work + _passes_work(passes, config)
    return work


def device_work(layer, input_shape, config):
    """What running ``layer`` on input ``input_shape`` costs the accelerator ``config``.

    The driver's own lowering (:func:`~sw_driver.conv_lowering.lower_conv2d`) is run on
    zeros of one image's shape, so the passes counted are the ones the driver will run;
    a batch of N convolutions is N times that (one pass set per image), a Dense layer one
    pass per :func:`dense_chunk` samples.

    Raises
    ------
    ValueError
        The engine cannot run the layer at this shape (the message names the limit).
    """
    from ..conv_lowering import lower_conv2d

    if isinstance(layer, g.Conv):
        n, c, h, w = input_shape
        x = np.zeros((1, c, h, w), np.int8)
        x, stride = skip_strided_1x1(x, layer.weight, layer.stride, layer.padding)
        passes = lower_conv2d(x, layer.weight, layer.bias, layer.multiplier, layer.shift,
                              x_zero_point=layer.x_zero_point,
                              y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
                              stride=stride, padding=layer.padding,
                              dilation=layer.dilation, groups=layer.groups, config=config,
                              name=layer.name)
        return _passes_work(passes, config) * n
    if isinstance(layer, g.Dense):
        k = input_shape[-1]
        full, rest = divmod(int(np.prod(input_shape[:-1])), dense_chunk(k, config))
        work = DeviceWork(0, 0, 0, 0, 0)
        for size, count in ((dense_chunk(k, config), full), (rest, 1)):
            if size and count:
                x = np.zeros((1, k, 1, size), np.int8)
                weight = layer.weight.reshape(*layer.weight.shape, 1, 1)
                passes = lower_conv2d(x, weight, layer.bias, layer.multiplier, layer.shift,
                                      x_zero_point=layer.x_zero_point,
                                      y_zero_point=layer.y_zero_point, lo=layer.lo,
                                      hi=layer.hi, config=config, name=layer.name)
                work = work + _passes_work(passes, config) * count
        return work
    if isinstance(layer, g.MaxPool):
        return pool_work(input_shape, config)
    if isinstance(layer, g.GlobalAveragePool):
        return _gap_work(input_shape, config)
    if isinstance(layer, g.Add):
        return add_work(_add_size(layer, input_shape), config)
    raise ValueError(f"layer {layer.name!r}: {layer.op} does not run on the accelerator")


#: Register writes of a POOL pass and of an ADD pass (sw_driver.accelerator's programs).
POOL_CSR_WRITES, ADD_CSR_WRITES = 7, 15
#: Fixed cycles of a POOL and of an ADD pass: fitted on the twin's PERF_CYCLES (31 for the
#: pool on the 4x4 twin; 73 for the add on the 8x8 twin, 2x2 to 32x32 maps: 69 with its own
#: unit, four more through the shared post-processing bank, whose add path is four stages
#: longer, contract.postprocess.ADD_LATENCY). One more for the pool and two for the add
#: since the skid buffers on their input and output streams (hw/top.py, hw/conv_engine.py;
#: measured on the twins).
POOL_FIXED_CYCLES, ADD_FIXED_CYCLES = 32, 75
#: Cycles per POOL or ADD input beat beyond its words: none since the loader takes a beat's
#: first word in the cycle the gathered one goes out (hw/loader.py).
EXTRA_CYCLES_PER_BEAT = 0


def pool_work(shape, config):
    """One POOL pass: every (image, group of C channels) is a frame of H x W input beats
    (an odd last row or column is sent too and dropped by the pool, ``hw/maxpool.py``);
    one output beat per 2x2 window."""
    n, c, h, w = shape
    frames = n * -(-c // config.cols)
    words = output_words(config.cols)
    beats = frames * h * w
    out_beats = frames * (h // 2) * (w // 2)
    # With one word a beat (C = 4) each output beat also costs an input cycle; two-word
    # beats hide it (measured on the 4x4 and 8x8 twins: within 2 cycles, 4 % on odd sizes).
    stalls = out_beats if words == 1 else 0
    return DeviceWork(1, POOL_FIXED_CYCLES + beats * (words + EXTRA_CYCLES_PER_BEAT) + stalls,
                      beats * words * 4, out_beats * words * 4,
                      POOL_CSR_WRITES + CSR_READS_PER_PASS)


def _add_size(layer, shape):
    """Elements of an Add's output: the first input broadcast with the constant (a second
    tensor input is taken to have the first's shape, as residual adds do)."""
    if layer.constant is not None:
        shape = np.broadcast_shapes(tuple(shape), layer.constant.shape)
    return int(np.prod(shape))


def add_cycles_per_beat(config):
    """Cycles one ADD beat (C pairs) takes on an engine of ``config``: its words, or the
    post-processing bank's ``C // add_units(C)`` in add mode if slower (8 on the 8x8 with
    one add datapath, 4 with two: ``config.add_lanes``)."""
    cols = config.cols
    return max(add_words(cols) + EXTRA_CYCLES_PER_BEAT,
               cols // add_units(cols, config.add_lanes))


def add_work(size, config):
    """One ADD pass: C pairs per input beat, one output beat of C each."""
    beats = -(-size // config.cols)
    words = add_words(config.cols)
    return DeviceWork(1, ADD_FIXED_CYCLES + beats * add_cycles_per_beat(config),
                      beats * words * 4, beats * output_words(config.cols) * 4,
                      ADD_CSR_WRITES + CSR_READS_PER_PASS)


def macs(layer, input_shape):
    """Multiply-accumulates of a Conv or Dense layer on ``input_shape``."""
    if isinstance(layer, g.Conv):
        n, _, h, w = input_shape
        oh, ow = conv_output_hw(layer, h, w)
        return n * oh * ow * int(np.prod(layer.weight.shape))
    if isinstance(layer, g.Dense):
        return int(np.prod(input_shape[:-1])) * int(np.prod(layer.weight.shape))
    return 0


def cpu_estimate(layer, input_shape, model):
    """The CPU provider's :class:`~sw_driver.providers.Cost` (see :class:`CostModel`) for
    the layers an accelerator also runs (Conv, Dense, MaxPool, Add); None for the others."""
    if input_shape is None:
        return None
    if isinstance(layer, (g.MaxPool, g.Add, g.GlobalAveragePool)):
        count = int(np.prod(input_shape)) * (2 if isinstance(layer, g.Add) else 1)
        return Cost(seconds=model.cpu_layer_seconds + count / model.cpu_elements_per_second,
                    note=f"{count:,} elements at {model.cpu_elements_per_second / 1e9:g} G/s + "
                         f"{format_seconds(model.cpu_layer_seconds)}")
    if not isinstance(layer, (g.Conv, g.Dense)):
        return None
    count = macs(layer, input_shape)
    return Cost(seconds=model.cpu_layer_seconds + count / model.cpu_macs_per_second,
                    bytes=0, note=f"{count:,} MACs at {model.cpu_macs_per_second / 1e9:g} "
                                  f"GMAC/s + {format_seconds(model.cpu_layer_seconds)}")


def format_seconds(value):
    return f"{value * 1e6:,.1f} us" if value < 1e-3 else f"{value * 1e3:,.2f} ms"
