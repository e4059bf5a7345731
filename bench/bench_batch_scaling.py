"""How batch inference scales over CPU workers on a simulated 3-node Ray cluster.

The target: throughput with W CPU workers within 80 % of W times that of one, up to
the cores available, results bit-exact with a single-process run and in order. This
machine has 2 cores, so W is 1 and 2, each a Ray node of one CPU beside a head node that
offers none (``ray.cluster_utils.Cluster``, every node on 127.0.0.1, as in
tests/test_ray_cluster.py).

What runs is the product: ``tessera run-dataset MODEL --ray ADDRESS --actors W`` as its own
process, as a user runs it (the end-to-end figure includes its start and its joining the
cluster, the CPU sampler follows its process tree, and this process never joins the
cluster), writing a ``.npy`` shard of ``BATCH`` samples as soon as they are back (Ray Data
hands the actors batches of about that size, bundled from its input blocks). The workload is
the ResNet-8-like zoo model on the ``cpu`` provider, about 0.8 ms a sample here, so a batch
computes for a fifth of a second and Ray's per-batch cost is small beside it (the digits
CNN, 14 µs a sample, measured only Ray's overheads: docs/scale-out.md). Every worker and the
driver run with ``OPENBLAS_NUM_THREADS=1``, so one worker is one core.

Two throughputs per run:

- end to end: samples over the command's wall time (Python start, imports, joining the
  cluster, building Ray Data's rows in the driver, actors starting, the run, shard writes);
- steady state: samples of every batch but the first over the time from the first shard
  written to the last (the file times), which leaves out the fixed costs before the first
  batch is done: the scaling target is about this one.

Each figure is the median of ``REPEATS`` runs, 1 and 2 workers interleaved so that load
from elsewhere falls on both alike. The peer is one ``InferenceSession`` in this process
over the same batches, whose outputs every run must match bit for bit, in order; and two
plain processes without Ray, one session each over half the batches, show what the
machine itself gives two sessions (its own ceiling, whatever runs them). Also recorded per
run: the CPU seconds of the driver, the Ray workers, Ray's daemons and the rest of the
machine (read from /proc, sampled every half second, so a process that lives less than
that is missed), which show where the two cores went when the scaling falls short.

``make bench NAMES=batch_scaling``: about 7 minutes here, both cores busy throughout, so
other work on the machine lowers the figures (the ``other`` CPU seconds show how much).
"""

import os

if __name__ == "__main__":  # before NumPy loads; main() sets it for the Ray nodes anyway
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import metric, write_results

ROOT = Path(__file__).resolve().parent.parent
MODEL = "resnet8"
PROVIDERS = "cpu"
#: Samples per batch (one shard each): about 0.2 s of compute on one core here.
BATCH = 256
#: 120 batches: about 25 s for one worker.
SAMPLES = 120 * BATCH
WORKERS = (1, 2)
REPEATS = 5
#: Target: throughput within 80 % of linear in the number of workers.
TARGET_EFFICIENCY = 0.8
#: Object store of each simulated node: the input (about 380 MB as Ray Data rows) lives
#: in the head's, where the driver puts it.
OBJECT_STORE_BYTES = 1024 * 2**20
#: Seconds between /proc samples of the CPU time of the Ray processes.
SAMPLE_PERIOD = 0.5
RUN_TIMEOUT = 600
#: Clock ticks per second of /proc/<pid>/stat's CPU times.
TICKS = os.sysconf("SC_CLK_TCK")


def steady_rate(times, sizes):
    """Samples per second from the first batch done to the last.

    ``times[i]`` is when batch ``i`` (of ``sizes[i]`` samples) was done; the first batch's
    samples are not counted, since the interval starts when it is done.

    Raises
    ------
    ValueError
        Fewer than two batches, or none after the first took any time.
    """
    if len(times) != len(sizes) or len(times) < 2:
        raise ValueError(f"need the times and sizes of at least two batches, not "
                         f"{len(times)} times and {len(sizes)} sizes")
    order = np.argsort(times, kind="stable")
    span = float(times[order[-1]] - times[order[0]])
    if span <= 0:
        raise ValueError(f"batches done {span} s apart: no interval to measure over")
    return (sum(sizes) - sizes[order[0]]) / span


def scaling(rate_one, rate_many, workers):
    """``(scaling, efficiency)``: ``rate_many / rate_one`` and that over ``workers``."""
    if rate_one <= 0 or workers < 1:
        raise ValueError(f"need a positive one-worker rate and workers >= 1, not "
                         f"{rate_one} and {workers}")
    ratio = rate_many / rate_one
    return ratio, ratio / workers


def _model_path():
    from models.zoo import random_models

    return random_models.built(MODEL, ROOT / random_models.BUILD_DIR)


def _inputs():
    from models.zoo import random_models

    return random_models.random_inputs(np.random.default_rng(15), SAMPLES)


