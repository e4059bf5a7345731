"""One session, many threads: ``run`` called concurrently gives the single-threaded result.

For each provider (cpu, opencl, sim), :data:`THREADS` threads share ONE session and each
runs :data:`RUNS` times on its own inputs; every output must equal, bit for bit, what the
same session returned for those inputs on one thread (target: 0 wrong results, 0 errors
and 0 crashes with 8 threads). The twin is also watched from below: no two calls into its C
library may ever overlap. The opencl tests skip, saying why, only where no OpenCL platform
exists.
"""

import threading

import numpy as np
import pytest
import qdq_models

from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.opencl import NoPlatformError, list_devices
from sw_driver.providers import CPUProvider, PCIeProvider, SimProvider
from sw_driver.providers.costs import CostModel

THREADS = 8
RUNS = 4
#: The 4x4 engine of tests/test_providers_sim.py, so the twin's cached build is shared.
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
#: Seconds a thread may take before the test calls it hung (the issue saw runs hang for
#: over 100 s inside the twin); generous, as this is a failure report, not a timing.
HANG_SECONDS = 300


def _no_opencl():
    try:
        list_devices()
    except NoPlatformError as exc:
        return f"no OpenCL platform with a device: {exc}"
    return None


needs_opencl = pytest.mark.skipif(_no_opencl() is not None, reason=str(_no_opencl()))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (model path, per-thread feeds): the digits CNN on test images, and the
    residual test model (Add layers) on seeded random inputs."""
    _, _, x, _ = load_digits_split()
    digits = [{"input": x[2 * i:2 * i + 2]} for i in range(THREADS)]
    _, residual_path, shape = qdq_models.build("residual", 202, tmp_path_factory.mktemp("q"))
    rng = np.random.default_rng(17)
    residual = [{"x": rng.standard_normal((2, *shape)).astype(np.float32)}
                for _ in range(THREADS)]
    return {"digits": (DIGITS_QDQ, digits), "residual": (residual_path, residual)}


@pytest.fixture(scope="module")
def sim():
    provider = SimProvider(CONFIG, log=lambda message: None)
    yield provider
    provider.close()


def _difference(got, want):
    """None when identical, else where they first differ."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    bad = np.argwhere(got != want)
    if not bad.size:
        return None
    index = tuple(int(i) for i in bad[0])
    return (f"{len(bad)} elements differ; first at {index}: threaded {got[index]!r}, "
            f"single-threaded {want[index]!r}")


def hammer(work, threads=THREADS, runs=RUNS):
    """Run ``work(thread, run)`` on ``threads`` threads started together, ``runs`` times
    each; returns every failure (an exception or the difference ``work`` returns)."""
    start = threading.Barrier(threads)
    failures = []

    def loop(thread):
        start.wait()
        for run in range(runs):
            try:
                problem = work(thread, run)
            except Exception as exc:  # every error is a failure to report
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                failures.append(f"thread {thread} run {run}: {problem}")

    pool = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(HANG_SECONDS)
    hung = [i for i, thread in enumerate(pool) if thread.is_alive()]
    assert not hung, f"threads {hung} still running after {HANG_SECONDS} s"
    return failures


def check_concurrent(session, feeds):
    """Every thread's results equal the single-threaded ones; the profile each thread
    reads is its own run's (same placement as the single-threaded run)."""
    want = [session.run(None, feed) for feed in feeds]  # one thread: the reference
    placement = [(e["layer"], e["provider"]) for e in session.profile()]

    def work(thread, run):
        got = session.run(None, feeds[thread])
        profile = session.profile()
        faults = [f for e in profile for f in e.get("faults", [])]
        if faults:  # a retry would hide a corrupted device behind a correct result
            return f"device faults: {faults}"
        mine = [(e["layer"], e["provider"]) for e in profile]
        if mine != placement:
            return f"profile placement {mine} != single-threaded {placement}"
        for index, (g, w) in enumerate(zip(got, want[thread], strict=True)):
            problem = _difference(g, w)
            if problem:
                return f"output {index}: {problem}"
        return None

    failures = hammer(work)
    assert not failures, f"{len(failures)} of {THREADS * RUNS} runs failed:\n" + \
        "\n".join(failures[:10])


