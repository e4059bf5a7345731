"""``InferenceSession``: onnxruntime's API over Tessera's integer layers and providers."""

import time
import warnings

import numpy as np

from .errors import (
    InputError,
    LayerError,
    ProviderUnavailableError,
    UnknownProviderError,
)
from .importer import import_model
from .planner import Planner
from .providers import ALIASES, PROVIDERS, Provider

__all__ = ["InferenceSession"]

_DTYPES = {"tensor(float)": np.float32}


def _make_providers(providers):
    if isinstance(providers, (str, Provider)):
        providers = [providers]
    made, unavailable = [], []
    for item in providers:
        if isinstance(item, Provider):
            made.append(item)
            continue
        name = ALIASES.get(item, item) if isinstance(item, str) else item
        if name not in PROVIDERS:
            known = sorted(PROVIDERS) + sorted(ALIASES)
            raise UnknownProviderError(
                f"unknown provider {item!r}; known providers: {', '.join(known)}")
        try:
            made.append(PROVIDERS[name]())
        except ProviderUnavailableError as exc:
            unavailable.append((name, exc))
    if unavailable and not made:
        raise unavailable[0][1]
    for name, exc in unavailable:
        # Listing several providers is the user's way of saying "this one, else that one".
        warnings.warn(f"provider {name!r} is unavailable and is skipped; the session uses "
                      f"{[p.name for p in made]}: {exc}", RuntimeWarning, stacklevel=3)
    if not made:
        raise UnknownProviderError(
            f"providers must name at least one of: {', '.join(sorted(PROVIDERS))}")
    return made


