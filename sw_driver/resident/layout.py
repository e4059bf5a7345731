"""How a tensor lies in the data memory, and where the arena puts it.

A tensor of one image, (C, H, W) (a vector (K,) is (K, 1, 1)), lies HWC: element
``(c, y, x)`` at byte ``(y * W + x) * stride + c`` of its block, ``stride`` being C
(*packed*) or C rounded up to 4 (*padded*, so that every pixel starts a 32-bit word). The
bytes past C in a padded pixel, and those past the last element in the last word, are
padding: any pass may write them, none depends on them (its consumers give them zero
weights, or never read them). The compiler starts every tensor packed and pads the ones
whose passes would otherwise read or write part of a word.

Element ids: each tensor owns a disjoint range of *virtual* bytes (word-aligned), so one
integer names a byte of a tensor's block before the arena has placed it; the trace carries
these ids.
"""

from dataclasses import dataclass, field

import numpy as np

from ..errors import ResidentFitError

__all__ = ["Arena", "Storage"]


@dataclass(eq=False)
class Storage:
    """One tensor's block: its geometry, virtual bytes and, once placed, its address."""

    name: str
    channels: int
    height: int
    width: int
    padded: bool = False
    virtual: int = 0  # first virtual byte (a multiple of 4)
    address: int | None = None  # first data-memory word, once placed
    writer: str = ""  # the layer that writes it ("" for a segment input)
    readers: list = field(default_factory=list)

    @property
    def stride(self):
        """Bytes per pixel."""
        return -(-self.channels // 4) * 4 if self.padded else self.channels

    @property
    def bytes(self):
        return self.height * self.width * self.stride

    @property
    def words(self):
        return -(-self.bytes // 4)

    def ids(self, channels=None):
        """Virtual byte of each element, shape (1, channels, H, W); channels past C (up to
        the stride) are the padding bytes of each pixel."""
        channels = self.channels if channels is None else channels
        y, x = np.meshgrid(np.arange(self.height), np.arange(self.width), indexing="ij")
        pixel = (y * self.width + x) * self.stride
        c = np.arange(channels).reshape(-1, 1, 1)
        return (self.virtual + pixel[None] + c)[None].astype(np.int64)

    def all_ids(self):
        """Every virtual byte of the block (words included), in address order."""
        return np.arange(self.virtual, self.virtual + 4 * self.words, dtype=np.int64)

    def element_mask(self):
        """Per byte of the block (its words): whether it holds an element."""
        mask = np.zeros(4 * self.words, bool)
        mask[(self.ids() - self.virtual).reshape(-1)] = True
        return mask


class Arena:
    """First-fit allocation of word blocks in ``[base, base + size)``."""

    def __init__(self, base, size):
        self.base, self.size = base, size
        self.free = [(base, size)]  # sorted (start, words)
        self.peak = 0

    def allocate(self, storage):
        words = storage.words
        for index, (start, size) in enumerate(self.free):
            if size >= words:
                self.free[index:index + 1] = [(start + words, size - words)] \
                    if size > words else []
                storage.address = start
                self.peak = max(self.peak, start + words - self.base)
                return start
        largest = max((size for _, size in self.free), default=0)
        free = sum(size for _, size in self.free)
        what = f"tensor {storage.name!r}" + (f" (output of layer {storage.writer!r})"
                                             if storage.writer else " (the segment's input)")
        raise ResidentFitError(
            f"{what} needs {4 * words} bytes of the arena; its largest free block is "
            f"{4 * largest} bytes ({4 * free} bytes free of the arena's {4 * self.size}, the "
            f"data memory's words past the constants)", what=storage.name,
            needed=4 * words, free=4 * largest)

    def release(self, storage):
        start, words = storage.address, storage.words
        blocks = sorted([*self.free, (start, words)])
        merged = []
        for block in blocks:
            if merged and merged[-1][0] + merged[-1][1] == block[0]:
                merged[-1] = (merged[-1][0], merged[-1][1] + block[1])
            else:
                merged.append(block)
        self.free = merged
