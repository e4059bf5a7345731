"""The planner: per layer, which provider can run it and which one should.

``InferenceSession`` asks :meth:`Planner.place` once, when it is created. For every layer:

1. **Can it run?** Each provider's ``supports(layer, shape)``
   (:class:`~sw_driver.providers.Provider`): kernel, strides, groups, weight buffer,
   requantization ranges and, with the layer's input shape (which the planner infers from
   the model's input shape), what only the shape decides (an activation buffer too small,
   a feature map wider than the device's pool). A refusal is kept with its reason.
2. **What does it cost?** Each provider gives its own estimate (``estimate(layer, shape)``,
   a :class:`~sw_driver.providers.Cost` or None), from its cost model
   (``sw_driver/providers/costs.py``: an accelerator's counted passes over its link, the
   CPU's MACs at a rate); the planner knows no provider by name and no model.
3. **Which?** When the first provider able to run the layer has a time estimate, the
   cheapest of the able providers that have one wins (ties go to the earlier one). When it
   has none, it wins, as before the planner existed: the order the user gave decides.

The "sim" provider (the Verilator twin) deliberately has no time estimate: the twin is a
model of the device, its wall time says nothing about the device's, and a user who lists
it wants the twin to run (and so verify) every layer it can. Its estimate still carries the
modelled cycles and bytes, which the reason shows. The "pcie" provider estimates seconds
at its clock (150 MHz by default) over :class:`LinkModel`'s figures. With the defaults a
small layer at batch 1 is faster on the CPU than across PCIe (about 0.15 ms of fixed cost
per pass: the digits CNN's conv2 is 180 us on the 8x8 card against 57 us on the CPU),
while a 3x3 64->64 convolution on 16x16 is estimated at 1.4 ms on the card against 4.7 ms.

The batch the estimates assume is the model input's batch dimension when it is a number,
else :attr:`Planner.batch` (1 by default): placement is decided once per session, before
any batch is seen.
"""

from dataclasses import dataclass

from .errors import PlacementError
from .providers.base import Cost
from .providers.costs import format_seconds
from .shapes import infer_shapes

__all__ = ["LayerOptions", "Planner"]


@dataclass(frozen=True)
class LayerOptions:
    """Every provider's answer for one layer, kept for fallback and for the profile.

    Attributes
    ----------
    able : tuple of Provider
        The providers able to run the layer at its shape, in the session's order.
    declined : tuple of (Provider, Refusal)
        The providers that cannot, each with its refusal.
    """

    able: tuple
    declined: tuple


@dataclass
class _Candidate:
    provider: object
    reason: str
    estimate: Cost | None


@dataclass
class Planner:
    """Places each layer of a graph on one of the session's providers.

    Parameters
    ----------
    batch : int
        Batch assumed when the model's batch dimension is symbolic.

    After :meth:`place`, :attr:`estimates` maps each layer name to ``{provider name: Cost
    or None}`` for the providers able to run it, and :attr:`options` to its
    :class:`LayerOptions`.
    """

    batch: int = 1

    def __post_init__(self):
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be a positive integer, not {self.batch!r}")

    def place(self, graph, providers):
        """``[(layer, provider, reason), ...]`` for every layer of ``graph`` in order.

        Raises
        ------
        PlacementError
            No provider can run a layer; the message names it and every refusal.
        """
        shapes = infer_shapes(graph, self.batch)
        self.estimates = {}
        self.options = {}  # layer name -> LayerOptions
        placement = []
        for layer in graph.layers:
            shape = shapes.get(layer.inputs[0]) if layer.inputs else None
            placement.append((layer, *self._place_layer(layer, shape, providers,
                                                         graph.source)))
        return placement

    def _place_layer(self, layer, shape, providers, source):
        declined, able, refusals = [], [], []
        for provider in providers:
            refusal = provider.supports(layer, shape)
            if refusal is None:
                estimate = None if shape is None else provider.estimate(layer, shape)
                able.append(_Candidate(provider, provider.describe(layer), estimate))
                continue
            declined.append(f"{provider.name} declined: {refusal}")
            refusals.append((provider, refusal))
        self.options[layer.name] = LayerOptions(tuple(c.provider for c in able),
                                                tuple(refusals))
        if not able:
            raise PlacementError(
                f"{source}: no provider can run layer {layer.name!r} ({layer.op}): "
                f"{'; '.join(declined)}")
        first = able[0]
        timed = [c for c in able if c.estimate is not None and c.estimate.seconds is not None]
        if first not in timed:
            chosen, why = first, first.reason
            if first.estimate is not None and first.estimate.note:
                why += f" ({first.estimate.note}; placed by order: no time model)"
        else:
            chosen = min(timed, key=lambda c: c.estimate.seconds)
            others = [f"{c.provider.name} est. {format_seconds(c.estimate.seconds)}"
                      for c in timed if c is not chosen]
            why = (f"{chosen.reason}; est. {format_seconds(chosen.estimate.seconds)} "
                   f"({chosen.estimate.note})")
            if others:
                why += f" beats {', '.join(others)}"
        self.estimates[layer.name] = {c.provider.name: c.estimate for c in able}
        prefix = "; ".join(declined)
        reason = f"{chosen.provider.name}: {why}"
        return chosen.provider, (f"{prefix}; then {reason}" if prefix else reason)
