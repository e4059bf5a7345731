"""Running one planned layer: its device's lock, a retry after a fault, the fallback to the
next provider, and the profile entry that tells the story.

A :class:`~sw_driver.errors.DeviceError` (a timeout, the device's error flag, lost data)
says nothing about the layer, only about the device at that moment; so the layer is run
again once on the same device after :meth:`~sw_driver.providers.Provider.reset`, then on
each other provider able to run it, in the session's order (the CPU provider, always in
the list, last). A device that failed a layer twice is skipped for the rest of the run:
a stuck device then costs two deadlines in a run, not two per layer. Only when every
provider has failed does the run fail, with a :class:`~sw_driver.errors.LayerFaultError`
naming the layer and each fault. A ``ValueError`` or ``OverflowError`` is the layer's own
(an accumulator overflow: the golden model raises it too) and fails the run at once, except
a :class:`~sw_driver.errors.RefusedAtRunError`: the provider saw from the real shapes that it
cannot run the layer, and the next provider runs it with that reason in the profile.

Locks (:mod:`sw_driver.locks`, :class:`~sw_driver.providers.Concurrency`): a
``PER_LAYER`` provider's lock is held for one layer, across its retry; ``PER_RUN`` locks
are taken by the session for the whole run (:func:`run_locks`) and only re-entered here.
"""

import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass

import numpy as np

from .errors import DeviceError, LayerError, LayerFaultError, RefusedAtRunError
from .providers.base import Concurrency

__all__ = ["PlannedLayer", "plan_layers", "run_layer", "run_locks", "run_segment"]

#: Runs of a layer on one device before it moves on: the first, and one after a reset.
ATTEMPTS_PER_DEVICE = 2


@dataclass(frozen=True)
class PlannedLayer:
    """One layer with where it runs, why, and where it goes if that device fails.

    Attributes
    ----------
    layer : sw_driver.graph.Layer
    provider : Provider
        The planner's choice.
    reason : str
        The planner's reason (the profile's ``reason``).
    fallbacks : tuple of Provider
        The other providers able to run the layer, in the session's order.
    declined : tuple of dict
        ``{"provider": name, "why": reason}`` for each provider listed before ``provider``
        that cannot run the layer: what it fell back from at placement.
    """

    layer: object
    provider: object
    reason: str
    fallbacks: tuple
    declined: tuple


def plan_layers(placement, planner, providers, implicit=None):
    """:class:`PlannedLayer` for each ``(layer, provider, reason)`` of ``placement``.

    ``planner`` is the one that made the placement from ``providers`` (its
    :attr:`~sw_driver.planner.Planner.options` name the able and declining providers);
    ``implicit`` is the provider the session appended itself (the CPU), which the reason
    then says.
    """
    order = {id(provider): index for index, provider in enumerate(providers)}
    planned = []
    for layer, provider, reason in placement:
        options = planner.options[layer.name]
        # What it fell back from: the providers listed before the chosen one that cannot
        # run it (an able one that lost on cost is no fallback).
        declined = tuple({"provider": other.name, "why": str(refusal)}
                         for other, refusal in options.declined
                         if order[id(other)] < order[id(provider)])
        if provider is implicit:
            reason += (" (implicit CPU fallback: cpu was not in the providers list and is "
                       "appended, as onnxruntime appends its CPU provider)")
        fallbacks = tuple(p for p in options.able if p is not provider)
        planned.append(PlannedLayer(layer, provider, reason, fallbacks, declined))
    return planned


def _guard(provider):
    return nullcontext() if provider.concurrency is Concurrency.SHARED else provider.lock


def run_locks(planned):
    """An ``ExitStack`` factory holding, in a fixed order, the locks of every ``PER_RUN``
    provider the planned layers may use (their own or a fallback)."""
    locks = {}
    for step in planned:
        for provider in (step.provider, *step.fallbacks):
            if provider.concurrency is Concurrency.PER_RUN:
                locks[id(provider.lock)] = provider.lock
    ordered = sorted(locks.values(), key=lambda lock: lock.order)

    def hold():
        stack = ExitStack()
        for lock in ordered:  # ascending order: no two runs wait on each other
            stack.enter_context(lock)
        return stack

    return hold


def _describe(layer, source):
    return f"{source}: layer {layer.name!r} ({layer.op})"


def _attempts(provider, layer, inputs, faults, source):
    """Run ``layer`` on ``provider`` (retrying once after a reset); ``(output, seconds,
    bytes, cycles)``, None when every attempt met a device fault (recorded in ``faults``),
    or the provider's :class:`RefusedAtRunError` when it declined the layer's shapes."""
    with _guard(provider):
        for attempt in range(1, ATTEMPTS_PER_DEVICE + 1):
            start = time.perf_counter()
            try:
                if attempt > 1:
                    provider.reset()
                result = provider.run(layer, inputs)
            except DeviceError as exc:
                faults.append({"provider": provider.name, "attempt": attempt,
                               "error": str(exc), "seconds": time.perf_counter() - start})
                continue
            except RefusedAtRunError as exc:
                return exc
            except (ValueError, OverflowError) as exc:
                earlier = f"; after device faults: {_list_faults(faults)}" if faults else ""
                raise LayerError(
                    f"{_describe(layer, source)} failed on provider {provider.name!r} with "
                    f"inputs of shape {[list(np.shape(i)) for i in inputs]}: {exc}"
                    f"{earlier}") from exc
            seconds = time.perf_counter() - start
            # Read under the lock: another thread's run of this layer would overwrite them.
            moved = provider.bytes_moved(layer, inputs, result)
            return result, seconds, moved, provider.cycles(layer)
    return None


