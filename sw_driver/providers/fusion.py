"""Conv + 2x2 MaxPool in one device pass: which pairs to fuse, and the tensor between them.

:meth:`DeviceProvider.prepare <sw_driver.providers.device.DeviceProvider.prepare>` fuses a
Conv with the 2x2 / stride 2 MaxPool that is its only consumer when both run on the same
device and the Conv's output is not a model output. The Conv's run then makes one pass
with the engine's pool (``Accelerator.conv2d(pool=True)``), which moves a quarter of the
output bytes, and returns a :class:`PooledConvOutput`; the MaxPool's run on that device
returns its ``pooled`` array without a pass.

Nothing else may see a half-done tensor: whoever else receives the Conv's output (the
MaxPool falling back to another provider, which :mod:`sw_driver.dispatch` hands
``np.asarray(x)``) gets the Conv's full output, computed then by the golden model, so
results stay bit-identical whatever runs the pool.
"""

import numpy as np

from .. import graph as g

__all__ = ["POOL_WINDOW", "PooledConvOutput", "fusable_pairs"]

#: The one window the device's max pool runs: (kernel, stride, padding).
POOL_WINDOW = ((2, 2), (2, 2), (0, 0, 0, 0))


class PooledConvOutput:
    """A Conv's output of which the device computed only the 2x2 max pool.

    Attributes
    ----------
    pooled : numpy.ndarray
        ``max_pool2d(conv(x), 2, 2)``, int8.
    conv, pool : sw_driver.graph.Layer
        The fused pair.
    shape : tuple of int
        The Conv output's shape (what ``np.shape`` reports).
    """

    dtype = np.dtype(np.int8)

    def __init__(self, pooled, conv, pool, x, shape):
        self.pooled, self.conv, self.pool = pooled, conv, pool
        self._x, self.shape = x, tuple(shape)

    def __array__(self, dtype=None, copy=None):
        from .cpu import CPUProvider

        full = CPUProvider().run(self.conv, [np.asarray(self._x)])
        return full if dtype is None else full.astype(dtype)


def fusable_pairs(placement, outputs, provider):
    """``{conv: pool}`` for each Conv (not grouped) on ``provider`` whose output is read only
    by a 2x2 / stride 2 MaxPool also on ``provider`` and is not a model output."""
    readers = {}
    for layer, where in placement:
        for name in layer.inputs:
            readers.setdefault(name, []).append((layer, where))
    pairs = {}
    for layer, where in placement:
        if where is not provider or not isinstance(layer, g.Conv) or layer.groups != 1 \
                or layer.output in outputs:
            continue
        users = readers.get(layer.output, [])
        if len(users) != 1:
            continue
        (pool, pool_where), = users
        if pool_where is provider and isinstance(pool, g.MaxPool) and (
                tuple(pool.kernel), tuple(pool.stride), tuple(pool.padding)) == POOL_WINDOW:
            pairs[layer] = pool
    return pairs