def single_process(model, x):
    """Outputs of one session over the batches, and its samples/s (after a warm-up batch)."""
    from sw_driver import InferenceSession

    session = InferenceSession(str(model), providers=[PROVIDERS])
    name = session.get_inputs()[0].name
    session.run(None, {name: x[:BATCH]})
    started = time.perf_counter()
    y = np.concatenate([session.run(None, {name: x[start:start + BATCH]})[0]
                        for start in range(0, len(x), BATCH)])
    return y, len(x) / (time.perf_counter() - started)


def _plain_worker(model, x, barrier, results):
    from sw_driver import InferenceSession

    session = InferenceSession(str(model), providers=[PROVIDERS])
    name = session.get_inputs()[0].name
    session.run(None, {name: x[:BATCH]})
    barrier.wait()  # every process computes over the same interval
    started = time.time()
    for start in range(0, len(x), BATCH):
        session.run(None, {name: x[start:start + BATCH]})
    results.put((started, time.time(), len(x)))


def plain_processes(model, x, workers):
    """Samples/s of ``workers`` plain processes (no Ray), each one session over its share
    of ``x``, from the first to start to the last to finish: what the machine itself gives
    ``workers`` sessions, the ceiling of any scheduler on it."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(workers), context.Queue()
    processes = [context.Process(target=_plain_worker, args=(model, part, barrier, results))
                 for part in np.array_split(x, workers)]
    for process in processes:
        process.start()
    spans = [results.get(timeout=RUN_TIMEOUT) for _ in processes]
    for process in processes:
        process.join()
    return sum(n for _, _, n in spans) / (max(e for _, e, _ in spans) -
                                          min(s for s, _, _ in spans))


def _proc_stat(pid):
    """``(name, parent pid, CPU seconds)`` of ``pid``, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _machine_busy():
    """CPU seconds the whole machine has been busy (all processes, the kernel's work
    included; not idle, I/O wait or time stolen by the hypervisor)."""
    with open("/proc/stat") as stat:
        user, nice, system, _, _, irq, softirq = (int(v) for v in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / TICKS


def _role(pid, name, driver):
    if pid == driver:
        return "driver"
    if pid == os.getpid():
        return "bench"
    if name.startswith("ray::"):
        return "ray workers"
    return "ray daemons"


class CpuSampler:
    """CPU seconds used during a run, by role: the driver (``driver``, the run-dataset
    process), Ray's workers (``ray::`` process titles), everything else Ray runs (GCS,
    raylets, agents: ``ray daemons``), this process (``bench``) and the rest of the machine
    (``other``)."""

    def __init__(self, driver):
        self.driver, self.first, self.last = driver, {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _proc_stat(int(entry))
                if stat is not None:
                    stats[int(entry)] = stat
        busy = _machine_busy()
        self.busy_first = getattr(self, "busy_first", busy)
        self.busy_last = busy
        mine, frontier = {os.getpid()}, [os.getpid()]
        children = {}
        for pid, (_, parent, _) in stats.items():
            children.setdefault(parent, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), ()):
                if child not in mine:
                    mine.add(child)
                    frontier.append(child)
        for pid in mine:
            name, _, cpu = stats[pid]
            key = (pid, _role(pid, name, self.driver))
            self.first.setdefault(key, cpu)
            self.last[key] = cpu

    def _loop(self):
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(SAMPLE_PERIOD)

    def __enter__(self):
        self._sample()  # the daemons' starting point, before the driver does anything
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()

    def seconds(self):
        """``{role: CPU seconds}`` used between the first and the last sample; ``other``
        is what the rest of the machine used meanwhile (other users' jobs)."""
        used = {}
        for (pid, role), cpu in self.last.items():
            used[role] = used.get(role, 0.0) + cpu - self.first[(pid, role)]
        used["other"] = max(0.0, self.busy_last - self.busy_first - sum(used.values()))
        return {role: round(value, 2) for role, value in sorted(used.items())}


def _start_cluster():
    """The simulated 3-node cluster: a head offering no CPU, two nodes of one CPU each."""
    from tessera.ray_cluster import import_ray

    import_ray()  # a loopback-only Ray, as the tests start it; this process never joins
    from ray.cluster_utils import Cluster

    loopback = {"node_ip_address": "127.0.0.1", "object_store_memory": OBJECT_STORE_BYTES}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, **loopback})
    for _ in range(max(WORKERS)):
        cluster.add_node(num_cpus=1, **loopback)
    cluster.wait_for_nodes()
    return cluster


