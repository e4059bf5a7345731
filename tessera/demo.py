"""`tessera demo`: the shipped digits CNN on the Verilator twin, the CPU and onnxruntime.

The pieces are plain functions so that tests can run them on a small twin and a subset of
the test split; :func:`tessera.commands.demo.cmd_demo` adds the progress bar and the tables.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from models.zoo.reference import onnxruntime_session

__all__ = ["DemoResult", "accumulate", "onnxruntime_outputs", "run_session"]


@dataclass
class DemoResult:
    """Outputs, accuracies and timings of one demo run.

    Attributes
    ----------
    labels : numpy.ndarray
        True classes of the images used.
    outputs : dict of str -> numpy.ndarray
        Logits per run: ``"float"`` and ``"ort-int8"`` (onnxruntime), ``"twin"``
        and ``"cpu"`` (Tessera's session with ``["sim", "cpu"]`` and ``["cpu"]``).
    seconds : dict of str -> float
        Wall time per step (``"twin-open"`` includes building the twin when not cached).
    profile : dict of str -> dict
        The twin run's per-layer profile summed over batches (keys as
        ``InferenceSession.profile()``, ``cycles`` summed too).
    """

    labels: np.ndarray
    outputs: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    profile: dict = field(default_factory=dict)

    def accuracy(self, key):
        """Top-1 accuracy of the run ``key`` against :attr:`labels`."""
        return float((self.outputs[key].argmax(axis=1) == self.labels).mean())

    @property
    def identical(self):
        """Whether the twin's outputs equal the CPU provider's bit for bit."""
        twin, cpu = self.outputs["twin"], self.outputs["cpu"]
        return twin.dtype == cpu.dtype and np.array_equal(twin, cpu)


def onnxruntime_outputs(path, x):
    """Outputs of ``path`` on ``x`` with onnxruntime's CPU provider (one thread)."""
    session = onnxruntime_session(path, optimized=True)
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def accumulate(totals, profile):
    """Add one run's ``session.profile()`` into ``totals`` (layer name -> entry)."""
    for entry in profile:
        if entry["layer"] not in totals:
            totals[entry["layer"]] = dict(entry, seconds=0.0, bytes=0)
            totals[entry["layer"]].pop("cycles", None)
        total = totals[entry["layer"]]
        total["seconds"] += entry["seconds"]
        total["bytes"] += entry["bytes"]
        if "cycles" in entry:
            total["cycles"] = total.get("cycles", 0) + entry["cycles"]


def run_session(session, x, batch, *, totals=None, advance=None):
    """``session``'s outputs on ``x`` in batches of ``batch``; profiles summed into
    ``totals``; ``advance(n)`` after each batch of ``n`` images."""
    name = session.get_inputs()[0].name
    outputs = []
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        outputs.append(session.run(None, {name: chunk})[0])
        if totals is not None:
            accumulate(totals, session.profile())
        if advance is not None:
            advance(len(chunk))
    return np.concatenate(outputs)


def timed(result, key, function, *args, **kwargs):
    """``function(*args, **kwargs)``, its wall time stored as ``result.seconds[key]``."""
    started = time.perf_counter()
    value = function(*args, **kwargs)
    result.seconds[key] = time.perf_counter() - started
    return value
