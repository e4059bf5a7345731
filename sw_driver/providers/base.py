"""The interface every execution provider implements.

A provider runs single layers. It holds no global state and no per-run state that a second
process would need, so a batch can be split across processes, each with its own provider
instance (``design.md``, "Scaling out").
"""

import enum

from ..locks import LazyDeviceLock

__all__ = ["Concurrency", "Provider"]


class Concurrency(enum.Enum):
    """What a provider allows when one session is run from several threads at once.

    The session serializes accordingly, with the provider's :attr:`Provider.lock`.
    """

    #: ``run`` may be called from any number of threads at once (pure functions on the
    #: host): no lock.
    SHARED = "shared"
    #: One layer at a time: the lock is held around ``run``, the reading of its figures
    #: for the profile (``bytes_moved``, ``cycles``), and the reset and retry after a fault.
    #: Between layers other threads may use the device.
    PER_LAYER = "per layer"
    #: State lives on the device between the layers of one run (tensors left there for the
    #: next layer, an error flag read only at the end): the lock is held for the whole run.
    #: The safe default for a provider that does not say.
    PER_RUN = "per run"


class Provider:
    """One backend that can run some layer kinds.

    Subclasses set :attr:`name` and implement :meth:`supports` and :meth:`run`;
    :meth:`cost` is optional (the session only reports it).
    """

    #: Short name used in ``InferenceSession(providers=[...])`` and in profiles.
    name = "base"
    #: How concurrent runs of a session share this provider (see :class:`Concurrency`).
    #: The "opencl" and "gpu" providers keep this default: their tensors stay on the device
    #: between layers and their overflow flag covers every layer since the last read.
    concurrency = Concurrency.PER_RUN
    #: The lock the session serializes this provider with (one per instance; device
    #: providers share their transport's, so two providers on one device take turns).
    lock = LazyDeviceLock()

    def supports(self, layer):
        """Whether this provider can run ``layer``.

        Parameters
        ----------
        layer : sw_driver.graph.Layer

        Returns
        -------
        (bool, str)
            The answer and a short reason (shown in the session's profile).
        """
        raise NotImplementedError

    def run(self, layer, inputs):
        """Run ``layer`` on its input arrays and return its output array.

        Parameters
        ----------
        layer : sw_driver.graph.Layer
        inputs : list of numpy.ndarray
            One array per name in ``layer.inputs``: int8 for integer layers, float32 for
            :class:`~sw_driver.graph.Quantize` and :class:`~sw_driver.graph.Softmax`.

        Returns
        -------
        numpy.ndarray
        """
        raise NotImplementedError

    def cost(self, layer, batch):
        """Estimated cost of running ``layer`` on ``batch`` items, or None if unknown.

        Returns
        -------
        dict or None
            E.g. ``{"seconds": ..., "bytes": ...}``.
        """
        return None

    def bytes_moved(self, layer, inputs, output):
        """Bytes transferred to and from the device for one run (0 for host providers)."""
        return 0

    def reset(self):
        """Return the device to a known state after a fault, before the layer is retried
        (:class:`~sw_driver.errors.DeviceError`); called with :attr:`lock` held. Host
        providers have nothing to reset."""

    def finish_profile(self, profile):
        """Amend this provider's rows of a finished run's profile, in place.

        Called once at the end of each run, with every row (dicts with ``layer``,
        ``provider``, ``seconds``, ...), after all outputs are on the host. A provider whose
        layers run asynchronously replaces the host wall times with what it measured on the
        device (the "opencl" provider: OpenCL event profiling).
        """

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"
