"""`tessera demo`: the shipped digits CNN on the Verilator twin, the CPU and onnxruntime.

The pieces are plain functions so that tests can run them on a small twin and a subset of
the test split; :func:`tessera.commands.demo.cmd_demo` adds the progress bar and the tables.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from models.zoo.reference import onnxruntime_session
from sw_driver.providers.costs import CSR_READS_PER_PASS, LinkModel
from sw_driver.resident.runner import RUN_CSR_ACCESSES

#: The UART's line rate the demo prices bytes at (8N1: 10 bits a byte, payload only).
UART_BAUD = 3_000_000
#: Register writes of a layer-at-a-time pass's descriptor (the digits CNN's passes).
PASS_CSR_WRITES = 34

__all__ = ["DemoResult", "accumulate", "link_rows", "onnxruntime_outputs", "run_session"]


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
    #: The same twin layer at a time on the first few images, for the link table.
    layered: dict = field(default_factory=dict)
    layered_images: int = 0

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


def link_rows(runs, clock_hz, *, batch, baud=UART_BAUD, link=None):
    """Rows ``(run, bytes/image, compute, UART, XDMA)`` of the demo's link table.

    ``runs`` maps a label to ``(bytes per image, cycles per image, passes per image,
    resident)``; compute is the cycles at ``clock_hz``; the UART is the payload at ``baud``;
    XDMA is :class:`~sw_driver.providers.costs.LinkModel` (two transfers and the run's
    register accesses per batch of ``batch`` resident, two transfers and about
    ``CSR_READS_PER_PASS + PASS_CSR_WRITES`` accesses per pass layer at a time)."""
    link = LinkModel() if link is None else link
    rows = []
    for label, (nbytes, cycles, passes, resident) in runs.items():
        if resident:
            transfers, csr = 2 / batch, RUN_CSR_ACCESSES / batch
        else:
            transfers, csr = 2 * passes, passes * (CSR_READS_PER_PASS + PASS_CSR_WRITES)
        xdma = (transfers * link.transfer_seconds + nbytes / link.bytes_per_second
                + csr * link.csr_seconds)
        rows.append((label, f"{nbytes:,.0f}", _us(cycles / clock_hz),
                     _us(nbytes * 10 / baud), _us(xdma)))
    return rows


def _us(seconds):
    return f"{seconds * 1e3:,.2f} ms" if seconds >= 1e-2 else f"{seconds * 1e6:,.0f} us"
