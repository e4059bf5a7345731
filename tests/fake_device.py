"""A transport that answers only an accelerator's discovery registers: providers built on
it give their real refusals and estimates, and nothing can run (any DMA fails the test)."""

from sw_driver.providers.sim import DEFAULT_CONFIG
from sw_driver.regs import MAP_VERSION, Reg
from sw_driver.transport.base import Transport


class Registers(Transport):
    """The discovery registers of an accelerator of ``config``; no DMA."""

    def __init__(self, config=DEFAULT_CONFIG):
        self.values = {Reg.ID: 0x54455353, Reg.VERSION: MAP_VERSION,
                       Reg.CONFIG: config.rows | config.cols << 8 | config.acc_width << 16,
                       Reg.ACT_DEPTH: config.act_depth, Reg.WEIGHT_DEPTH: config.weight_depth,
                       Reg.PARAM_DEPTH: config.max_col_tiles}

    def csr_read(self, offset):
        return self.values.get(offset, 0)

    def csr_write(self, offset, value):
        pass

    def dma_write(self, data):
        raise AssertionError("a device that only answers its registers was asked to move data")

    def dma_read(self, nbytes, *, deadline=None):
        raise AssertionError("a device that only answers its registers was asked to move data")

    def abort_dma(self):
        pass