def _list_faults(faults):
    return "; ".join(f"{f['provider']} attempt {f['attempt']}: {f['error']}" for f in faults)


def run_layer(step, inputs, broken, source):
    """Run one :class:`PlannedLayer`; returns ``(output, profile entry)``.

    ``broken`` maps each provider that failed a layer on every attempt earlier in this run
    to why; it is updated.
    """
    layer, faults, fell_back = step.layer, [], list(step.declined)
    for provider in (step.provider, *step.fallbacks):
        if provider in broken:
            fell_back.append({"provider": provider.name, "why": broken[provider]})
            continue
        if provider is not step.provider:
            # Only the planned provider is handed its own device tensors (kept by
            # ``prepare``); any other gets host arrays.
            inputs = [x if isinstance(x, np.ndarray) else np.asarray(x) for x in inputs]
        before = len(faults)
        outcome = _attempts(provider, layer, inputs, faults, source)
        if isinstance(outcome, RefusedAtRunError):
            fell_back.append({"provider": provider.name, "why": str(outcome)})
            continue
        if outcome is None:
            mine = faults[before:]
            broken[provider] = (f"skipped: it failed layer {layer.name!r} on all "
                                f"{len(mine)} attempts earlier in this run")
            fell_back.append({"provider": provider.name,
                              "why": f"met device faults: {_list_faults(mine)}"})
            continue
        result, seconds, moved, cycles = outcome
        entry = {"layer": layer.name, "op": layer.op, "provider": provider.name,
                 "seconds": seconds, "bytes": moved,
                 "reason": _reason(step, provider, faults, fell_back)}
        # Like ``cycles``, present only when there is something to say.
        for key, value in (("fell_back_from", fell_back), ("faults", faults)):
            if value:
                entry[key] = value
        if cycles is not None:
            entry["cycles"] = cycles
        return result, entry
    story = "; ".join(f"{d['provider']}: {d['why']}" for d in fell_back)
    raise LayerFaultError(f"{_describe(layer, source)}: no provider could finish it; {story}",
                          faults)


def run_segment(segment, env, broken, steps):
    """Run a resident segment (:class:`~sw_driver.resident.plan.ResidentSegment`) whole;
    returns its profile entries, one per layer, with its outputs put in ``env``; or None
    when the device met faults on both attempts (``broken`` then says so, and the caller
    runs the segment's layers one by one, on their planned providers and fallbacks).

    ``steps`` maps each layer name of the segment to its :class:`PlannedLayer`.
    """
    provider = segment.provider
    if provider in broken:
        return None
    faults = []
    # int8 at the device's boundary: the segment's inputs are tensors of earlier layers.
    feeds = {name: np.asarray(env[name]) for name in segment.inputs}
    with _guard(provider):
        for attempt in range(1, ATTEMPTS_PER_DEVICE + 1):
            start = time.perf_counter()
            try:
                if attempt > 1:
                    provider.reset()
                outputs, (moved, cycles) = provider.run_resident(segment, feeds)
            except DeviceError as exc:
                faults.append({"provider": provider.name, "attempt": attempt,
                               "error": str(exc), "seconds": time.perf_counter() - start})
                continue
            seconds = time.perf_counter() - start
            break
        else:
            broken[provider] = (f"skipped: it failed resident segment {segment.index} on "
                                f"all {len(faults)} attempts earlier in this run")
            return None
    env.update(outputs)
    first = segment.layers[0]
    entries = []
    for layer in segment.layers:
        step = steps[layer.name]
        entry = {"layer": layer.name, "op": layer.op, "provider": provider.name,
                 "seconds": seconds if layer is first else 0.0,
                 "bytes": moved if layer is first else 0}
        if layer is first:
            entry["reason"] = f"{provider.name}: {segment.describe()}"
            if step.provider is not provider:
                entry["reason"] += f"; planned: {step.reason}"
            entry["segment"] = segment.profile()
            if cycles is not None:
                entry["cycles"] = cycles
        else:
            entry["reason"] = (f"{provider.name}: in resident segment {segment.index}, "
                               f"counted on {first.name!r}")
        if faults and layer is first:
            entry["faults"] = faults
        entries.append(entry)
    return entries


def _reason(step, provider, faults, fell_back):
    """The planner's reason, plus what happened in this run when the plan did not hold."""
    if provider is not step.provider:
        failed = fell_back[len(step.declined):]  # the run's own, after the placement's
        story = "; ".join(f"{d['provider']} {d['why']}" for d in failed)
        return f"{step.reason}; fell back to {provider.name}: {story}"
    if faults:
        return (f"{step.reason}; ran again on {provider.name} after a reset, following a "
                f"device fault ({faults[0]['error']})")
    return step.reason
