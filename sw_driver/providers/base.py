"""The interface every execution provider implements, and the answers it gives.

A provider runs single layers. It holds no global state and no per-run state that a second
process would need, so a batch can be split across processes, each with its own provider
instance (``design.md``, "Scaling out").

The planner (:mod:`sw_driver.planner`) and :mod:`sw_driver.dispatch` see a provider only
through :class:`Provider`: :meth:`~Provider.supports` (a :class:`Refusal`, or None),
:meth:`~Provider.describe` (what running the layer there means, for the profile),
:meth:`~Provider.estimate` (a :class:`Cost`, or None) and :meth:`~Provider.run`, plus the
hooks below with their defaults.
"""

import abc
import enum
from dataclasses import dataclass

from ..locks import LazyDeviceLock

__all__ = ["Concurrency", "Cost", "Provider", "Refusal"]


@dataclass(frozen=True)
class Refusal:
    """Why a provider cannot run a layer: shown in the profile's ``reason`` and
    ``fell_back_from``.

    Attributes
    ----------
    reason : str
        One sentence naming the limit, e.g. ``"kernel 9x9 exceeds the engine's 7x7"``.
    """

    reason: str

    def __str__(self):
        return self.reason


@dataclass(frozen=True)
class Cost:
    """A provider's estimate of one layer at one input shape (the whole batch).

    Attributes
    ----------
    seconds : float or None
        Estimated time; None when the provider has no time model (it is then placed by the
        session's order, see :mod:`sw_driver.planner`).
    bytes : int
        Bytes moved to and from a device (0 on the host).
    cycles : int or None
        Device cycles, where a cycle model knows them.
    note : str
        How the figures were reached, shown in the placement reason.
    """

    seconds: float | None = None
    bytes: int = 0
    cycles: int | None = None
    note: str = ""


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


class Provider(abc.ABC):
    """One backend that can run some layer kinds.

    Subclasses set :attr:`name` and implement :meth:`supports` and :meth:`run`; the other
    methods have defaults that suit a host provider without a time model.
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

    @abc.abstractmethod
    def supports(self, layer, shape=None):
        """Why this provider cannot run ``layer``, or None when it can.

        Parameters
        ----------
        layer : sw_driver.graph.Layer
        shape : tuple of int, optional
            The layer's first input shape, when known: a provider whose limits depend on
            it (an accelerator's buffers) checks them too. Without it, only what holds at
            every shape is checked.

        Returns
        -------
        Refusal or None
        """

    def describe(self, layer):
        """What running ``layer`` here means, in a few words, for the placement reason
        (called only for layers :meth:`supports` accepts)."""
        return f"{layer.op} on {self.name}"

    def estimate(self, layer, shape):
        """The :class:`Cost` of running ``layer`` on an input of ``shape``, or None when
        unknown (the default). Called only where :meth:`supports` accepted ``layer`` at
        ``shape``."""
        return None

    @abc.abstractmethod
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

    def prepare(self, placement, outputs):
        """See the whole placement once, when the session is created (default: nothing).

        Parameters
        ----------
        placement : list of (Layer, Provider)
            Every layer of the session in execution order with the provider running it.
        outputs : set of str
            The model's output names (always returned to the host).
        """
        return None  # a hook: nothing to do by default

    def resident_segments(self, graph, placement, outputs):
        """Runs of this provider's layers it will run whole, from its own memory, as
        :class:`~sw_driver.resident.plan.ResidentSegment` (default: none). Called once, when
        the session is created, after :meth:`prepare`."""
        return []

    def run_resident(self, segment, feeds):
        """Run one of :meth:`resident_segments` on int8 ``feeds``; returns ``(outputs,
        (bytes moved, cycles or None))``."""
        raise NotImplementedError(f"provider {self.name!r} runs no resident segments")

    def whole_model(self, graph, placement):
        """A function that runs all of ``graph`` at once, or None (the default).

        Asked once, when the session is created, of the provider that ``placement`` (as in
        :meth:`prepare`) gives every layer to. The function takes the checked feeds
        (``{input name: array}``) and returns ``{output name: array}``; the session calls
        it instead of running layer by layer, and if it raises, runs that request (and the
        later ones) layer by layer instead.
        """
        return None

    def bytes_moved(self, layer, inputs, output):
        """Bytes transferred to and from the device for one run (0 for host providers)."""
        return 0

    def cycles(self, layer):
        """Device cycles of ``layer``'s last run (its performance counter), or None."""
        return None

    def reset(self):
        """Return the device to a known state after a fault, before the layer is retried
        (:class:`~sw_driver.errors.DeviceError`); called with :attr:`lock` held. Host
        providers have nothing to reset."""
        return None  # a hook: nothing to do by default

    def finish_profile(self, profile):
        """Amend this provider's rows of a finished run's profile, in place.

        Called once at the end of each run, with every row (dicts with ``layer``,
        ``provider``, ``seconds``, ...), after all outputs are on the host. A provider whose
        layers run asynchronously replaces the host wall times with what it measured on the
        device (the "opencl" provider: OpenCL event profiling).
        """
        return None  # a hook: nothing to do by default

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


def keep_on_device(provider, placement, outputs, host_layers, kept):
    """Update ``kept`` (a set of layers) for ``provider``'s share of ``placement``: a layer
    it runs on its device (not one of ``host_layers``) stays there when every reader of its
    output is ``provider`` too and the model does not return it; any other layer of
    ``provider``'s leaves it. Layers of other placements (other sessions) are untouched."""
    consumers = {}
    for layer, where in placement:
        for name in layer.inputs:
            consumers.setdefault(name, []).append(where)
    for layer, where in placement:
        if where is not provider or isinstance(layer, host_layers):
            continue
        users = consumers.get(layer.output, [])
        if users and layer.output not in outputs and all(p is provider for p in users):
            kept.add(layer)
        else:
            kept.discard(layer)
