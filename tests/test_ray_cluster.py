"""run-dataset on a simulated two-node Ray cluster on 127.0.0.1 (docs/scale-out.md).

One ``ray.cluster_utils.Cluster`` serves the module: a head node with 1 CPU and a second
node with 2 CPUs that declares a fake board, ``fpga_fake: 2``. The tests show that actors
asking for the board land only on that node, that a resource nobody has is refused at
once, that an interrupted sharded run resumes to the bytes of an uninterrupted one, and
that an actor process dying, or a whole node killed, mid-run loses and repeats nothing.
Seeds are printed.
"""

import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sw_driver import InferenceSession
from tessera.batch import MANIFEST, BatchJobError, Fault, load_shards, run_dataset, run_to_shards
from tessera.cli import main
from tessera.ray_cluster import RayClusterError, ResourceUnavailable, import_ray

try:
    import_ray()  # not a plain import: a local Ray must first be told to stay on 127.0.0.1
except RayClusterError as exc:
    pytest.skip(str(exc), allow_module_level=True)

#: Ray Data touches its own deprecated settings when its context is first read.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

DIGITS = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"
BOARD = "fpga_fake"
#: The GCS declares a silent node dead after 3 missed checks 1 s apart (Ray's default is
#: a few times longer), so the node-kill test's lost actor restarts sooner.
FAST_FAILURE_DETECTION = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                          "health_check_failure_threshold": 3}
#: One per node of the node-kill test, so that its actors are on different nodes.
SLOT = "slot"
#: Seconds within which a job asking for a resource nobody has must be refused.
REFUSAL_SECONDS = 5.0


@pytest.fixture(scope="module")
def cluster():
    """(ray, id of the node with the board, the Cluster)."""
    ray = import_ray()
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # a Ray left by an earlier module: this one joins the cluster
        ray.shutdown()
    loopback = {"node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION,
        **loopback})
    board_node = cluster.add_node(num_cpus=2, resources={BOARD: 2}, **loopback)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield ray, board_node.node_id, cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def model():
    return DIGITS.read_bytes()


def _samples(seed, count):
    print(f"run-dataset: seed {seed}, {count} random digits-shaped samples")
    x = np.random.default_rng(seed).uniform(0, 16, (count, 1, 8, 8)).astype(np.float32)
    session = InferenceSession(str(DIGITS), providers=["cpu"])
    return x, session.run(None, {session.get_inputs()[0].name: x})[0]


