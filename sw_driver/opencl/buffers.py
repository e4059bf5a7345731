"""Device memory: a pool of reusable buffers and the tensors that live in them.

All commands go to one in-order queue, so a buffer handed back to the pool can be reused by
the next layer at once: its old readers were enqueued earlier and run first.
"""

import math
import weakref

import numpy as np
import pyopencl as cl

from .errors import DeviceOutOfMemoryError

__all__ = ["OUT_OF_MEMORY_CODES", "BufferPool", "DeviceTensor"]

OUT_OF_MEMORY_CODES = frozenset({
    cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
    cl.status_code.OUT_OF_RESOURCES,
    cl.status_code.OUT_OF_HOST_MEMORY,
})


def out_of_memory(exc, what):
    """A :class:`DeviceOutOfMemoryError` for an OpenCL error, or None if it is another one."""
    if isinstance(exc, cl.Error) and getattr(exc, "code", None) in OUT_OF_MEMORY_CODES:
        return DeviceOutOfMemoryError(
            f"the OpenCL device ran out of memory while {what} ({exc}); use a smaller "
            f"batch, free device tensors you no longer need, or pick a device with more "
            f"memory (TESSERA_OPENCL_DEVICE)"
        )
    return None


class BufferPool:
    """Device buffers binned by power-of-two size, kept for reuse instead of freed."""

    def __init__(self, context, device):
        self._context = context
        self._max_alloc = device.max_mem_alloc_size
        self._device_name = device.name.strip()
        self._free = {}

    @staticmethod
    def _size_class(nbytes):
        return max(64, 1 << (max(int(nbytes), 1) - 1).bit_length())

    def acquire(self, nbytes):
        """A buffer of at least ``nbytes`` bytes (returns ``(buffer, size_class)``)."""
        size = self._size_class(nbytes)
        if nbytes > self._max_alloc:
            raise DeviceOutOfMemoryError(
                f"a buffer of {nbytes} bytes exceeds the largest single allocation of "
                f"{self._device_name!r} ({self._max_alloc} bytes); use a smaller batch or "
                f"split the layer"
            )
        size = min(size, self._max_alloc)
        free = self._free.get(size)
        if free:
            return free.pop(), size
        for attempt in range(2):
            try:
                return cl.Buffer(self._context, cl.mem_flags.READ_WRITE, size), size
            except cl.Error as exc:
                error = out_of_memory(exc, f"allocating {size} bytes")
                if error is None:
                    raise
                if attempt:
                    raise error from exc
                # Cached buffers may be what fills the device: drop them and try once more.
                self._free.clear()
        raise AssertionError("unreachable")

    def release(self, buffer, size):
        self._free.setdefault(size, []).append(buffer)

    def clear(self):
        """Free every cached buffer (tensors still alive keep theirs)."""
        self._free.clear()


class DeviceTensor:
    """A tensor resident on the OpenCL device (C-contiguous).

    Layer methods given a ``DeviceTensor`` return one without waiting for the device;
    :meth:`get` (or ``numpy.asarray``) waits and copies the values back. The buffer returns
    to the runtime's pool when the tensor is garbage-collected.
    """

    def __init__(self, runtime, shape, dtype=np.int8):
        self.runtime = runtime
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.buffer, size = runtime.pool.acquire(self.nbytes)
        weakref.finalize(self, runtime.pool.release, self.buffer, size)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def reshape(self, shape):
        """The same device buffer seen with another shape of the same size."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} to {shape}")
        return _View(self, shape)

    def get(self):
        """The values as a NumPy array (waits for every layer enqueued before)."""
        return self.runtime.read(self)

    def __array__(self, dtype=None, copy=None):
        array = self.get()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self):
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype.name})"


class _View(DeviceTensor):
    """A reshape: shares the buffer of ``base`` and keeps it alive (no pool traffic)."""

    def __init__(self, base, shape):  # pylint: disable=super-init-not-called
        self.runtime = base.runtime
        self.base = base
        self.shape = shape
        self.dtype = base.dtype
        self.nbytes = base.nbytes
        self.buffer = base.buffer