class InferenceSession:
    """Run a QDQ int8 ONNX model with Tessera's providers, like ``onnxruntime``'s session.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        A QDQ model (``onnxruntime.quantization.quantize_static``, int8 activations and
        weights).
    providers : list of (str or Provider), optional
        Tried in this order for each layer: the first that supports a layer runs it, unless
        the planner estimates another one able to is faster (:mod:`sw_driver.planner`).
        Names come from :data:`sw_driver.providers.PROVIDERS` (``"cpu"``, and
        ``"CPUExecutionProvider"`` as an alias). Default ``["cpu"]``. A provider that cannot
        run on this machine (:class:`~sw_driver.errors.ProviderUnavailableError`) is skipped
        with a ``RuntimeWarning`` when others are listed; alone, its error propagates.
    planner : sw_driver.planner.Planner, optional
        Decides each layer's provider (by cost where providers estimate one, else by
        order); default ``Planner()``.

    Raises
    ------
    TesseraError
        A subclass naming the file, node or layer: see :mod:`sw_driver.errors`.
    """

    def __init__(self, path_or_bytes, providers=None, *, planner=None):
        self._providers = _make_providers(["cpu"] if providers is None else providers)
        self._graph = import_model(path_or_bytes)
        self._planner = Planner() if planner is None else planner
        self._placement = self._planner.place(self._graph, self._providers)
        # Optional hook: a device provider that sees the whole placement can keep a tensor
        # on its device when every consumer runs there too (and it is not a model output).
        placed = [(layer, provider) for layer, provider, _ in self._placement]
        outputs = {o.name for o in self._graph.outputs}
        for provider in self._providers:
            prepare = getattr(provider, "prepare", None)
            if prepare is not None:
                prepare(placed, outputs)
        self._profile = []

    @property
    def graph(self):
        """The imported :class:`~sw_driver.graph.Graph` (read-only use)."""
        return self._graph

    def get_inputs(self):
        """The model's inputs: objects with ``.name``, ``.shape`` and ``.type``."""
        return list(self._graph.inputs)

    def get_outputs(self):
        """The model's outputs: objects with ``.name``, ``.shape`` and ``.type``."""
        return list(self._graph.outputs)

    def get_providers(self):
        """Names of the session's providers, in the order they are tried."""
        return [p.name for p in self._providers]

    def _check_feeds(self, feeds):
        if not isinstance(feeds, dict):
            raise InputError(f"feeds must be a dict of input name -> numpy array, not "
                             f"{type(feeds).__name__}")
        expected = {i.name: i for i in self._graph.inputs}
        unknown = sorted(set(feeds) - set(expected))
        missing = [name for name in expected if name not in feeds]
        if unknown or missing:
            raise InputError(
                f"{self._graph.source}: feeds do not match the model's inputs "
                f"{sorted(expected)}: unknown {unknown}, missing {missing}")
        checked = {}
        for name, info in expected.items():
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input {name!r} must be a numpy.ndarray, not "
                                 f"{type(value).__name__}")
            dtype = _DTYPES[info.type]
            if value.dtype != dtype:
                raise InputError(f"input {name!r} has dtype {value.dtype}; the model expects "
                                 f"{info.type} ({np.dtype(dtype).name})")
            if info.shape is not None:
                bad = len(value.shape) != len(info.shape) or any(
                    isinstance(d, int) and d > 0 and d != s for d, s in zip(info.shape,
                                                                          value.shape,
                                                                          strict=False))
                if bad or 0 in value.shape:
                    raise InputError(f"input {name!r} has shape {list(value.shape)}; the model "
                                     f"expects {info.shape}")
            finite = np.isfinite(value)
            if not finite.all():
                index = tuple(int(i) for i in np.argwhere(~finite)[0])
                raise InputError(f"input {name!r} holds a non-finite value ({value[index]!r} "
                                 f"at index {index}); Tessera quantizes inputs to int8, where "
                                 f"NaN and Inf have no meaning")
            checked[name] = value
        return checked

    def run(self, output_names, input_feed, run_options=None):
        """Run the model.

        Parameters
        ----------
        output_names : list of str or None
            Outputs to return, in this order; None returns all, in the model's order.
        input_feed : dict of str -> numpy.ndarray
            One float32 array per model input; batch size N >= 1.
        run_options : None
            Accepted for onnxruntime compatibility; must be None.

        Returns
        -------
        list of numpy.ndarray
        """
        env = self._check_feeds(input_feed)
        outputs = [o.name for o in self._graph.outputs]
        if output_names is None:
            output_names = outputs
        unknown = [name for name in output_names if name not in outputs]
        if unknown:
            raise InputError(f"unknown output name(s) {unknown}; the model's outputs are "
                             f"{outputs}")
        profile = []
        for layer, provider, reason in self._placement:
            inputs = [env[name] for name in layer.inputs]
            start = time.perf_counter()
            try:
                result = provider.run(layer, inputs)
            except (ValueError, OverflowError) as exc:
                raise LayerError(
                    f"{self._graph.source}: layer {layer.name!r} ({layer.op}) failed on "
                    f"provider {provider.name!r} with inputs of shape "
                    f"{[list(i.shape) for i in inputs]}: {exc}") from exc
            seconds = time.perf_counter() - start
            env[layer.output] = result
            entry = {"layer": layer.name, "op": layer.op, "provider": provider.name,
                     "seconds": seconds, "bytes": provider.bytes_moved(layer, inputs, result),
                     "reason": reason}
            cycles = getattr(provider, "cycles", None)  # accelerators' performance counters
            if cycles is not None and cycles(layer) is not None:
                entry["cycles"] = cycles(layer)
            profile.append(entry)
        for provider in self._providers:
            provider.finish_profile(profile)  # device times, known once the queue drained
        self._profile = profile
        return [env[name] for name in output_names]

    def profile(self):
        """Per-layer record of the last :meth:`run`.

        Returns
        -------
        list of dict
            One per layer in execution order, with keys ``layer``, ``op``, ``provider``,
            ``seconds``, ``bytes`` (moved to and from a device; 0 on the CPU) and
            ``reason`` (why the layer went to that provider); for layers that ran on an
            accelerator also ``cycles`` (its performance counter).
        """
        return [dict(entry) for entry in self._profile]
