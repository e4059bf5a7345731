"""A layer-at-a-time device made of the golden models: the fastest stand-in for the twin.

It answers the discovery registers of a configuration and interprets each pass the way
``hw/top.py`` documents the streams: a CONV pass's parameter entries, weight rows and
activations are decoded from the host-to-device bytes and run by
``sw_driver.conv_lowering.engine_reference`` (the engine's executable specification; the
fused pool by ``models.pool.max_pool2d``), a POOL pass by ``models.pool.max_pool2d`` per
frame, an ADD pass by the definition of ``models.eltwise.add`` with the register's
multipliers. Nothing of the driver's packing is reused for decoding, so a packing mistake
shows.
"""

import numpy as np

from contract.descriptor import ADD_PARAM_FIELDS, DESCRIPTOR_FIELDS
from contract.regmap import pack_config
from contract.streams import (
    ACTIVATIONS_PER_WORD,
    PARAM_ENTRY_FIELDS,
    POOL_MAX_WIDTH,
    add_words,
    output_words,
    param_entry_offsets,
    param_words,
    weight_words,
)
from models.eltwise import ADD_LEFT_SHIFT
from models.pool import max_pool2d
from models.requant import rounding_shift
from sw_driver import regs
from sw_driver.conv_lowering import EnginePass, engine_reference, first_weight_rows
from sw_driver.regs import Opcode, Reg
from sw_driver.transport.base import Transport


def _signed(value, width):
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


