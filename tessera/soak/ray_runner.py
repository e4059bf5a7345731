"""The soak on Ray (``tessera soak --ray [ADDRESS]``; ``docs/ray.md``).

The case indices of one seed, or of several (``tessera soak --seeds 1-8``), are cut into
chunks, one Ray task each. A task runs its chunk with
:func:`~.runner.run_cases` on backends opened once per worker process (:func:`_backends`:
the twin is loaded once, not per task) and sends back each :class:`~.runner.CaseResult`
with its case reduced to :class:`CaseSummary` (what the tally and the console read: no
layer, no arrays). The driver yields the results in (seed, index) order as the chunks
finish, so :class:`~.tally.Tally` counts them exactly as a local run does and writes the
same JSON.

A provider from outside the project (a test double, a vendor's plugin) is soaked by naming
its module in ``TESSERA_SOAK_PROVIDERS`` (:func:`~.backends.load_plugins`); the tasks carry
that variable to their workers, so a cluster node loads it as the local run does.

This module imports no Ray: :class:`RaySoak` is handed the ``ray`` module that
:func:`tessera.ray_cluster.connect` imported.
"""

import os
from dataclasses import dataclass, replace

from .backends import PLUGINS_VARIABLE, open_backends
from .runner import run_cases

__all__ = ["BackendInfo", "CaseSummary", "RaySoak", "chunked", "run_chunk"]

#: Chunks per CPU of the cluster: enough for progress and balance, few enough that Ray's
#: per-task cost (milliseconds) stays small against a chunk (a second or more).
CHUNKS_PER_CPU = 4
MAX_CHUNK = 50
#: Reruns of a chunk whose worker process or node died (a chunk is a pure function of its
#: seed and indices, so a rerun gives the same results). An exception raised by the chunk
#: itself is not retried (``retry_exceptions`` stays False): it is a bug to report.
TASK_RETRIES = 3


@dataclass(frozen=True)
class CaseSummary:
    """What is read of a :class:`~.case.SoakCase` once it has run."""

    seed: int
    index: int
    kind: str
    description: str


@dataclass(frozen=True)
class BackendInfo:
    """A backend as the tally sees it: its name, its label, or why it is unavailable."""

    name: str
    label: str
    unavailable: str = None

    @property
    def available(self):
        return self.unavailable is None

    def close(self):
        """Nothing to close on the driver: the providers live in the workers."""


def _info(backend):
    return BackendInfo(backend.name, backend.label, backend.unavailable)


#: Opened backends of this worker process, by (names, engine configuration).
_OPENED = {}


def _backends(names, sim_config):
    key = (repr(names), repr(sim_config))  # entries may hold option dicts
    if key not in _OPENED:
        _OPENED[key] = open_backends(names, log=lambda message: None, sim_config=sim_config)
    return _OPENED[key]


def run_chunk(seed, indices, names, use_onnxruntime=True, sim_config=None):
    """One Ray task's work (also callable locally): ``(backend infos, results)``."""
    backends = _backends(names, sim_config)
    results = [replace(result, case=CaseSummary(result.case.seed, result.case.index,
                                                result.case.kind, result.case.description))
               for result in run_cases(seed, indices, backends, use_onnxruntime)]
    return [_info(backend) for backend in backends], results


def chunked(indices, cpus, seeds=1):
    """``indices`` cut into consecutive chunks, about :data:`CHUNKS_PER_CPU` per CPU over
    the ``seeds`` seeds that each run all of them."""
    indices = list(indices)
    total = len(indices) * max(1, seeds)
    size = max(1, min(MAX_CHUNK, -(-total // max(1, CHUNKS_PER_CPU * cpus))))
    return [indices[i:i + size] for i in range(0, len(indices), size)]


class RaySoak:
    """Soak cases as Ray tasks on an initialized Ray (:func:`tessera.ray_cluster.connect`).

    Parameters
    ----------
    ray : module
        ``ray``, initialized.
    seed : int or sequence of int
        One seed, or several: each runs every index of ``indices``.
    indices : sequence of int
    names : list
        Backend names and ``(name, options)`` pairs (:func:`~.backends.parse_backends`).
    use_onnxruntime : bool
    sim_config : contract.config.ConvEngineConfig or None

    Attributes
    ----------
    backends : list of BackendInfo
        As the first chunk to finish found them (every chunk must agree).
    """

    def __init__(self, ray, seed, indices, names, use_onnxruntime=True, sim_config=None):
        self._ray = ray
        seeds = [seed] if isinstance(seed, int) else list(seed)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        cut = chunked(indices, cpus, len(seeds))
        #: (seed, indices) of each task, in the order the results are yielded.
        self.work = [(s, chunk) for s in seeds for chunk in cut]
        self.chunks = [chunk for _, chunk in self.work]
        plugins = os.environ.get(PLUGINS_VARIABLE)
        options = {"max_retries": TASK_RETRIES, "retry_exceptions": False}
        if plugins:  # the workers load the same outside providers as this process
            options["runtime_env"] = {"env_vars": {PLUGINS_VARIABLE: plugins}}
        task = ray.remote(**options)(run_chunk)
        self._pending = {task.remote(s, chunk, names, use_onnxruntime, sim_config): n
                         for n, (s, chunk) in enumerate(self.work)}
        self._done = {}
        self.backends = None
        self._wait_one()

    def _wait_one(self):
        (ref,), _ = self._ray.wait(list(self._pending), num_returns=1)
        number = self._pending.pop(ref)
        infos, results = self._ray.get(ref)
        if self.backends is None:
            self.backends = infos
        elif infos != self.backends:
            raise RuntimeError(f"the backends differ between Ray workers: {self.backends} "
                               f"and {infos} (chunk {number}); run with --backends naming "
                               f"those every node has")
        self._done[number] = results
        return len(results)

    def results(self, on_finished=None):
        """Yield every :class:`~.runner.CaseResult` in (seed, index) order.

        ``on_finished(n)`` is called as each chunk of ``n`` cases finishes (in any order).
        """
        if on_finished is not None:
            for results in self._done.values():
                on_finished(len(results))
        for number in range(len(self.chunks)):
            while number not in self._done:
                finished = self._wait_one()
                if on_finished is not None:
                    on_finished(finished)
            yield from self._done.pop(number)
