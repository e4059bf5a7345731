"""``run_options`` of :meth:`InferenceSession.run`: what is honoured, and what is refused.

Tessera honours the fields of ``onnxruntime.RunOptions`` that mean something to it:

- ``terminate``: set it (from another thread) to stop the runs using these options at the
  next layer boundary; they raise :class:`~sw_driver.errors.RunTerminatedError`.
- ``only_execute_path_to_fetches``: run only the layers the requested outputs need.
- ``logid``: names the run in the errors it raises.

``log_severity_level`` and ``log_verbosity_level`` configure onnxruntime's own logging and
are ignored. Either this module's :class:`RunOptions` or an ``onnxruntime.RunOptions`` is
accepted; onnxruntime's is recognised by its type's name, so the runtime never imports
onnxruntime. Anything else (a dict, a string) is refused with an
:class:`~sw_driver.errors.InputError` naming what is accepted.
"""

from dataclasses import dataclass

from .errors import InputError, RunTerminatedError

__all__ = ["RunOptions", "check_run_options", "needed_layers", "stop_if_terminated"]

_ORT_TYPE = ("onnxruntime.capi.onnxruntime_pybind11_state", "RunOptions")


@dataclass
class RunOptions:
    """Options of one :meth:`InferenceSession.run` call (onnxruntime's field names).

    Attributes
    ----------
    terminate : bool
        Set to True, from any thread, to stop every run using these options at its next
        layer boundary with :class:`~sw_driver.errors.RunTerminatedError`.
    only_execute_path_to_fetches : bool
        Run only the layers the requested outputs depend on (onnxruntime's default, False,
        runs every layer).
    logid : str
        A name for the run, shown in its errors.
    """

    terminate: bool = False
    only_execute_path_to_fetches: bool = False
    logid: str = ""


def check_run_options(value):
    """``value`` if it is options :meth:`InferenceSession.run` honours, else raise.

    None gives default :class:`RunOptions`. The object is returned, not copied: its
    ``terminate`` is read again at every layer boundary, so setting it later still works.
    """
    if value is None:
        return RunOptions()
    kind = type(value)
    if isinstance(value, RunOptions) or (kind.__module__, kind.__qualname__) == _ORT_TYPE:
        return value
    raise InputError(f"run_options must be None, sw_driver.RunOptions or "
                     f"onnxruntime.RunOptions, not {kind.__module__}.{kind.__qualname__} "
                     f"({value!r:.60})")


def stop_if_terminated(options, source, layer, done, total):
    """Raise :class:`RunTerminatedError` if ``options.terminate`` is set, naming the run
    and the layer it stopped before."""
    if options.terminate:
        run = f"run {options.logid!r}" if options.logid else "run"
        raise RunTerminatedError(
            f"{source}: {run} terminated by run_options.terminate before layer "
            f"{layer.name!r} ({done} of {total} layers done)")


def needed_layers(layers, output_names):
    """The layers (in order) that ``output_names`` depend on."""
    wanted = set(output_names)
    keep = []
    for layer in reversed(layers):
        if layer.output in wanted:
            keep.append(layer)
            wanted.update(layer.inputs)
    return keep[::-1]
