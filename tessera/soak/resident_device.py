"""A device with a resident player, in software: the spec's host protocol (RES_* registers,
loads, checksum, runs, faults) in front of a layer-at-a-time device, whose program it runs
with the driver's software player (``sw_driver.resident.player.play_memory``). The runner's
tests drive it exactly as they will drive the RTL."""

import numpy as np

from contract.resident import checksum_step
from sw_driver import regs
from sw_driver.accelerator import Accelerator, AcceleratorError
from sw_driver.regs import Reg
from sw_driver.resident import play_memory
from sw_driver.resident.runner import (
    CTRL_CLEAR_CHECKSUM,
    CTRL_LOAD_DATA,
    CTRL_LOAD_PROGRAM,
    CTRL_READ_DATA,
    CTRL_RUN,
    RES,
    STATUS_DONE,
    STATUS_ERROR,
)
from sw_driver.transport.base import Transport, TransportTimeout

#: RES_ERROR of a record the player refuses (contract.regmap's BAD_RECORD once merged).
BAD_RECORD = 0x10


class ResidentDevice(Transport):
    """``inner`` (a layer-at-a-time Transport) plus a resident player of the given depths.

    ``corrupt_next_load``: drop the last word of the next load (the checksum must catch
    it); ``fail_next_run``: the next run stops with the accelerator's error (FORCED).
    """

    def __init__(self, inner, *, data_words, program_words):
        self.inner = inner
        self.accelerator = Accelerator(inner)
        self.data = np.zeros(data_words, np.uint32)
        self.program = np.zeros(program_words, np.uint32)
        self.regs = {name: 0 for name in RES}
        self.regs["DATA_WORDS"], self.regs["PROGRAM_WORDS"] = data_words, program_words
        self.offsets = {offset: name for name, offset in RES.items()}
        self.mode, self.host = None, []
        self.corrupt_next_load = self.fail_next_run = False
        self.runs = 0
        #: ``play_memory``'s ``after_pass`` hook (the soak checks each layer's output).
        self.after_pass = None

    def csr_read(self, offset):
        if offset in self.offsets:
            return self.regs[self.offsets[offset]]
        return self.inner.csr_read(offset)

    def csr_write(self, offset, value):
        name = self.offsets.get(offset)
        if name is None:
            if offset == Reg.CTRL and value & regs.CTRL_SOFT_RESET_MASK:
                self.mode, self.host = None, []
            self.inner.csr_write(offset, value)
        elif name == "STATUS":
            self.regs["STATUS"] &= ~value
        elif name == "CTRL":
            if value & CTRL_CLEAR_CHECKSUM:
                self.regs["CHECKSUM_A"] = self.regs["CHECKSUM_B"] = 0
            if value & (CTRL_LOAD_DATA | CTRL_LOAD_PROGRAM):
                self.mode = "data" if value & CTRL_LOAD_DATA else "program"
            if value & CTRL_READ_DATA:
                self.mode = "read"
            if value & CTRL_RUN:
                self.mode, self.host = "run", []
        elif name in ("ADDR", "COUNT", "LOOPS"):
            self.regs[name] = value

    def dma_write(self, data):
        words = np.frombuffer(bytes(data), "<u4")
        if self.mode in ("data", "program"):
            if self.corrupt_next_load:
                self.corrupt_next_load, words = False, words[:-1]
            memory = self.data if self.mode == "data" else self.program
            address = self.regs["ADDR"]
            memory[address:address + len(words)] = words
            state = (self.regs["CHECKSUM_A"], self.regs["CHECKSUM_B"])
            for word in words:
                state = checksum_step(state, int(word))
            self.regs["CHECKSUM_A"], self.regs["CHECKSUM_B"] = state
            self.regs["STATUS"] |= STATUS_DONE  # the load is through, as the player says
            self.mode = None
        elif self.mode == "run":
            self.host.append(words)
        else:  # a layer-at-a-time pass
            self.inner.dma_write(data)

    def dma_read(self, nbytes, *, deadline=None):
        if self.mode == "read":
            address = self.regs["ADDR"]
            self.mode = None
            return self.data[address:address + nbytes // 4].astype("<u4").tobytes()
        if self.mode != "run":  # a layer-at-a-time pass
            return self.inner.dma_read(nbytes, deadline=deadline)
        self.mode = None
        self.runs += 1
        if self.fail_next_run:
            self.fail_next_run = False
            self.inner.csr_write(Reg.STATUS, 0)
            self.regs.update(STATUS=STATUS_ERROR, ERROR=0xEE, PC=0)
            raise TransportTimeout("the resident program stopped with an error")
        host = np.concatenate(self.host) if self.host else np.zeros(0, np.uint32)
        try:
            out = play_memory(self.program, self.data, self.accelerator, host,
                              self.regs["LOOPS"], after_pass=self.after_pass)
        except AcceleratorError as exc:
            self.regs.update(STATUS=STATUS_ERROR, ERROR=BAD_RECORD)
            raise TransportTimeout(str(exc)) from exc
        self.regs["STATUS"] = STATUS_DONE
        if 4 * len(out) != nbytes:
            raise AssertionError(f"the program sent {4 * len(out)} bytes, {nbytes} read")
        return out.astype("<u4").tobytes()

    def abort_dma(self):
        self.mode, self.host = None, []
        self.inner.abort_dma()