def run_on_cluster(address, model, inputs, workers, reference):
    """One ``tessera run-dataset --ray`` of ``workers`` actors: its figures, outputs checked."""
    with tempfile.TemporaryDirectory(prefix="tessera-batch-scaling-") as out:
        command = [sys.executable, "-m", "tessera.cli", "run-dataset", str(model),
                   "--input", str(inputs), "--out", out, "--batch", str(BATCH),
                   "--shard-size", str(BATCH), "--providers", PROVIDERS,
                   "--ray", address, "--actors", str(workers)]
        started, started_clock = time.perf_counter(), time.time()
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        with CpuSampler(process.pid) as sampler:
            output, _ = process.communicate(timeout=RUN_TIMEOUT)
        wall = time.perf_counter() - started
        if process.returncode:
            raise RuntimeError(f"run-dataset with {workers} workers failed "
                               f"({process.returncode}):\n{output}")
        shards = sorted(Path(out).glob("part-*.npy"))
        arrays = [np.load(shard) for shard in shards]
        y = np.concatenate(arrays)
        differ = np.argwhere(y != reference) if y.shape == reference.shape else [()]
        if len(differ):
            raise AssertionError(f"{workers} workers: outputs {y.shape} {y.dtype} differ from "
                                 f"the single-process run's {reference.shape} "
                                 f"{reference.dtype}, first at {tuple(differ[0])}")
        times = [shard.stat().st_mtime_ns / 1e9 for shard in shards]
        sizes = [len(array) for array in arrays]
    return {"workers": workers, "wall_s": round(wall, 2),
            "end_to_end_samples_per_s": round(len(reference) / wall, 1),
            "steady_samples_per_s": round(steady_rate(times, sizes), 1),
            "first_batch_done_after_s": round(min(times) - started_clock, 2),
            "cpu_s": sampler.seconds()}


def main():
    # The Ray nodes started below, so every worker they start, and the plain processes
    # inherit it, whatever loaded NumPy in this process first (`make bench` sets it too).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    load = os.getloadavg()[0]
    model = _model_path()
    x = _inputs()
    print(f"batch scaling: {SAMPLES} samples of {MODEL} on {PROVIDERS}, batches of {BATCH}, "
          f"load average {load:.2f}")
    reference, single = single_process(model, x)
    print(f"  one session in this process: {single:.1f} samples/s")
    cluster = _start_cluster()
    runs, plain = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="tessera-batch-input-") as folder:
            inputs = Path(folder) / "x.npy"
            np.save(inputs, x)
            for repeat in range(REPEATS):
                plain.append(plain_processes(model, x, max(WORKERS)))
                print(f"  {max(WORKERS)} plain processes, one session each, repeat {repeat}: "
                      f"{plain[-1]:.1f} samples/s")
                for workers in WORKERS:
                    run = run_on_cluster(cluster.address, model, inputs, workers, reference)
                    run["repeat"] = repeat
                    runs.append(run)
                    print(f"  {workers} worker(s), repeat {repeat}: {run}")
    finally:
        cluster.shutdown()

    def median(workers, key):
        return statistics.median(r[key] for r in runs if r["workers"] == workers)

    one, two = (median(w, "steady_samples_per_s") for w in WORKERS)
    plain_rates, plain = plain, statistics.median(plain)
    e2e_one, e2e_two = (median(w, "end_to_end_samples_per_s") for w in WORKERS)
    ratio, efficiency = scaling(one, two, WORKERS[-1])
    e2e_ratio, e2e_efficiency = scaling(e2e_one, e2e_two, WORKERS[-1])
    peer = f"1 worker, same cluster and data, same run (median of {REPEATS})"
    metrics = [
        metric("single_process_samples_per_s", round(single, 1), "samples/s",
               note="one InferenceSession in the bench process, same batches; the outputs "
                    "every cluster run must match bit for bit"),
        metric("plain_processes_scaling", round(plain / single, 3), "x",
               peer="one session in one process, same run", peer_value=round(single, 1),
               note=f"{max(WORKERS)} processes without Ray, {plain:.1f} samples/s in all: "
                    f"what this machine gives {max(WORKERS)} sessions, Ray or not "
                    f"(median of {REPEATS}, each repeat before the cluster runs)"),
        metric("steady_one_worker_samples_per_s", one, "samples/s",
               peer="one session in one process, same run", peer_value=round(single, 1),
               note="first shard written to last, median"),
        metric("steady_two_workers_samples_per_s", two, "samples/s",
               note="first shard written to last, median"),
        metric("steady_scaling_two_over_one", round(ratio, 3), "x", peer=peer,
               peer_value=one),
        metric("steady_efficiency", round(efficiency, 3), "fraction", peer=peer,
               peer_value=one, target=f">= {TARGET_EFFICIENCY}",
               note="scaling / 2 workers"),
        metric("end_to_end_one_worker_seconds", median(1, "wall_s"), "s",
               note="the run-dataset command's wall time, median"),
        metric("end_to_end_two_workers_seconds", median(2, "wall_s"), "s",
               note="the run-dataset command's wall time, median"),
        metric("end_to_end_efficiency", round(e2e_efficiency, 3), "fraction", peer=peer,
               peer_value=e2e_one, note=f"end-to-end scaling {e2e_ratio:.3f}x over 2 "
                                        f"workers, fixed costs included"),
    ]
    return write_results("batch_scaling", metrics, model=MODEL, providers=PROVIDERS,
                         samples=SAMPLES, batch=BATCH, repeats=REPEATS,
                         cluster="head 0 CPUs + 2 nodes of 1 CPU, all on 127.0.0.1",
                         openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
                         load_average_at_start=round(load, 2),
                         load_average_at_end=round(os.getloadavg()[0], 2),
                         plain_processes_samples_per_s=[round(r, 1) for r in plain_rates],
                         runs=runs)


if __name__ == "__main__":
    main()
