"""Resumable sharded output of ``tessera run-dataset`` (docs/scale-out.md), without Ray.

The same code writes the shards on Ray (tests/test_ray_cluster.py); here one local session
makes the interruption land at a known batch, so which shards survive is exact.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tessera.batch import MANIFEST, Fault, load_shards, run_to_shards
from tessera.cli import main

DIGITS = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"
NAMES = [f"part-{n:05d}.npy" for n in range(5)]


@pytest.fixture(scope="module")
def model():
    return DIGITS.read_bytes()


@pytest.fixture
def x(seed):
    print(f"shards: seed {seed}, 100 random digits-shaped samples, shards of 20")
    return np.random.default_rng(seed).uniform(0, 16, (100, 1, 8, 8)).astype(np.float32)


@pytest.fixture
def whole(model, x, tmp_path):
    """An uninterrupted run's directory."""
    report = run_to_shards(model, x, ["cpu"], tmp_path / "whole", shard_size=20,
                           batch_size=10)
    assert report.written == NAMES and not report.skipped
    return tmp_path / "whole"


def _same_files(a, b, names=NAMES):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_an_interrupted_run_resumes_where_it_stopped(model, x, whole, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected fault after 5 batches"):
        run_to_shards(model, x, ["cpu"], out, shard_size=20, batch_size=10,
                      fault=Fault("raise", after=5, once=str(tmp_path / "fired")))
    # batches 0-4 ran: shards 0 and 1 are complete, shard 2 (batches 4-5) is not
    assert sorted(json.loads((out / MANIFEST).read_text())["shards"]) == NAMES[:2]
    assert not (out / NAMES[2]).exists()
    report = run_to_shards(model, x, ["cpu"], out, shard_size=20, batch_size=10)
    assert report.skipped == NAMES[:2] and report.written == NAMES[2:]
    _same_files(out, whole)
    assert np.array_equal(load_shards(out), load_shards(whole))
    again = run_to_shards(model, x, ["cpu"], out, shard_size=20, batch_size=10)
    assert again.skipped == NAMES and not again.written


def test_only_shards_whose_input_or_output_changed_are_redone(model, x, whole):
    x = x.copy()
    x[65, 0, 3, 3] += 1  # a sample of shard 3
    (whole / NAMES[1]).write_bytes(b"damaged")
    report = run_to_shards(model, x, ["cpu"], whole, shard_size=20, batch_size=10)
    assert report.written == [NAMES[1], NAMES[3]]
    assert report.skipped == [NAMES[0], NAMES[2], NAMES[4]]


def test_another_model_or_shard_size_redoes_everything(model, x, whole):
    import onnx

    other = onnx.load_from_string(model)
    other.doc_string = "another model: the same graph, other bytes"
    report = run_to_shards(other.SerializeToString(), x, ["cpu"], whole, shard_size=20)
    assert report.written == NAMES and not report.skipped
    report = run_to_shards(model, x, ["cpu"], whole, shard_size=25)
    assert report.written == NAMES[:4] and not report.skipped


def test_load_shards_names_a_damaged_or_missing_shard(whole):
    (whole / NAMES[4]).unlink()
    with pytest.raises(ValueError, match=f"{NAMES[4]}: missing, though the manifest lists"):
        load_shards(whole)
    (whole / NAMES[2]).write_bytes(b"damaged")
    with pytest.raises(ValueError, match=f"{NAMES[2]}: its contents differ"):
        load_shards(whole)
    manifest = json.loads((whole / MANIFEST).read_text())
    del manifest["shards"][NAMES[1]]
    (whole / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"{NAMES[2]}: starts at sample 40, expected 20"):
        load_shards(whole)


def test_a_foreign_manifest_is_named(model, x, tmp_path):
    (tmp_path / MANIFEST).write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{MANIFEST}: not a run-dataset manifest"):
        run_to_shards(model, x, ["cpu"], tmp_path, shard_size=20)


def _out(capsys):
    return " ".join(capsys.readouterr().out.split())  # the console wraps long lines


def test_the_cli_resumes_a_directory_out(x, whole, tmp_path, capsys):
    np.save(tmp_path / "x.npy", x)
    argv = ["run-dataset", str(DIGITS), "--input", str(tmp_path / "x.npy"), "--out",
            str(tmp_path / "cli"), "--shard-size", "20", "--batch", "10"]
    assert main(argv) == 0
    assert "5 shard(s) written, 0 already done" in _out(capsys)
    _same_files(tmp_path / "cli", whole)
    assert main(argv) == 0
    assert "0 shard(s) written, 5 already done" in _out(capsys)
    assert main([*argv[:-4], "--shard-size", "0"]) == 2
    assert "--shard-size must be a positive integer, not 0" in capsys.readouterr().err
