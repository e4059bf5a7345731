"""The soak's 200-configuration sample (``make soak`` runs 10**4), and the soak itself.

Every backend must equal the golden models bit for bit (a refusal is allowed, and counted
apart); the golden models must stay within 1 LSB of onnxruntime's unoptimized QDQ graph.
The sample's seed is the session seed (``TESSERA_SEED``); a failure names the seed, the
configuration and the one-line command that reproduces it.
"""

import json
from dataclasses import fields

import numpy as np
import pytest
from conftest import SESSION_SEED

from bench import common
from bench.soak import KINDS, draw_case, open_backends, repro_command, run_case
from bench.soak.backends import BACKENDS
from bench.soak.onnx_reference import check_model, qdq_model
from bench.soak.tally import Tally
from contract.config import ArrayConfig, ConvEngineConfig
from sw_driver.importer import import_model
from tessera.cli import main

SAMPLE = 200
CHUNKS = 4  # the sample in four tests, so that pytest-xdist can spread it
#: The engine of tests/test_providers_sim.py, so `make test` builds one twin for both.
SIM_CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                              weight_depth=2048, max_col_tiles=8)


@pytest.fixture(scope="module")
def backends():
    opened = open_backends(BACKENDS, log=lambda message: None, sim_config=SIM_CONFIG)
    yield opened
    for backend in opened:
        backend.close()


def _failure(seed, result, what):
    case = result.case
    return (f"soak seed {seed}, case {case.index} ({case.description}): {what}\n"
            f"repro on the 8x8 twin: {repro_command(seed, case.index)}\n"
            f"repro on this test's 4x4 twin: TESSERA_SEED={SESSION_SEED} .venv/bin/python -m "
            f"pytest tests/test_soak.py -k test_sample -p no:cacheprovider")


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_sample_equals_golden_and_onnxruntime(chunk, seed, backends):
    per_chunk = SAMPLE // CHUNKS
    print(f"soak sample: seed {seed}, cases {chunk * per_chunk}..{(chunk + 1) * per_chunk - 1}")
    for index in range(chunk * per_chunk, (chunk + 1) * per_chunk):
        result = run_case(draw_case(seed, index), backends)
        assert not result.golden_error, _failure(seed, result, result.golden_error)
        for name, outcome in result.backends.items():
            assert outcome.status in ("pass", "refused"), _failure(
                seed, result, f"{name} {outcome.status}: {outcome.detail}")
        ort = result.onnxruntime
        assert not ort.error, _failure(seed, result, f"onnxruntime: {ort.error}")
        assert ort.max_abs_diff <= 1, _failure(seed, result, f"onnxruntime: {ort.detail}")


def test_opencl_is_in_the_sample(backends):
    (opencl,) = [b for b in backends if b.name == "opencl"]
    if not opencl.available:
        pytest.skip(f"the sample ran without OpenCL: {opencl.unavailable}")


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b))
    return type(a) is type(b) and a == b


def test_layers_are_what_the_importer_makes_of_their_onnx_model(seed):
    for index in range(60):
        case = draw_case(seed, index)
        check_model(case)
        imported = import_model(qdq_model(case, float_io=True))
        (layer,) = [layer for layer in imported.layers if layer.name == case.layer.name]
        assert type(layer) is type(case.layer)
        for field in fields(layer):
            if field.name not in ("inputs", "output"):
                assert _same(getattr(layer, field.name), getattr(case.layer, field.name)), (
                    f"soak seed {seed}, case {index} ({case.description}): field "
                    f"{field.name}: importer {getattr(layer, field.name)!r}, soak "
                    f"{getattr(case.layer, field.name)!r}")


def test_a_case_depends_only_on_seed_and_index(seed):
    later = draw_case(seed, 37)
    for index in range(5):
        draw_case(seed, index)
    again = draw_case(seed, 37)
    assert again.description == later.description
    for a, b in zip(again.inputs, later.inputs, strict=True):
        assert np.array_equal(a, b)
    for field in fields(later.layer):
        assert _same(getattr(again.layer, field.name), getattr(later.layer, field.name))


