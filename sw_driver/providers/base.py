"""The interface every execution provider implements.

A provider runs single layers. It holds no global state and no per-run state that a second
process would need, so a batch can be split across processes, each with its own provider
instance (``design.md``, "Scaling out").
"""

__all__ = ["Provider"]


class Provider:
    """One backend that can run some layer kinds.

    Subclasses set :attr:`name` and implement :meth:`supports` and :meth:`run`;
    :meth:`cost` is optional (the session only reports it).
    """

    #: Short name used in ``InferenceSession(providers=[...])`` and in profiles.
    name = "base"

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

    def finish_profile(self, profile):
        """Amend this provider's rows of a finished run's profile, in place.

        Called once at the end of each run, with every row (dicts with ``layer``,
        ``provider``, ``seconds``, ...), after all outputs are on the host. A provider whose
        layers run asynchronously replaces the host wall times with what it measured on the
        device (the "opencl" provider: OpenCL event profiling).
        """

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"
