"""A transport that answers only an accelerator's discovery registers: providers built on
it give their real refusals and estimates, and nothing can run (any DMA fails the test)."""

from contract.regmap import pack_config
from sw_driver.providers.sim import DEFAULT_CONFIG
from sw_driver.regs import MAP_VERSION, Reg
from sw_driver.transport.base import Transport


class Registers(Transport):
    """The discovery registers of an accelerator of ``config`` (its optional blocks in
    CONFIG; ``pool_max_width`` in POOL_MAX_WIDTH, 0: no pool register); no DMA."""

    def __init__(self, config=DEFAULT_CONFIG, *, pool_max_width=0):
        self.values = {Reg.ID: 0x54455353, Reg.VERSION: MAP_VERSION,
                       Reg.CONFIG: pack_config(rows=config.rows, cols=config.cols,
                                               acc_width=config.acc_width,
                                               **config.features()),
                       Reg.ACT_DEPTH: config.act_depth, Reg.WEIGHT_DEPTH: config.weight_depth,
                       Reg.PARAM_DEPTH: config.max_col_tiles,
                       Reg.POOL_MAX_WIDTH: pool_max_width,
                       Reg.RES_DATA_WORDS: config.resident_words,
                       Reg.RES_PROGRAM_WORDS: config.program_words}

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