def test_the_draws_reach_the_corners():
    cases = [draw_case(1, index) for index in range(1500)]
    assert {case.kind for case in cases} == set(KINDS)
    convs = [case.layer for case in cases if case.layer.op == "Conv"]
    assert {k for layer in convs for k in layer.weight.shape[2:]} == set(range(1, 8))
    assert {s for layer in convs for s in layer.stride} == {1, 2}
    assert any(layer.dilation != (1, 1) for layer in convs)
    assert any(layer.padding[0] != layer.padding[2] for layer in convs)
    assert any(layer.groups == layer.weight.shape[0] > 1 for layer in convs)  # depthwise
    assert any(1 < layer.groups < layer.weight.shape[0] for layer in convs)  # grouped
    assert any(layer.weight.shape[0] % 8 for layer in convs)
    assert {-128, 127} <= {case.quant.x[1] for case in cases}
    assert {-128, 127} <= {case.quant.y[1] for case in cases}
    pools = [case.layer for case in cases if case.layer.op == "AveragePool"]
    assert {layer.count_include_pad for layer in pools} == {False, True}
    assert {(2, 2), (3, 3)} <= {layer.kernel for layer in pools}
    adds = [case.layer for case in cases if case.layer.op == "Add"]
    assert any(layer.constant is not None for layer in adds)
    assert any(layer.a_scale != layer.b_scale for layer in adds)
    clamps = {(case.layer.lo, case.layer.hi) != (-128, 127)
              for case in cases if case.layer.op in ("Conv", "Dense", "Add")}
    assert clamps == {False, True}


class _WrongBackend:
    """A backend that adds 1 to the golden output of its first element."""

    name, available, unavailable, label = "wrong", True, None, "a broken backend"

    def refusal(self, case):
        return "no Add here" if case.layer.op == "Add" else None

    def run(self, case):
        from bench.soak.golden import golden_output

        y = golden_output(case).copy()
        y.reshape(-1)[0] ^= 1
        return y

    def reopen(self):
        pass


def test_a_mismatch_is_counted_with_its_repro_command():
    backend = _WrongBackend()
    tally = Tally(7, [backend])
    case = next(c for c in (draw_case(7, i) for i in range(50)) if c.layer.op != "Add")
    (failure,) = tally.add(run_case(case, [backend], use_onnxruntime=False))
    assert failure["repro"] == f".venv/bin/tessera soak --seed 7 --only {case.index} " \
                               f"--backends wrong"
    assert "1 of" in failure["detail"] and "first at (0," in failure["detail"]
    refused = next(c for c in (draw_case(7, i) for i in range(200)) if c.layer.op == "Add")
    assert tally.add(run_case(refused, [backend], use_onnxruntime=False)) == []
    assert tally.mismatches == 1
    assert tally.backend_totals("wrong")["refused"] == 1


class _TiesUpBackend:
    """The golden models with the rounding rule Tessera had before round-half-to-even."""

    name, available, unavailable, label = "ties-up", True, None, "old rounding"

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch

    @staticmethod
    def _ties_up(value, multiplier, shift):
        return (value * multiplier + np.left_shift(np.int64(1), shift - 1)) >> shift

    def refusal(self, case):
        return None

    def run(self, case):
        import models.eltwise
        import models.pool
        import models.requant
        from bench.soak.golden import golden_output

        with self.monkeypatch.context() as patch:
            for module in (models.requant, models.pool, models.eltwise):
                patch.setattr(module, "rounding_shift", self._ties_up)
            return golden_output(case)

    def reopen(self):
        pass


def test_the_soak_tells_ties_rounded_up_from_ties_to_even(monkeypatch):
    backend = _TiesUpBackend(monkeypatch)
    tally = Tally(1, [backend])
    for index in range(600):
        tally.add(run_case(draw_case(1, index), [backend], use_onnxruntime=False))
    failed = {failure["kind"] for failure in tally.failures}
    assert "AveragePool" in failed  # ties of the mean
    assert failed & {"Conv", "DepthwiseConv", "GroupedConv"}  # power-of-two multipliers


@pytest.mark.parametrize("argv, named", [
    (["--count", "0"], "--count must be a positive integer, not 0"),
    (["--count", "-5"], "--count must be a positive integer, not -5"),
    (["--seed", "-1"], "--seed must be a non-negative integer, not -1"),
    (["--only", "12-3"], "--only must be"),
    (["--only", "x"], "--only must be"),
    (["--backends", "cpu,tpu"], "--backends must be"),
])
def test_bad_arguments_are_named(argv, named, capsys):
    assert main(["soak", *argv]) == 2
    assert named in capsys.readouterr().err


def test_the_soak_writes_its_json(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert main(["soak", "--seed", "3", "--count", "12", "--backends", "cpu"]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    document = json.loads((tmp_path / "soak.json").read_text())
    metrics = {m["name"]: m["value"] for m in document["metrics"]}
    assert metrics["soak_mismatches"] == 0 and metrics["soak_configs"] == 12
    assert sum(kind["configs"] for kind in document["kinds"].values()) == 12
    assert document["backends"]["cpu"]["pass"] == 12