def _assert_same(actual, expected, seed, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    differ = np.argwhere(actual != expected)
    assert not len(differ), (f"{what}: {len(differ)} elements differ, first at "
                             f"{tuple(differ[0])}: {actual[tuple(differ[0])]} vs "
                             f"{expected[tuple(differ[0])]} (seed {seed})")


def test_the_cluster_has_two_loopback_nodes(cluster):
    ray, _, _ = cluster
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"] * 2
    assert ray.cluster_resources()[BOARD] == 2


def test_board_actors_land_only_on_the_node_with_the_board(cluster, model, seed):
    ray, board_node, _ = cluster
    x, expected = _samples(seed, 96)
    nodes = Counter()
    y = run_dataset(model, x, ["cpu"], batch_size=8, ray=ray, actors=2, resource=BOARD,
                    nodes=nodes)
    _assert_same(y, expected, seed, "actors on the board")
    assert nodes == {board_node: 96}


def test_cpu_actors_spread_over_both_nodes(cluster, model, seed):
    ray, _, _ = cluster
    x, expected = _samples(seed, 192)
    nodes = Counter()
    # three one-CPU actors need both nodes' CPUs; slow batches give every actor some
    y = run_dataset(model, x, ["cpu"], batch_size=8, ray=ray, actors=3, nodes=nodes,
                    fault=Fault("slow", seconds=0.05))
    _assert_same(y, expected, seed, "3 CPU actors")
    print(f"samples per node: {dict(nodes)}")
    assert sum(nodes.values()) == 192
    assert set(nodes) == {node["NodeID"] for node in ray.nodes() if node["Alive"]}


@pytest.mark.parametrize("resource, actors, short", [
    ("fpga_nobody", 1, "fpga_nobody 1"),  # no node declares it
    (BOARD, 3, f"{BOARD} 3"),             # two boards, three sessions
])
def test_a_resource_the_cluster_lacks_is_refused_at_once(cluster, model, resource, actors,
                                                         short):
    ray, _, _ = cluster
    started = time.monotonic()
    with pytest.raises(ResourceUnavailable) as error:
        run_dataset(model, np.zeros((4, 1, 8, 8), np.float32), ["cpu"], ray=ray,
                    actors=actors, resource=resource)
    assert time.monotonic() - started < REFUSAL_SECONDS
    message = str(error.value)
    assert f"need {short} in all" in message, message
    assert "CPU 3" in message and f"{BOARD} 2" in message, message  # what the cluster has


def test_the_cli_names_a_missing_resource(cluster, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((4, 1, 8, 8), np.float32))
    assert main(["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "y.npy"), "--ray", "--resource", "fpga_nobody"]) == 2
    err = capsys.readouterr().err
    assert "fpga_nobody 2" in err and "Traceback" not in err
    assert not (tmp_path / "y.npy").exists()


def test_an_interrupted_sharded_run_resumes_to_the_same_bytes(cluster, model, seed,
                                                              tmp_path):
    ray, _, _ = cluster
    x, expected = _samples(seed, 120)
    whole = tmp_path / "whole"
    report = run_to_shards(model, x, ["cpu"], whole, shard_size=20, batch_size=10, ray=ray)
    assert report.written == [f"part-{n:05d}.npy" for n in range(6)] and not report.skipped
    _assert_same(load_shards(whole), expected, seed, "uninterrupted")

    resumed = tmp_path / "resumed"
    fault = Fault("raise", after=3, once=str(tmp_path / "fired"))
    with pytest.raises(BatchJobError, match="cpu failed on a Ray actor: RuntimeError: "
                                            "injected fault after 3 batches$"):
        run_to_shards(model, x, ["cpu"], resumed, shard_size=20, batch_size=10, ray=ray,
                      actors=1, fault=fault)
    report = run_to_shards(model, x, ["cpu"], resumed, shard_size=20, batch_size=10, ray=ray)
    assert sorted(report.written + report.skipped) == [f"part-{n:05d}.npy" for n in range(6)]
    for name in [*report.written, *report.skipped, MANIFEST]:
        if name != MANIFEST:
            assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name
    _assert_same(load_shards(resumed), expected, seed, "resumed")


def test_a_killed_actor_process_loses_and_repeats_nothing(cluster, model, seed, tmp_path):
    ray, _, _ = cluster
    x, expected = _samples(seed, 160)
    fired = tmp_path / "fired"
    y = run_dataset(model, x, ["cpu"], batch_size=8, ray=ray, actors=2,
                    fault=Fault("exit", after=3, once=str(fired)))
    assert fired.exists()  # an actor's process did end mid-run
    _assert_same(y, expected, seed, "after an actor died")  # in order: 0 lost, 0 repeated


def test_a_node_killed_mid_run_loses_and_repeats_nothing(cluster, model, seed):
    """Two actors on two of three one-slot nodes; the first node to deliver outputs is
    killed, its actor restarts on the third and its lost batches are retried there."""
    ray, _, nodes_of = cluster
    loopback = {"node_ip_address": "127.0.0.1"}
    added = {node.node_id: node for node in (
        nodes_of.add_node(num_cpus=1, resources={SLOT: 1}, **loopback) for _ in range(3))}
    x, expected = _samples(seed, 240)
    nodes, killed, failures = Counter(), [], []

    def kill_the_first_node_that_works():  # Cluster.add_node needs the main thread: not here
        try:
            deadline = time.monotonic() + 60
            while not nodes and time.monotonic() < deadline:
                time.sleep(0.02)
            victim = next(iter(nodes))
            killed.append((victim, sum(nodes.values())))
            nodes_of.remove_node(added.pop(victim), allow_graceful=False)
        except Exception as error:  # reported by the test, not lost in the thread
            failures.append(error)

    killer = threading.Thread(target=kill_the_first_node_that_works, daemon=True)
    killer.start()
    try:
        y = run_dataset(model, x, ["cpu"], batch_size=8, ray=ray, actors=2, resource=SLOT,
                        fault=Fault("slow", seconds=0.05), nodes=nodes)
        killer.join(timeout=30)
    finally:
        for node in added.values():
            nodes_of.remove_node(node)
    assert not failures, failures
    print(f"node killed after {killed[0][1]} of 240 samples; samples per node {dict(nodes)}")
    victim, delivered = killed[0]
    assert 0 < delivered < 240 and 0 < nodes[victim] < 240  # really mid-run
    assert len(nodes) >= 2  # the rest ran elsewhere
    _assert_same(y, expected, seed, "after a node died")  # in order: 0 lost, 0 repeated


def test_a_session_error_on_an_actor_is_one_named_line(cluster, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 5, 5), np.float32))  # not the model's shape
    assert main(["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "y"), "--ray"]) == 2
    # Only the command's own line: Ray Data's log handler, bound to an earlier test's
    # captured stderr, may add its own complaints to this one.
    (line,) = [line for line in capsys.readouterr().err.splitlines()
               if line.startswith("error: ")]
    assert line.startswith("error: a session of cpu failed on a Ray actor: "), line
    assert "expects ['N', 1, 8, 8]" in line and line.endswith("rerun to resume"), line
