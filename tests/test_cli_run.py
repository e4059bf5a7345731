"""`tessera run`, `tessera quantize` and `tessera zoo`: exit codes, tables, one-line errors."""

import numpy as np
import pytest

from models.zoo import DIGITS_FLOAT, DIGITS_QDQ
from tessera.cli import main


def _one_line_error(capsys):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_run_digits_prints_table_and_accuracy(capsys):
    assert main(["run", str(DIGITS_QDQ), "--dataset", "digits", "--providers", "cpu",
                 "--batch", "100"]) == 0
    out = capsys.readouterr().out
    assert "per-layer profile" in out and "conv1" in out and "gap" in out
    assert "450 samples in 5 batch(es)" in out
    assert "accuracy on digits" in out and "97." in out


def test_run_profile_and_output(tmp_path, capsys):
    x = np.random.default_rng(0).random((1, 8, 8), dtype=np.float32)  # one sample, no N
    out_path = tmp_path / "y.npy"
    assert main(["run", str(DIGITS_QDQ), "--input", str(tmp_path / "x.npy"), "--profile"]
                ) != 0  # not written yet
    _one_line_error(capsys)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(DIGITS_QDQ), "--input", str(tmp_path / "x.npy"), "--profile",
                 "-o", str(out_path)]) == 0
    assert "ms/batch" in capsys.readouterr().out
    assert np.load(out_path).shape == (1, 10)


@pytest.mark.parametrize("case", ["missing model", "not onnx", "float model", "wrong shape",
                                  "not npy", "unknown provider", "bad batch"])
def test_run_bad_input_is_one_line(case, tmp_path, capsys):
    model, extra = str(DIGITS_QDQ), []
    if case == "missing model":
        model = str(tmp_path / "nope.onnx")
    elif case == "not onnx":
        model = tmp_path / "junk.onnx"
        model.write_text("hello [world]")
        model = str(model)
    elif case == "float model":
        model = str(DIGITS_FLOAT)
    elif case == "wrong shape":
        np.save(tmp_path / "x.npy", np.zeros((2, 1, 7, 8), np.float32))
        extra = ["--input", str(tmp_path / "x.npy")]
    elif case == "not npy":
        (tmp_path / "x.npy").write_text("text")
        extra = ["--input", str(tmp_path / "x.npy")]
    elif case == "unknown provider":
        extra = ["--providers", "tpu"]
    else:
        extra = ["--batch", "0"]
    assert main(["run", model, *extra]) != 0
    line = _one_line_error(capsys)
    expected = {"missing model": "cannot read model file", "not onnx": "not an ONNX model",
                "float model": "tessera quantize", "wrong shape": "[2, 1, 7, 8]",
                "not npy": "not a .npy", "unknown provider": "unknown provider 'tpu'",
                "bad batch": "--batch"}[case]
    assert expected in line


def test_quantize_then_run(tmp_path, capsys):
    out = tmp_path / "digits_q.onnx"
    assert main(["quantize", str(DIGITS_FLOAT), "--calibration", "digits", "--method",
                 "percentile", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Tessera int8" in text and out.exists()
    assert main(["run", str(out), "--dataset", "digits"]) == 0
    assert "accuracy on digits" in capsys.readouterr().out


def test_quantize_bad_calibration_is_one_line(tmp_path, capsys):
    np.save(tmp_path / "c.npy", np.zeros((3, 2, 8, 8), np.float32))
    assert main(["quantize", str(DIGITS_FLOAT), "--calibration", str(tmp_path / "c.npy"),
                 "-o", str(tmp_path / "q.onnx")]) != 0
    assert "[3, 2, 8, 8]" in _one_line_error(capsys)
    assert main(["quantize", str(DIGITS_FLOAT), "--calibration", str(tmp_path / "none.npy"),
                 "-o", str(tmp_path / "q.onnx")]) != 0
    assert "cannot read calibration data" in _one_line_error(capsys)


def test_zoo_writes_random_models_and_run_uses_them(tmp_path, capsys):
    assert main(["zoo", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "dwsep_qdq.onnx").exists() and (tmp_path / "resnet8_float.onnx").exists()
    assert main(["run", str(tmp_path / "dwsep_qdq.onnx"), "--samples", "32"]) == 0
    assert "32 samples" in capsys.readouterr().out


def test_an_error_with_brackets_is_printed_whole(monkeypatch, capsys):
    """Usage errors print as plain text: rich markup would silently drop "[tenants.a]"."""
    from tessera.commands import run

    def fails(args):
        raise ValueError("config.toml: [tenants.a] has no key 'token'; expected [1, 2]")

    monkeypatch.setattr(run, "cmd_zoo", fails)
    assert main(["zoo"]) == 2
    out = capsys.readouterr().out
    assert "error: config.toml: [tenants.a] has no key 'token'; expected [1, 2]" in out
