"""The soak's 200-configuration sample (``make soak`` runs 10**4), and the soak itself.

Every backend must equal the golden models bit for bit, and may refuse a layer only where it
is beyond the backend's limits (worked out here from the layer: the CPU provider refuses
nothing); the golden models must stay within 1 LSB of onnxruntime's unoptimized QDQ graph.
The sample's seed is the session seed (``TESSERA_SEED``); a failure names the seed, the
configuration and the one-line command that reproduces it.
"""

import json
from dataclasses import fields

import numpy as np
import pytest
from conftest import SESSION_SEED

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import K_MAX_WRAP_FREE
from models.pool import WINDOW_MAX
from sw_driver import graph as g
from sw_driver.importer import import_model
from sw_driver.providers.device import DeviceProvider
from tessera import results
from tessera.cli import main
from tessera.soak import KINDS, draw_case, open_backends, repro_command, run_case
from tessera.soak.backends import BACKENDS
from tessera.soak.onnx_reference import check_model, qdq_model
from tessera.soak.tally import Tally

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


def _opencl_limit(case):
    """What makes the OpenCL kernels refuse ``case``'s layer, or None: they run every int8
    kind, up to the int32 sums' and the pool window's limits."""
    layer = case.layer
    if isinstance(layer, (g.Conv, g.Dense)):
        k = int(np.prod(layer.weight.shape[1:]))
        return f"{k} products per output" if k > K_MAX_WRAP_FREE else None
    if isinstance(layer, (g.MaxPool, g.AveragePool)):
        (kh, kw), (top, left, bottom, right) = layer.kernel, layer.padding
        if kh * kw > WINDOW_MAX or max(top, bottom) >= kh or max(left, right) >= kw:
            return f"window {layer.kernel}, padding {layer.padding}"
    return None


def _device_limit(case, provider):
    """What makes the accelerator (``provider``: sim or pcie) refuse ``case``'s layer, or
    None where it must run it: worked out from the layer, not by asking the provider."""
    layer, config = case.layer, provider.config
    x_shape = case.inputs[0].shape
    if isinstance(layer, g.MaxPool):
        window = (tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding))
        if window != ((2, 2), (2, 2), (0, 0, 0, 0)):
            return f"max pool window {window}"
        width = provider.accelerator.pool_max_width
        return None if 2 <= x_shape[3] <= width and x_shape[2] >= 2 else f"input {x_shape}"
    if isinstance(layer, (g.Add, g.Dense)):
        return None
    if not isinstance(layer, g.Conv):
        return f"no {layer.op} on the device"
    (kh, kw), (top, left, bottom, right) = layer.weight.shape[2:], layer.padding
    c_in, c_out = x_shape[1], layer.weight.shape[0]
    if tuple(layer.dilation) != (1, 1):
        return f"dilation {layer.dilation}"
    if layer.stride[0] != layer.stride[1] or layer.stride[0] not in (1, 2):
        return f"stride {layer.stride}"
    if max(top, bottom) > kh // 2 or max(left, right) > kw // 2 or max(kh, kw) > 7:
        return f"kernel {kh}x{kw}, padding {layer.padding}"
    if layer.groups != 1 and not layer.groups == c_in == c_out:
        return f"groups {layer.groups}"
    if int(np.prod(x_shape[1:])) > config.act_depth:
        return f"input {x_shape} larger than the activation buffer ({config.act_depth})"
    if layer.weight.size > config.weight_depth:
        return f"weights {layer.weight.shape} larger than {config.weight_depth}"
    return None


def _illegitimate_refusal(backend, case, outcome):
    """Why ``backend`` had no business refusing ``case``, or None."""
    if outcome.status != "refused":
        return None
    if backend.name == "cpu":
        return "the CPU provider, the executable specification, runs every layer"
    if backend.name in ("opencl", "gpu"):
        limit = _opencl_limit(case)
    elif isinstance(backend.provider, DeviceProvider):
        limit = _device_limit(case, backend.provider)
    else:  # a plugin: its limits are its own
        limit = outcome.detail
    return None if limit else f"{backend.name} refused a layer within its limits"


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_sample_equals_golden_and_onnxruntime(chunk, seed, backends):
    per_chunk = SAMPLE // CHUNKS
    print(f"soak sample: seed {seed}, cases {chunk * per_chunk}..{(chunk + 1) * per_chunk - 1}")
    ran = {backend.name: 0 for backend in backends if backend.available}
    for index in range(chunk * per_chunk, (chunk + 1) * per_chunk):
        result = run_case(draw_case(seed, index), backends)
        assert not result.golden_error, _failure(seed, result, result.golden_error)
        for backend in backends:
            if not backend.available:
                continue
            outcome = result.backends[backend.name]
            assert outcome.status in ("pass", "refused"), _failure(
                seed, result, f"{backend.name} {outcome.status}: {outcome.detail}")
            wrong = _illegitimate_refusal(backend, result.case, outcome)
            assert wrong is None, _failure(seed, result, f"{wrong}: {outcome.detail}")
            ran[backend.name] += outcome.status == "pass"
        ort = result.onnxruntime
        assert not ort.error, _failure(seed, result, f"onnxruntime: {ort.error}")
        assert ort.max_abs_diff <= 1, _failure(seed, result, f"onnxruntime: {ort.detail}")
    print(f"cases run (not refused) per backend: {ran}")
    assert all(ran.values()), (f"soak seed {seed}, cases {chunk * per_chunk}.."
                               f"{(chunk + 1) * per_chunk - 1}: a backend ran none: {ran}")


def test_opencl_is_in_the_sample(seed, backends):
    (opencl,) = [b for b in backends if b.name == "opencl"]
    if not opencl.available:
        pytest.skip(f"the sample ran without OpenCL: {opencl.unavailable}")
    # The first case of each kind in this session's sample that the kernels support runs
    # on OpenCL and equals the golden model.
    firsts = {}
    for index in range(SAMPLE):
        case = draw_case(seed, index)
        if _opencl_limit(case) is None:
            firsts.setdefault(case.kind, case)
    assert set(firsts) == set(KINDS), f"soak seed {seed}: no {set(KINDS) - set(firsts)}"
    for case in firsts.values():
        result = run_case(case, [opencl], use_onnxruntime=False)
        outcome = result.backends.get("opencl")
        assert outcome is not None and outcome.status == "pass", _failure(
            seed, result, f"opencl: {outcome}")


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
        from tessera.soak.golden import golden_output

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
        from tessera.soak.golden import golden_output

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
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["soak", "--seed", "3", "--count", "12", "--backends", "cpu"]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    document = json.loads((tmp_path / "soak.json").read_text())
    metrics = {m["name"]: m["value"] for m in document["metrics"]}
    assert metrics["soak_mismatches"] == 0 and metrics["soak_configs"] == 12
    assert sum(kind["configs"] for kind in document["kinds"].values()) == 12
    assert document["backends"]["cpu"]["pass"] == 12
