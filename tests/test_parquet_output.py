"""Parquet output of ``tessera run-dataset`` (docs/scale-out.md), without Ray.

The shards are the ``.npy`` shards' machinery with another file format, so the checks
are the same: in order, bit-exact with one session over the whole array, and an
interrupted run resuming to the bytes of an uninterrupted one. The Ray path writes them
with the same code (tests/test_ray.py runs one Parquet job on Ray).
"""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa  # make setup installs it with ray[data] (requirements.txt)
import pyarrow.parquet as pq
import pytest

from sw_driver import InferenceSession
from tessera.batch import MANIFEST, Fault, load_shards, read_parquet, run_to_shards
from tessera.cli import main

DIGITS = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"
NAMES = [f"part-{n:05d}.parquet" for n in range(5)]


@pytest.fixture(scope="module")
def model():
    return DIGITS.read_bytes()


@pytest.fixture
def x(seed):
    print(f"parquet: seed {seed}, 100 random digits-shaped samples, shards of 20")
    return np.random.default_rng(seed).uniform(0, 16, (100, 1, 8, 8)).astype(np.float32)


@pytest.fixture
def expected(model, x):
    session = InferenceSession(model, providers=["cpu"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _check(y, expected, seed, where):
    assert y.dtype == expected.dtype and y.shape == expected.shape, where
    differ = np.argwhere(y != expected)
    assert not len(differ), (f"{where}: {len(differ)} elements differ, first at "
                             f"{tuple(differ[0])}: {y[tuple(differ[0])]} vs "
                             f"{expected[tuple(differ[0])]} (seed {seed})")


def test_parquet_shards_are_in_order_and_resume_to_the_same_bytes(model, x, expected, seed,
                                                                   tmp_path):
    whole = tmp_path / "whole"
    report = run_to_shards(model, x, ["cpu"], whole, shard_size=20, batch_size=10,
                           format="parquet")
    assert report.written == NAMES and not report.skipped
    _check(load_shards(whole), expected, seed, "load_shards")
    table = pq.read_table(whole / NAMES[3])  # any Arrow reader sees positions and outputs
    assert table.column_names == ["index", "y"]
    assert table.column("index").to_pylist() == list(range(60, 80))
    assert table.schema.field("y").type.shape == list(expected.shape[1:])
    _check(table.column("y").combine_chunks().to_numpy_ndarray(), expected[60:80], seed,
           NAMES[3])

    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected fault after 5 batches"):
        run_to_shards(model, x, ["cpu"], out, shard_size=20, batch_size=10, format="parquet",
                      fault=Fault("raise", after=5, once=str(tmp_path / "fired")))
    assert sorted(json.loads((out / MANIFEST).read_text())["shards"]) == NAMES[:2]
    report = run_to_shards(model, x, ["cpu"], out, shard_size=20, batch_size=10,
                           format="parquet")
    assert report.skipped == NAMES[:2] and report.written == NAMES[2:]
    for name in NAMES:
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name

    (out / NAMES[1]).write_bytes(b"damaged")  # a damaged shard fails its hash: redone
    report = run_to_shards(model, x, ["cpu"], out, shard_size=20, format="parquet")
    assert report.written == [NAMES[1]]
    _check(load_shards(out), expected, seed, "after the repair")


def test_a_directory_keeps_one_format(model, x, tmp_path):
    run_to_shards(model, x[:40], ["cpu"], tmp_path, shard_size=20)
    with pytest.raises(ValueError, match=r"holds shards of another format \(part-00000.npy\)"):
        run_to_shards(model, x[:40], ["cpu"], tmp_path, shard_size=20, format="parquet")
    with pytest.raises(ValueError, match="--format must be one of npy, parquet, not 'csv'"):
        run_to_shards(model, x[:40], ["cpu"], tmp_path / "other", shard_size=20, format="csv")


def test_a_foreign_parquet_file_is_named(tmp_path):
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match=r"other.parquet: columns \['a'\], expected"):
        read_parquet(tmp_path / "other.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="junk.parquet: not a readable Parquet file"):
        read_parquet(tmp_path / "junk.parquet")


def test_the_cli_writes_one_parquet_file_or_parquet_shards(x, expected, seed, tmp_path,
                                                            capsys):
    np.save(tmp_path / "x.npy", x)
    common = ["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--batch", "16"]
    assert main([*common, "--out", str(tmp_path / "y.parquet")]) == 0
    indices, y = read_parquet(tmp_path / "y.parquet")
    assert indices.tolist() == list(range(len(x)))
    _check(y, expected, seed, "y.parquet")

    argv = [*common, "--out", str(tmp_path / "dir"), "--format", "parquet", "--shard-size",
            "30"]
    assert main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "dir").glob("*.parquet")) == NAMES[:4]
    _check(load_shards(tmp_path / "dir"), expected, seed, "--format parquet")
    capsys.readouterr()
    assert main(argv) == 0
    assert "0 shard(s) written, 4 already done" in " ".join(capsys.readouterr().out.split())

    assert main([*common, "--out", str(tmp_path / "y.npy"), "--format", "parquet"]) == 2
    assert "is a .npy file but --format is parquet" in capsys.readouterr().err