@pytest.mark.parametrize("model", ["digits", "residual"])
def test_cpu_session_shared_by_threads(models, model):
    path, feeds = models[model]
    check_concurrent(InferenceSession(path, providers=["cpu"]), feeds)


@needs_opencl
@pytest.mark.parametrize("model", ["digits", "residual"])
def test_opencl_session_shared_by_threads(models, model):
    path, feeds = models[model]
    session = InferenceSession(path, providers=["opencl"])
    assert {layer for layer, provider, _ in session._placement
            if provider.name == "opencl"}, "expected layers on OpenCL"
    check_concurrent(session, feeds)


class _EntryCounter:
    """Stands in for the twin's ctypes library and records the most calls ever inside it
    at once (ctypes releases the GIL, so overlapping calls would be seen)."""

    def __init__(self, lib):
        self._lib = lib
        self._count = threading.Lock()
        self.inside = self.most = self.calls = 0

    def __getattr__(self, name):
        function = getattr(self._lib, name)

        def counted(*args):
            with self._count:
                self.inside += 1
                self.calls += 1
                self.most = max(self.most, self.inside)
            try:
                return function(*args)
            finally:
                with self._count:
                    self.inside -= 1

        return counted


@pytest.fixture
def watched_twin(sim, monkeypatch):
    twin = sim.transport.inner.twin
    counter = _EntryCounter(twin._lib)
    monkeypatch.setattr(twin, "_lib", counter)
    return counter


@pytest.mark.slow
@pytest.mark.parametrize("model", ["digits", "residual"])
def test_sim_session_shared_by_threads(models, sim, watched_twin, model):
    path, feeds = models[model]
    session = InferenceSession(path, providers=[sim, "cpu"])
    engine_layers = {layer.name for layer in session.graph.layers
                     if layer.op in ("Conv", "Dense", "MaxPool", "GlobalAveragePool", "Add")}
    assert {layer.name for layer, p, _ in session._placement if p is sim} == engine_layers
    check_concurrent(session, feeds)
    assert watched_twin.calls > 0
    assert watched_twin.most == 1, f"{watched_twin.most} calls inside the twin at once"


@pytest.mark.slow
def test_two_providers_on_one_twin_take_turns(models, sim, watched_twin):
    """A "pcie" provider over the sim provider's own transport: two sessions, two
    providers, one device. The transport's lock keeps their layers apart."""
    path, feeds = models["digits"]
    pcie = PCIeProvider(transport=sim.transport.inner)
    slow_cpu = CPUProvider(costs=CostModel(cpu_macs_per_second=1e5))  # convs go to the card
    sessions = [InferenceSession(path, providers=[sim, "cpu"]),
                InferenceSession(path, providers=[pcie, slow_cpu])]
    assert pcie.lock is sim.lock
    want = [sessions[0].run(None, feed)[0] for feed in feeds]
    # The twin's session runs the 2x2 max pool too; the card's leaves it on the CPU (two
    # DMA transfers cost more than pooling on the host).
    expected = [{"conv1", "pool1", "conv2", "gap", "fc"}, {"conv1", "conv2", "fc"}]

    def work(thread, run):
        which = (thread + run) % 2
        session = sessions[which]
        (got,) = session.run(None, feeds[thread])
        on_device = {e["layer"] for e in session.profile() if e["provider"] != "cpu"}
        if on_device != expected[which]:
            return f"layers on the device: {sorted(on_device)}"
        return _difference(got, want[thread])

    failures = hammer(work)
    assert not failures, "\n".join(failures[:10])
    assert watched_twin.most == 1
