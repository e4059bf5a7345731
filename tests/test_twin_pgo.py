"""The profile-guided twin build (``twin.dma.build_twin(..., train=...)``): what goes into
its cache key, how a failed training falls back to the plain build, and that the training
run refuses a wrong result. Its bit-exactness is tested by tests/test_twin.py, which runs
every layer and fault test on both builds."""

import sys

import numpy as np
import pytest

from bench import twin_train
from contract.config import ArrayConfig, ConvEngineConfig
from twin import dma

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=1024,
                          weight_depth=1024, max_col_tiles=16)


def test_flags_are_in_the_cache_key():
    plain = dma.source_key(CONFIG, dma.FLAGS, dma.TWIN_SOURCES)
    guided = dma.source_key(CONFIG, [*dma.FLAGS, *dma.PGO_USE, "bench.twin_train"],
                             dma.TWIN_SOURCES)
    other_trainer = dma.source_key(CONFIG, [*dma.FLAGS, *dma.PGO_USE, "x.train"],
                                    dma.TWIN_SOURCES)
    assert len({plain, guided, other_trainer}) == 3


def test_with_output_renames_only_the_library():
    flags = dma.with_output(dma.FLAGS, "libtwin-train.so")
    assert flags[flags.index("-o") + 1] == "libtwin-train.so"
    assert len(flags) == len(dma.FLAGS)
    assert dma.FLAGS[dma.FLAGS.index("-o") + 1] == "libtwin.so"


def test_unknown_training_module_falls_back_to_the_plain_build(tmp_path, monkeypatch):
    plain = tmp_path / "plain" / "obj" / "libtwin.so"
    calls = []

    def fake_verilate(folder, make_top, *, flags, **options):
        calls.append(flags)
        return plain

    monkeypatch.setattr(dma, "verilate", fake_verilate)
    lines = []
    got = dma.build_twin(CONFIG, train="no_such_package.train", build_root=tmp_path,
                          log=lines.append)
    assert got == plain
    assert calls == [dma.FLAGS]  # nothing instrumented was built
    assert any("no training module 'no_such_package.train'" in line for line in lines)


def test_failing_training_falls_back_and_quotes_the_trainer(tmp_path, monkeypatch):
    """A training run that exits non-zero (a wrong result) leaves no profile-guided library;
    the plain one is used and the log quotes the trainer's last words."""
    (tmp_path / "bad_trainer.py").write_text(
        "import sys\nprint('layer (3, 1) differs from the golden model')\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    plain = tmp_path / "plain" / "obj" / "libtwin.so"
    instrumented_builds = []

    def fake_verilate(folder, make_top, *, flags, **options):
        if "-fprofile-generate" in flags:
            instrumented_builds.append(folder)
            library = folder / "obj" / dma.TRAINING_LIBRARY
            library.parent.mkdir(parents=True)
            library.write_bytes(b"")
            return library
        assert "-fprofile-use" not in flags, "built with a profile although training failed"
        return plain

    monkeypatch.setattr(dma, "verilate", fake_verilate)
    lines = []
    got = dma.build_twin(CONFIG, train="bad_trainer", build_root=tmp_path / "build",
                          log=lines.append)
    assert got == plain
    message = "\n".join(lines)
    assert "the training run bad_trainer failed (exit 3)" in message
    assert "layer (3, 1) differs from the golden model" in message
    assert "using the plain build" in message
    # Remembered: the next call neither builds nor trains again, and says so.
    lines.clear()
    assert dma.build_twin(CONFIG, train="bad_trainer", build_root=tmp_path / "build",
                           log=lines.append) == plain
    assert len(instrumented_builds) == 1
    assert "an earlier attempt" in "\n".join(lines)


def test_training_refuses_a_wrong_result():
    class WrongAccelerator:
        def conv2d(self, x, w, *args, pool=False, **options):
            shape = (x.shape[0], w.shape[0], x.shape[2] // 2, x.shape[3] // 2) if pool \
                else (x.shape[0], w.shape[0], x.shape[2], x.shape[3])
            return np.zeros(shape, np.int8)

    with pytest.raises(SystemExit, match="differs from the golden model"):
        twin_train.run(WrongAccelerator(), twin_train.LAYERS[0])


def test_training_needs_its_arguments():
    with pytest.raises(SystemExit, match="usage"):
        twin_train.main([sys.executable])
