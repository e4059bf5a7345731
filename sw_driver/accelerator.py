"""The accelerator as the driver sees it: discover, program a layer, run it, read back.

Everything here speaks only to a :class:`sw_driver.transport.Transport`, so the same code
runs on the Verilator twin and on a board.
"""

from dataclasses import dataclass

import numpy as np

from hw.config import ArrayConfig
from sw_driver import regs
from sw_driver.errors import TesseraError
from sw_driver.gemm_tiling import assemble_results, operand_beats, plan_gemm
from sw_driver.regs import Opcode, Reg
from sw_driver.transport.base import TransportError

ERROR_NAMES = {1: "unknown opcode", 2: "bad descriptor", 0xEE: "error flag raised"}


class AcceleratorError(TesseraError):
    """A layer failed on the device; the message names the layer and what was seen."""


@dataclass(frozen=True)
class Counters:
    """Performance counters after a layer (deltas over the layer)."""
    cycles: int
    busy: int
    macs: int
    stalls: int


class Accelerator:
    """One Tessera accelerator behind ``transport``.

    Parameters
    ----------
    transport : sw_driver.transport.Transport
    """

    def __init__(self, transport):
        self.transport = transport
        ident = transport.csr_read(Reg.ID)
        if ident != regs.ID_VALUE:
            raise AcceleratorError(f"no Tessera accelerator: ID register reads {ident:#010x}, "
                                   f"expected {regs.ID_VALUE:#010x}")
        version = transport.csr_read(Reg.VERSION)
        if version >> 16 != regs.MAP_VERSION >> 16:
            raise AcceleratorError(f"register map version {version >> 16}.{version & 0xffff} "
                                   f"is not supported by this driver ({regs.MAP_VERSION:#x})")
        word = transport.csr_read(Reg.CONFIG)
        self.config = ArrayConfig(rows=word & 0xFF, cols=(word >> 8) & 0xFF,
                                  acc_width=(word >> 16) & 0xFF)
        transport.csr_write(Reg.IRQ_ENABLE, 0b11)

    def counters(self):
        read = self.transport.csr_read
        return Counters(cycles=read(Reg.PERF_CYCLES), busy=read(Reg.PERF_BUSY),
                        macs=read(Reg.PERF_MACS_LO) | read(Reg.PERF_MACS_HI) << 32,
                        stalls=read(Reg.PERF_STALLS))

    def reset(self):
        """Abort whatever runs and clear the status, leaving the device ready."""
        self.transport.csr_write(Reg.CTRL, regs.CTRL_SOFT_RESET_MASK)
        self.transport.abort_dma()
        self.transport.csr_write(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK)

    def gemm(self, a, b, *, name="gemm"):
        """int32 ``a @ b`` for int8 matrices, computed on the device.

        Returns ``(result, counters)``; raises :class:`AcceleratorError` naming ``name`` if
        the device reports an error or stops answering (the device is reset first).
        """
        rows, cols = self.config.rows, self.config.cols
        plan = plan_gemm(np.shape(a), np.shape(b), rows, cols)
        words_per_beat = -(-(rows + cols) // 4)
        beats = np.zeros((plan.beats, 4 * words_per_beat), np.uint8)
        for index, (a_col, b_row, _) in enumerate(operand_beats(a, b, rows, cols)):
            beats[index, :rows] = a_col.view(np.uint8)
            beats[index, rows:rows + cols] = b_row.view(np.uint8)
        before = self.counters()
        t = self.transport
        t.csr_write(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK)
        t.csr_write(Reg.OPCODE, Opcode.GEMM)
        t.csr_write(Reg.GEMM_K, plan.k)
        t.csr_write(Reg.GEMM_TILES, plan.tiles)
        t.csr_write(Reg.CTRL, regs.CTRL_START_MASK)
        t.dma_write(beats.tobytes())
        try:
            raw = t.dma_read(plan.result_beats * cols * 4)
        except TransportError as error:
            status = t.csr_read(Reg.STATUS)
            if status & regs.STATUS_ERROR_MASK:
                self._fail(name, status)
            self.reset()
            raise AcceleratorError(
                f"layer {name!r} (GEMM {plan.m}x{plan.k}x{plan.n}) timed out: {error}; "
                f"status was {self._describe_status(status)}; the device has been reset"
            ) from error
        self._check_finished(name)
        after = self.counters()
        result = assemble_results(np.frombuffer(raw, np.int32).reshape(-1, cols), plan)
        return result, Counters(*(x - y for x, y in zip(
            (after.cycles, after.busy, after.macs, after.stalls),
            (before.cycles, before.busy, before.macs, before.stalls), strict=True)))

    def _check_finished(self, name):
        status = self.transport.csr_read(Reg.STATUS)
        if status & regs.STATUS_ERROR_MASK or not status & regs.STATUS_DONE_MASK:
            self._fail(name, status)

    def _fail(self, name, status):
        code = self.transport.csr_read(Reg.ERROR_CODE)
        self.reset()
        raise AcceleratorError(
            f"layer {name!r} failed: status {self._describe_status(status)}, error code "
            f"{code} ({ERROR_NAMES.get(code, 'unknown')}); the device has been reset")

    @staticmethod
    def _describe_status(status):
        bits = [name for name, mask in (("busy", regs.STATUS_BUSY_MASK),
                                        ("done", regs.STATUS_DONE_MASK),
                                        ("error", regs.STATUS_ERROR_MASK)) if status & mask]
        return "+".join(bits) or "idle"
