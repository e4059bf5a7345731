"""A provider made to mismatch on purpose (a test double for the soak's mismatch report).

Loaded by ``TESSERA_SOAK_PROVIDERS=tests/soak_double.py`` (tessera/soak/backends.py), it
registers ``corrupt``: the CPU provider, except that for the layers :func:`corrupts` picks
the first output element has its lowest bit flipped. The choice is a function of the
layer's input bytes only, so it follows the soak's ``(seed, index)`` exactly and the same
cases fail in a Ray worker, in a local loop and in the one-case repro command.
"""

import zlib

import numpy as np

from sw_driver.providers import PROVIDERS, CPUProvider

NAME = "corrupt"
#: About one case in this many is corrupted.
EVERY = 5


def corrupts(inputs):
    """Whether the double corrupts the output of a layer fed ``inputs``."""
    crc = 0
    for array in inputs:
        crc = zlib.crc32(np.ascontiguousarray(array).tobytes(), crc)
    return crc % EVERY == 0


class CorruptingCPU(CPUProvider):
    """The CPU provider, wrong on purpose for the layers :func:`corrupts` picks."""

    def run(self, layer, inputs, *args, **kwargs):
        output = super().run(layer, inputs, *args, **kwargs)
        if corrupts(inputs):
            output = np.array(output, copy=True)
            output.flat[0] ^= 1
        return output


PROVIDERS[NAME] = CorruptingCPU
