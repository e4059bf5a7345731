"""The soak on a real local Ray (``tessera soak --ray``; docs/ray.md), bound to 127.0.0.1.

One Ray (2 CPUs, no dashboard) is started for the module and shut down after it. The
seed is the test's seed (printed; ``TESSERA_SEED`` repeats it).
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw_driver import InferenceSession
from tessera import results
from tessera.cli import main
from tessera.ray_cluster import (
    LOCAL,
    RayClusterError,
    actor_resources,
    connect,
    import_ray,
    parse_resources,
)
from tessera.soak import open_backends, run_cases
from tessera.soak.ray_runner import RaySoak, chunked
from tessera.soak.tally import Tally

try:
    import_ray()  # not a plain import: a local Ray must first be told to stay on 127.0.0.1
except RayClusterError as exc:
    pytest.skip(str(exc), allow_module_level=True)

#: Ray Data touches its own deprecated settings when its context is first read.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

CASES = 40
DIGITS = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"


@pytest.fixture(scope="module")
def ray():
    with connect(LOCAL, resources=parse_resources("CPU=2, fpga_here=1")) as ray:
        yield ray


def test_the_local_ray_offers_the_declared_devices(ray):
    resources = ray.cluster_resources()
    assert resources["CPU"] == 2 and resources["fpga_here"] == 1 and "GPU" not in resources


def test_resources_are_parsed_and_bad_ones_named():
    assert parse_resources("fpga_ulx3s=1,GPU=2, CPU=8,") == {
        "fpga_ulx3s": 1.0, "GPU": 2.0, "CPU": 8.0}
    assert parse_resources("") == {}
    for bad, named in (("fpga", "'fpga'"), ("9x=1", "'9x=1'"), ("a=-1", "'-1'"),
                       ("a=many", "'many'"), ("a=nan", "'nan'")):
        with pytest.raises(ValueError, match=f"--ray-resources .*{named}"):
            parse_resources(bad)


def test_actors_ask_for_their_providers_device():
    assert actor_resources(["cpu"]) == {"num_cpus": 1}
    assert actor_resources(["sim", "cpu"]) == {"num_cpus": 1}
    assert actor_resources(["pcie", "cpu"]) == {"num_cpus": 1, "resources": {"fpga_pcie": 1}}
    assert actor_resources(["gpu", "cpu"]) == {"num_cpus": 1, "num_gpus": 1}
    assert actor_resources(["uart"], resource="fpga_ulx3s") == {
        "num_cpus": 1, "resources": {"fpga_ulx3s": 1}}


def test_a_cluster_address_takes_no_local_resources():
    with pytest.raises(RayClusterError, match="ray start --resources"):
        with connect("127.0.0.1:1", resources={"fpga_ulx3s": 1}):
            pass


def test_importing_the_project_does_not_import_ray():
    code = ("import sys, sw_driver, tessera.soak, tessera.soak.console, tessera.soak.ray_runner, "
            "tessera.ray_cluster, tessera.batch, tessera.cli\n"
            "tessera.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_the_local_ray_listens_on_loopback_only(ray):
    nodes = ray.nodes()
    assert [node["NodeManagerAddress"] for node in nodes] == ["127.0.0.1"]
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


def test_chunks_cover_every_index_once_in_order():
    for count, cpus in ((1, 2), (40, 2), (1000, 2), (7, 64)):
        chunks = chunked(range(count), cpus)
        assert [i for chunk in chunks for i in chunk] == list(range(count)), (count, cpus)


def _key(result):
    return (result.case.seed, result.case.index, result.case.kind, result.case.description)


def test_soak_on_ray_equals_the_local_run_case_for_case(ray, seed):
    print(f"soak seed {seed}, cases 0..{CASES - 1}, cpu, on Ray and locally")
    local_backends = open_backends(["cpu"], log=lambda message: None)
    local = list(run_cases(seed, range(CASES), local_backends))
    soak = RaySoak(ray, seed, range(CASES), ["cpu"])
    assert len(soak.chunks) > 1  # really spread over several tasks
    remote = list(soak.results())
    assert [r.case.index for r in remote] == list(range(CASES))
    for here, there in zip(local, remote, strict=True):
        where = f"seed {seed}, case {here.case.index} ({here.case.description})"
        assert _key(there) == _key(here), where
        assert there.golden_error == here.golden_error, where
        assert there.backends == here.backends, where
        assert there.onnxruntime == here.onnxruntime, where
    expected, actual = Tally(seed, local_backends), Tally(seed, soak.backends)
    for result in local:
        expected.add(result)
    for result in remote:
        actual.add(result)
    assert actual.document() == expected.document()


def _soak_json(monkeypatch, tmp_path, argv):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["soak", *argv]) == 0
    document = json.loads((tmp_path / "soak.json").read_text())
    for varying in ("date", "wall_seconds"):
        document.pop(varying, None)
    document.get("machine", {}).pop("load", None)  # the load average when it was written
    document["metrics"] = [m for m in document["metrics"] if m["name"] != "soak_seconds"]
    return document


def test_tessera_soak_ray_writes_the_local_json(ray, seed, monkeypatch, tmp_path, capsys):
    argv = ["--seed", str(seed % 1000), "--count", "16", "--backends", "cpu"]
    print(f"tessera soak {' '.join(argv)} [--ray]")
    local = _soak_json(monkeypatch, tmp_path / "local", argv)
    on_ray = _soak_json(monkeypatch, tmp_path / "ray", [*argv, "--ray"])
    assert on_ray == local
    out = capsys.readouterr().out
    assert "ray: 16 configurations in" in out and "0 mismatches" in out


def test_an_unreachable_address_is_named(capsys):
    assert main(["soak", "--count", "1", "--ray", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "no Ray cluster answers at 127.0.0.1:1" in err and "Traceback" not in err


def test_a_malformed_address_is_named():
    with pytest.raises(RayClusterError, match="HOST:PORT .* not 'nonsense'"):
        with connect("nonsense"):
            pass


def test_run_dataset_on_ray_is_bit_identical_to_one_session(ray, rng, seed, tmp_path, capsys):
    print(f"run-dataset: seed {seed}, 150 random digits-shaped samples")
    x = rng.uniform(0, 16, (150, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    session = InferenceSession(str(DIGITS), providers=["cpu"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    common = ["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--batch", "16"]
    assert main([*common, "--out", str(tmp_path / "local.npy")]) == 0
    assert main([*common, "--out", str(tmp_path / "ray.npy"), "--ray", "--actors", "2"]) == 0
    assert "on 2 Ray actors (a local Ray)" in capsys.readouterr().out
    for name in ("local", "ray"):
        y = np.load(tmp_path / f"{name}.npy")
        assert y.dtype == expected.dtype and y.shape == expected.shape, name
        differ = np.argwhere(y != expected)
        assert not len(differ), (f"{name}: {len(differ)} elements differ, first at "
                                 f"{tuple(differ[0])}: {y[tuple(differ[0])]} vs "
                                 f"{expected[tuple(differ[0])]} (seed {seed})")


def test_run_dataset_names_a_bad_input(tmp_path, capsys):
    assert main(["run-dataset", str(DIGITS), "--input", str(tmp_path / "none.npy"),
                 "--out", str(tmp_path / "y.npy")]) == 2
    assert "--input" in capsys.readouterr().err


def test_run_dataset_on_ray_writes_parquet_shards_in_order(ray, rng, seed, tmp_path):
    from tessera.batch import load_shards

    print(f"run-dataset --format parquet on Ray: seed {seed}, 90 random samples")
    x = rng.uniform(0, 16, (90, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    session = InferenceSession(str(DIGITS), providers=["cpu"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    argv = ["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--batch", "8",
            "--shard-size", "25", "--format", "parquet", "--ray", "--actors", "2"]
    assert main([*argv, "--out", str(tmp_path / "ray")]) == 0
    assert main([*argv[:-3], "--out", str(tmp_path / "local")]) == 0  # no Ray
    names = [f"part-{n:05d}.parquet" for n in range(4)]
    for name in names:  # shards built from Ray's batches are the local run's bytes
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    y = load_shards(tmp_path / "ray")
    assert y.dtype == expected.dtype and y.shape == expected.shape
    assert np.array_equal(y, expected), f"seed {seed}"