class GoldenDevice(Transport):
    """An accelerator of ``config`` computed by the golden models (see the module)."""

    def __init__(self, config, *, pool_max_width=POOL_MAX_WIDTH):
        self.config = config
        self.regs = {Reg.ID: regs.ID_VALUE, Reg.VERSION: regs.MAP_VERSION,
                     Reg.CONFIG: pack_config(rows=config.rows, cols=config.cols,
                                             acc_width=config.acc_width,
                                             add_lanes=config.add_lanes, **config.features()),
                     Reg.ACT_DEPTH: config.act_depth, Reg.WEIGHT_DEPTH: config.weight_depth,
                     Reg.PARAM_DEPTH: config.max_col_tiles, Reg.POOL_MAX_WIDTH: pool_max_width}
        self.h2c = bytearray()
        self.started = False
        self.passes = 0

    def csr_read(self, offset):
        return self.regs.get(offset, 0)

    def csr_write(self, offset, value):
        if offset == Reg.STATUS:
            self.regs[Reg.STATUS] = self.regs.get(Reg.STATUS, 0) & ~value
        elif offset == Reg.CTRL:
            if value & regs.CTRL_SOFT_RESET_MASK:
                self.started, self.h2c = False, bytearray()
            if value & regs.CTRL_START_MASK:
                self.started = True
        else:
            self.regs[offset] = value

    def dma_write(self, data):
        self.h2c += bytes(data)

    def abort_dma(self):
        self.h2c = bytearray()

    def dma_read(self, nbytes, *, deadline=None):
        assert self.started, "a DMA read with no pass started"
        opcode = self.regs.get(Reg.OPCODE)
        out = {Opcode.CONV: self._conv, Opcode.POOL: self._pool, Opcode.ADD: self._add}[
            opcode]()
        assert not self.h2c, f"{len(self.h2c)} host-to-device bytes left over"
        assert len(out) == nbytes, f"the pass gives {len(out)} bytes, {nbytes} were asked"
        self.started = False
        self.passes += 1
        self.regs[Reg.STATUS] = regs.STATUS_DONE_MASK
        return out

    def _take(self, nbytes):
        data, self.h2c = bytes(self.h2c[:nbytes]), self.h2c[nbytes:]
        assert len(data) == nbytes, f"the pass wants {nbytes} bytes, {len(data)} were sent"
        return data

    def _beats_out(self, beats):
        cols = self.config.cols
        padded = np.zeros((len(beats), 4 * output_words(cols)), np.uint8)
        padded[:, :cols] = np.asarray(beats, np.int8).view(np.uint8)
        return padded.tobytes()

    def _conv(self, cols=None):
        cols = self.config.cols
        # A register never written reads 0 (CONV_DEPTHWISE, which only a device with the
        # depthwise mode is sent).
        desc = {name: _signed(self.regs.get(Reg[f"CONV_{name.upper()}"], 0), width) if signed
                else self.regs.get(Reg[f"CONV_{name.upper()}"], 0)
                for name, width, signed, _ in DESCRIPTOR_FIELDS}
        tiles = desc["col_tiles"]
        entries = self.regs[Reg.LOAD_PARAMS]
        fields = {name: np.zeros((entries, cols), np.int64) for name, _, _ in PARAM_ENTRY_FIELDS}
        offsets = param_entry_offsets(cols)
        for e in range(entries):
            value = int.from_bytes(self._take(4 * param_words(cols)), "little")
            for name, width, signed in PARAM_ENTRY_FIELDS:
                offset, _ = offsets[name]
                for lane in range(cols):
                    v = (value >> (offset + lane * width)) & ((1 << width) - 1)
                    fields[name][e, lane] = _signed(v, width) if signed else v
        rows = self.regs[Reg.LOAD_WEIGHTS]

        def weights(count):
            raw = np.frombuffer(self._take(4 * weight_words(cols) * count), np.int8)
            return raw.reshape(count, 4 * weight_words(cols))[:, :cols]
        first = weights(first_weight_rows(desc, rows))
        count = self.regs[Reg.LOAD_ACT]
        act = np.frombuffer(self._take(-(-count // ACTIVATIONS_PER_WORD) * 4), np.int8)[:count]
        rest = weights(rows - first.shape[0])
        oh, ow = self.regs[Reg.POOL_HEIGHT], self.regs[Reg.POOL_WIDTH]
        p = EnginePass(name="golden", descriptor=desc, activations=act.copy(),
                       weights=np.concatenate([first, rest]), bias=fields["bias"],
                       multiplier=fields["multiplier"], shift=fields["shift"], image=0,
                       channels=np.arange(tiles * cols), out_size=(oh, ow))
        beats = engine_reference(p)
        if self.regs.get(Reg.POOL_ENABLE):
            frames = beats.reshape(tiles, oh, ow, cols).transpose(0, 3, 1, 2)
            beats = max_pool2d(frames, (2, 2), (2, 2)).transpose(0, 2, 3, 1).reshape(-1, cols)
        return self._beats_out(beats)

    def _pool(self):
        cols = self.config.cols
        w, h, frames = (self.regs[Reg.POOL_WIDTH], self.regs[Reg.POOL_HEIGHT],
                        self.regs[Reg.POOL_FRAMES])
        beats = self.regs[Reg.STREAM_BEATS]
        raw = np.frombuffer(self._take(4 * output_words(cols) * beats), np.int8)
        pixels = raw.reshape(beats, -1)[:, :cols].reshape(frames, h, w, cols)
        pooled = max_pool2d(pixels.transpose(0, 3, 1, 2), (2, 2), (2, 2))
        return self._beats_out(pooled.transpose(0, 2, 3, 1).reshape(-1, cols))

    def _add(self):
        cols = self.config.cols
        p = {name: _signed(self.regs[Reg[f"ADD_{name.upper()}"]], width) if signed
             else self.regs[Reg[f"ADD_{name.upper()}"]]
             for name, width, signed, _ in ADD_PARAM_FIELDS}
        beats = self.regs[Reg.STREAM_BEATS]
        raw = np.frombuffer(self._take(4 * add_words(cols) * beats), np.int8)
        pairs = raw.reshape(beats, -1)[:, :2 * cols].astype(np.int64)
        a, b = pairs[:, :cols], pairs[:, cols:]
        a1 = rounding_shift((a - p["a_zero_point"]) << ADD_LEFT_SHIFT,
                            np.int64(p["a_multiplier"]), np.int64(p["a_shift"]))
        b1 = rounding_shift((b - p["b_zero_point"]) << ADD_LEFT_SHIFT,
                            np.int64(p["b_multiplier"]), np.int64(p["b_shift"]))
        y = rounding_shift(a1 + b1, np.int64(p["y_multiplier"]), np.int64(p["y_shift"]))
        return self._beats_out(np.clip(y + p["y_zero_point"], p["lo"], p["hi"]))
