"""``InferenceSession``: onnxruntime's API over Tessera's integer layers and providers."""

import threading
import time
import warnings

import numpy as np

from .dispatch import plan_layers, run_layer, run_locks, run_segment
from .errors import (
    InputError,
    ProviderUnavailableError,
    UnknownProviderError,
)
from .importer import import_model
from .integer_mode import SEQUENCE_MODES
from .planner import Planner
from .providers import ALIASES, PROVIDERS, CPUProvider, OpenCLGPUProvider, Provider
from .providers.options import make_provider
from .run_options import check_run_options, needed_layers, stop_if_terminated

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
        name, options = _name_and_options(item)
        # ("opencl", {"device": "gpu"}) asks for OpenCL on a GPU, even where "gpu" alone
        # would be PyTorch on CUDA.
        cls = OpenCLGPUProvider if _opencl_gpu(item) else PROVIDERS[name]
        try:
            made.append(make_provider(name, cls, options))
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


def _opencl_gpu(item):
    return (isinstance(item, tuple) and len(item) == 2 and item[0] == "opencl"
            and isinstance(item[1], dict) and item[1].get("device") == "gpu")


def _name_and_options(item):
    """``(name, options)`` of one entry of ``providers``: a name, or onnxruntime's
    ``(name, options)`` pair. ``("opencl", {"device": "gpu"})`` is the "gpu" provider: the
    OpenCL provider restricted to a GPU."""
    name, options = item, None
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        name, options = item
    name = ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(name, str) or name not in PROVIDERS:
        known = sorted(PROVIDERS) + sorted(ALIASES)
        raise UnknownProviderError(
            f"unknown provider {item!r}; known providers: {', '.join(known)} (each a name "
            f"or a (name, options) pair)")
    if name == "opencl" and isinstance(options, dict) and options.get("device") == "gpu":
        name, options = "gpu", {k: v for k, v in options.items() if k != "device"}
    return name, options


def _with_cpu(providers):
    """``(providers, implicit)``: the list with a CPU provider at the end when it has none
    (as onnxruntime appends its CPU provider), and the one appended, or None."""
    if any(isinstance(p, CPUProvider) for p in providers):
        return providers, None
    implicit = CPUProvider()
    return [*providers, implicit], implicit


