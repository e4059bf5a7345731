"""The host link's word: ``contract.streams.WORD_BITS`` of data and ``last``, the beat of
both DMA streams (``h2c`` into the device, ``c2h`` out of it)."""

from amaranth.lib import data

from contract.streams import WORD_BITS


def word_layout():
    return data.StructLayout({"data": WORD_BITS, "last": 1})
