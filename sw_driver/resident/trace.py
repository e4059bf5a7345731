"""Which data-memory byte each stream byte of a layer's passes is: the layer-at-a-time code
run on index tensors.

The compiler does not restate how a layer becomes passes. It runs the very methods the
layer-at-a-time driver runs (``Accelerator.conv2d``, ``dense``, ``max_pool2d``, ``add``) on
an accelerator whose ``run_program`` records each :class:`PassProgram` instead of sending
it, with inputs whose values encode the identity of each element: a byte of ``id + 1``
(three runs give 24 bits), and all-zero and all-minus-one runs to tell the bytes that
depend on the input (elements) from those that do not (weights, parameters, padding).
The results the recorder hands back encode their own stream position the same way, so the
method's own unpacking (``assemble_output`` and the like) says which output element each
device-to-host byte becomes. Whatever the lowering does (row bands, channel splits, the
strided 1x1 skip, the fused pool, depthwise groups), the trace follows.
"""

from dataclasses import dataclass

import numpy as np

from contract.regmap import pack_config
from contract.streams import POOL_MAX_WIDTH

from ..accelerator import Accelerator, Counters
from ..regs import ID_VALUE, MAP_VERSION, Reg
from ..transport.base import Transport

__all__ = ["PassTrace", "trace_layer"]

#: Bits of an element id the probes carry (three int8 runs).
ID_BITS = 24


class _Registers(Transport):
    """The discovery registers of an accelerator of ``config``; nothing moves."""

    def __init__(self, config, pool_max_width):
        self.values = {Reg.ID: ID_VALUE, Reg.VERSION: MAP_VERSION,
                       Reg.CONFIG: pack_config(rows=config.rows, cols=config.cols,
                                               acc_width=config.acc_width,
                                               add_lanes=config.add_lanes,
                                               **config.features()),
                       Reg.ACT_DEPTH: config.act_depth, Reg.WEIGHT_DEPTH: config.weight_depth,
                       Reg.PARAM_DEPTH: config.max_col_tiles,
                       Reg.POOL_MAX_WIDTH: pool_max_width}

    def csr_read(self, offset):
        return self.values.get(offset, 0)

    def csr_write(self, offset, value):
        pass

    def dma_write(self, data):
        raise AssertionError("the trace records programs; it never sends them")

    def dma_read(self, nbytes, *, deadline=None):
        raise AssertionError("the trace records programs; it never sends them")


class _Recorder(Accelerator):
    """An :class:`Accelerator` whose passes are recorded; results encode their position."""

    def __init__(self, config, pool_max_width):
        super().__init__(_Registers(config, pool_max_width))
        self.probe = 0
        self.records = []
        self._position = 0

    def run_program(self, program, *, expected_cycles=None):
        positions = np.arange(self._position, self._position + program.c2h_bytes) + 1
        self._position += program.c2h_bytes
        raw = ((positions >> (8 * self.probe)) & 0xFF).astype(np.uint8).tobytes()
        self.records.append((program, expected_cycles))
        return program.decode(raw), (Counters() if self.has_counters else None)


@dataclass
class PassTrace:
    """One pass of a layer, traced.

    Attributes
    ----------
    program : sw_driver.accelerator.PassProgram
        The program layer-at-a-time sends (with the zero input: its element bytes are 0).
    expected_cycles : int or None
        The cycle model's figure the driver gives the pass (None for POOL and ADD).
    h2c_ids : numpy.ndarray of int64
        Per host-to-device byte: the element id it carries, -1 for a byte that does not
        depend on the input (a constant: the program's own byte).
    c2h_ids : numpy.ndarray of int64
        Per device-to-host byte: the element id it becomes, -1 for a byte dropped.
    """

    program: object
    expected_cycles: int | None
    h2c_ids: np.ndarray
    c2h_ids: np.ndarray


def trace_layer(run, input_ids, output_ids, config, pool_max_width=POOL_MAX_WIDTH):
    """Trace ``run(accelerator, *inputs) -> output`` over index inputs.

    Parameters
    ----------
    run : callable
        Calls one layer-at-a-time method of the accelerator it is given.
    input_ids : list of numpy.ndarray of int64
        Element ids (>= 0) of each input, in the shape ``run`` takes.
    output_ids : numpy.ndarray of int64
        Element id of each element of ``run``'s output (its shape), -1 for a result that
        is not kept (a padding channel).
    config : ConvEngineConfig

    Returns
    -------
    list of PassTrace
    """
    for ids in input_ids:
        if ids.size and (ids.min() < 0 or ids.max() + 1 >= 1 << ID_BITS):
            raise ValueError(f"element ids must lie in [0, 2**{ID_BITS} - 1)")

    def record(arrays, probe=0):
        recorder = _Recorder(config, pool_max_width)
        recorder.probe = probe
        out = run(recorder, *arrays)
        return recorder.records, np.asarray(out)

    zero, _ = record([np.zeros(ids.shape, np.int8) for ids in input_ids])
    ones, _ = record([np.full(ids.shape, -1, np.int8) for ids in input_ids])
    probes = [record([(((ids + 1) >> (8 * k)) & 0xFF).astype(np.uint8).view(np.int8)
                      for ids in input_ids], probe=k) for k in range(ID_BITS // 8)]
    position = sum(((out.view(np.uint8).astype(np.int64)) << (8 * k))
                   for k, (_, out) in enumerate(probes)) - 1
    if position.shape != output_ids.shape:
        raise ValueError(f"the layer's output has shape {position.shape}, its ids "
                         f"{output_ids.shape}")
    total = sum(program.c2h_bytes for program, _ in zero)
    c2h = np.full(total, -1, np.int64)
    c2h[position.reshape(-1)] = output_ids.reshape(-1)
    traces, offset = [], 0
    for index, (program, cycles) in enumerate(zero):
        z = np.frombuffer(program.h2c, np.uint8)
        m = np.frombuffer(ones[index][0].h2c, np.uint8)
        ids = sum(np.frombuffer(records[index][0].h2c, np.uint8).astype(np.int64) << (8 * k)
                  for k, (records, _) in enumerate(probes)) - 1
        ids = np.where(z != m, ids, -1)
        traces.append(PassTrace(program, cycles, ids,
                                c2h[offset:offset + program.c2h_bytes]))
        offset += program.c2h_bytes
    return traces