class InferenceSession:
    """Run a QDQ int8 ONNX model with Tessera's providers, like ``onnxruntime``'s session.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        A QDQ model (``onnxruntime.quantization.quantize_static``, int8 activations and
        weights).
    providers : list of (str, (str, dict) or Provider), optional
        Tried in this order for each layer: the first that supports a layer runs it, unless
        the planner estimates another one able to is faster (:mod:`sw_driver.planner`).
        Names come from :data:`sw_driver.providers.PROVIDERS` (``"cpu"``, and
        ``"CPUExecutionProvider"`` as an alias); a ``(name, options)`` pair, as in
        onnxruntime, passes the options to the provider's constructor
        (``("uart", {"port": "/dev/ttyUSB0"})``; :mod:`sw_driver.providers.options`, which
        also names the environment variables read for options left out). An unknown option
        raises :class:`~sw_driver.errors.UnknownProviderError`. Default ``["cpu"]``. As in
        onnxruntime, the
        CPU provider is appended when the list lacks it, so every layer can run; the profile
        says which layers fell back to it and why. A provider that cannot run on this
        machine (:class:`~sw_driver.errors.ProviderUnavailableError`) is skipped with a
        ``RuntimeWarning`` when others are listed; alone, its error propagates (the
        implicit CPU is for layers, not for a missing device).
    planner : sw_driver.planner.Planner, optional
        Decides each layer's provider (by cost where providers estimate one, else by
        order); default ``Planner()``.
    cpu_fallback : bool, optional
        Append the CPU provider when the list lacks it (default True). False is
        onnxruntime's ``session.disable_cpu_ep_fallback``: a layer the listed providers
        cannot run is then a :class:`~sw_driver.errors.PlacementError` naming it.
    sequence_mode : {"ort", "integer"}, optional
        The semantics of the nonlinearities of sequence models (``docs/semantics.md``).
        ``"ort"`` (default): Softmax, LayerNormalization, GELU... are computed as
        onnxruntime's QDQ graph computes them (dequantize, float32 op, quantize).
        ``"integer"``: those of Softmax, LayerNormalization and GELU whose inputs and
        outputs are quantized become the integer-only layers of :mod:`models.intonly`
        (``IntSoftmax``, ``IntLayerNorm``, ``IntGelu``), as hardware without floats runs
        them; the rest keeps the ORT-compatible form. The profile's ``semantics`` says
        which each layer used, and ``semantics_why`` why.

    Notes
    -----
    :meth:`run` may be called from several threads at once. Each provider says what it
    allows (:class:`~sw_driver.providers.Concurrency`): the CPU runs calls side by side, a
    device takes one layer (the twin, a card) or one run (OpenCL) at a time. A device
    fault is retried, then the layer falls back (:mod:`sw_driver.dispatch`).

    Raises
    ------
    TesseraError
        A subclass naming the file, node or layer: see :mod:`sw_driver.errors`.
    """

    def __init__(self, path_or_bytes, providers=None, *, planner=None, cpu_fallback=True,
                 sequence_mode="ort"):
        if not isinstance(cpu_fallback, bool):
            raise TypeError(f"cpu_fallback must be True or False, not {cpu_fallback!r}")
        if sequence_mode not in SEQUENCE_MODES:
            raise ValueError(f"sequence_mode must be one of "
                             f"{', '.join(map(repr, SEQUENCE_MODES))}, not {sequence_mode!r}")
        listed = _make_providers(["cpu"] if providers is None else providers)
        self._providers, implicit = _with_cpu(listed) if cpu_fallback else (listed, None)
        self._graph = import_model(path_or_bytes, sequence_mode=sequence_mode)
        self._planner = Planner() if planner is None else planner
        self._placement = self._planner.place(self._graph, self._providers)
        self._planned = plan_layers(self._placement, self._planner, self._providers,
                                    implicit)
        self._hold_run_locks = run_locks(self._planned)
        # A device provider that sees the whole placement can keep a tensor on its device
        # when every consumer runs there too (and it is not a model output).
        placed = [(layer, provider) for layer, provider, _ in self._placement]
        outputs = {o.name for o in self._graph.outputs}
        for provider in self._providers:
            provider.prepare(placed, outputs)
        # Runs of a device's layers that it runs whole from its own memory: keyed by the
        # first layer's name.
        self._segments = {}
        for provider in self._providers:
            for segment in provider.resident_segments(self._graph, placed, outputs):
                segment.index = len(self._segments)
                self._segments[segment.layers[0].name] = segment
        # One provider running every layer may run the whole model as one function.
        only = {id(provider): provider for _, provider in placed}
        self._whole = (next(iter(only.values())).whole_model(self._graph, placed)
                       if len(only) == 1 else None)
        self._last_profile = []  # the last run's, whichever thread ran it
        self._thread = threading.local()  # .profile: the calling thread's last run's

    @property
    def sequence_mode(self):
        """``"ort"`` or ``"integer"``, as given to the constructor."""
        return self._graph.sequence_mode

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
        """Names of the session's providers, in the order they are tried (ending with
        ``"cpu"``, appended when not listed)."""
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
                # float(): "nan", not NumPy's repr "np.float32(nan)".
                raise InputError(f"input {name!r} holds a non-finite value "
                                 f"({float(value[index])} at index {index}); Tessera "
                                 f"quantizes inputs to int8, where NaN and Inf have no "
                                 f"meaning")
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
        run_options : sw_driver.RunOptions, onnxruntime.RunOptions or None
            ``terminate`` (checked before each layer), ``only_execute_path_to_fetches`` and
            ``logid`` are honoured; see :mod:`sw_driver.run_options`. Other types are
            refused.

        Returns
        -------
        list of numpy.ndarray

        Raises
        ------
        LayerFaultError
            Every provider able to run a layer met a device fault on it.
        RunTerminatedError
            ``run_options.terminate`` was set.
        """
        options = check_run_options(run_options)
        env = self._check_feeds(input_feed)
        outputs = [o.name for o in self._graph.outputs]
        if output_names is None:
            output_names = outputs
        unknown = [name for name in output_names if name not in outputs]
        if unknown:
            raise InputError(f"unknown output name(s) {unknown}; the model's outputs are "
                             f"{outputs}")
        planned = self._planned
        if options.only_execute_path_to_fetches:
            needed = {id(layer) for layer in needed_layers(
                [step.layer for step in planned], output_names)}
            planned = [step for step in planned if id(step.layer) in needed]
        if self._whole is not None:
            result = self._run_whole(env, options)
            if result is not None:
                return [result[name] for name in output_names]
        profile, broken = [], {}
        steps = {step.layer.name: step for step in planned}
        skip = set()
        with self._hold_run_locks():
            for done, step in enumerate(planned):
                if step.layer.name in skip:
                    continue
                stop_if_terminated(options, self._graph.source, step.layer, done,
                                   len(planned))
                segment = self._segments.get(step.layer.name)
                if segment is not None and segment.names <= steps.keys():
                    entries = run_segment(segment, env, broken, steps)
                    if entries is not None:
                        for entry in entries:
                            semantics = self._graph.semantics.get(entry["layer"])
                            if semantics is not None:
                                entry["semantics"], entry["semantics_why"] = semantics
                        profile.extend(entries)
                        skip |= segment.names
                        continue
                inputs = [env[name] for name in step.layer.inputs]
                env[step.layer.output], entry = run_layer(step, inputs, broken,
                                                          self._graph.source)
                semantics = self._graph.semantics.get(step.layer.name)
                if semantics is not None:
                    entry["semantics"], entry["semantics_why"] = semantics
                profile.append(entry)
            for provider in self._providers:
                provider.finish_profile(profile)  # device times, known once the queue drained
        self._thread.profile = self._last_profile = profile
        return [env[name] for name in output_names]

    def _run_whole(self, feeds, options):
        """The outputs from the provider's whole-model function, with a profile row per
        layer (the run's time shared out: ``whole_model`` says so), or None when that
        function failed: it is then dropped and the run goes layer by layer."""
        planned = self._planned
        stop_if_terminated(options, self._graph.source, planned[0].layer, 0, len(planned))
        whole = self._whole
        with self._hold_run_locks():
            started = time.perf_counter()
            try:
                values = whole(feeds)
            except Exception:  # the layer-by-layer path reports the error, if any
                self._whole = None
                return None
            seconds = time.perf_counter() - started
            profile = []
            for step in planned:
                entry = {"layer": step.layer.name, "op": step.layer.op,
                         "provider": step.provider.name, "seconds": seconds / len(planned),
                         "bytes": 0, "reason": step.reason,
                         "whole_model": "the model ran as one device function; seconds "
                                        "are the run's, shared equally among its layers"}
                if step.declined:
                    entry["fell_back_from"] = [dict(d) for d in step.declined]
                semantics = self._graph.semantics.get(step.layer.name)
                if semantics is not None:
                    entry["semantics"], entry["semantics_why"] = semantics
                profile.append(entry)
            profile[0]["bytes"] += sum(v.nbytes for v in feeds.values())
            profile[-1]["bytes"] += sum(v.nbytes for v in values.values())
            for provider in self._providers:
                provider.finish_profile(profile)
        self._thread.profile = self._last_profile = profile
        return values

    def profile(self):
        """Per-layer record of the last :meth:`run` made by the calling thread (or, if it
        has made none, the last one by any thread).

        Returns
        -------
        list of dict
            One per layer in execution order, with keys ``layer``, ``op``, ``provider``,
            ``seconds``, ``bytes`` (moved to and from a device; 0 on the CPU),
            ``reason`` (why the layer went to that provider), ``semantics``
            (``"integer-only"``, ``"ort-compatible"`` or ``"float"``: what its arithmetic
            follows, see ``sequence_mode``) and ``semantics_why``; for layers that ran on an
            accelerator also ``cycles`` (its performance counter); for layers that did
            not run on the first provider listed, ``fell_back_from`` (a list of
            ``{"provider", "why"}``, one per provider preferred to the one that ran it:
            declined at placement, or failed in this run); for layers that met device
            faults, ``faults`` (a list of ``{"provider", "attempt", "error", "seconds"}``).
        """
        profile = getattr(self._thread, "profile", None)
        if profile is None:
            profile = self._last_profile
        return [{key: [dict(item) for item in value] if isinstance(value, list) else value
                 for key, value in entry.items()} for entry in profile]
