"""Checks that used to pass whatever happened: each test here fails if its check goes blind
again (a comparison dropped without a skip, an all-skipped cocotb run counted as a pass, a
utilization above 1, a speedup of two different designs)."""

import pytest

from bench.ort_cpu import FORCE_ENV

# -- the fused onnxruntime comparison skips visibly where it is not exact -------------------

def test_fused_conv_and_gemm_comparison_is_a_visible_skip(monkeypatch, tmp_path):
    import test_models_onnxruntime as ort_tests

    monkeypatch.setenv(FORCE_ENV, "0")  # as on a CPU without VNNI
    with pytest.raises(pytest.skip.Exception, match=f"QGemm is not exact.*{FORCE_ENV}=0"):
        ort_tests.test_gemm_matches_onnxruntime(21, 3, 16, 5, "fused", tmp_path)
    # The unfused comparison is a test of its own and still runs.
    ort_tests.test_gemm_matches_onnxruntime(21, 3, 16, 5, "unfused", tmp_path)


def test_importer_fused_comparison_is_a_visible_skip(monkeypatch):
    import test_importer

    monkeypatch.setenv(FORCE_ENV, "0")
    with pytest.raises(pytest.skip.Exception, match=f"not exact on this CPU.*{FORCE_ENV}=0"):
        test_importer._agree(b"", (1, 8, 8), 0, "no model needed", optimized=True)


# -- a cocotb run that skipped every test is not a pass -------------------------------------

RESULTS_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="results">
  <testsuite name="all" package="all">
    <testcase name="{first}" classname="sim.tb_x" file="sim/tb_x.py" lineno="10">{first_tag}
      <property name="sim_time_duration" value="1500.0"/>
    </testcase>
    <testcase name="test_throughput" classname="sim.tb_x" file="sim/tb_x.py" lineno="40">
      <skipped/>
    </testcase>
  </testsuite>
</testsuites>
"""


def _outcomes(tmp_path, first_tag):
    from twin.outcomes import read_outcomes

    path = tmp_path / "results.xml"
    path.write_text(RESULTS_XML.format(first="test_layers", first_tag=first_tag))
    return read_outcomes(path)


def test_a_run_with_every_test_skipped_fails(tmp_path):
    from twin.runner import TestbenchFailed, check_outcomes

    outcomes = _outcomes(tmp_path, "<skipped/>")
    assert [o.result for o in outcomes] == ["SKIP", "SKIP"]
    with pytest.raises(TestbenchFailed, match=r"all 2 cocotb tests were skipped in sim.tb_x on "
                                              r"r2c2 \(seed 7\), so nothing was checked: "
                                              r"test_layers, test_throughput") as info:
        check_outcomes(outcomes, "sim.tb_x on r2c2 (seed 7)", tmp_path / "sim.log")
    assert str(info.value).endswith(f"log: {tmp_path / 'sim.log'}")
    check_outcomes(outcomes, "sim.tb_x", allow_all_skipped=True)  # the caller's choice


def test_a_run_with_one_test_passed_and_one_skipped_passes(tmp_path):
    from twin.runner import check_outcomes

    outcomes = _outcomes(tmp_path, "")
    assert [o.result for o in outcomes] == ["PASS", "SKIP"]
    check_outcomes(outcomes, "sim.tb_x")


def test_a_failed_test_fails_the_run_even_when_skips_are_allowed(tmp_path):
    from twin.runner import TestbenchFailed, check_outcomes

    outcomes = _outcomes(tmp_path, '<failure message="beat 3 differs" type="AssertionError"/>')
    with pytest.raises(TestbenchFailed, match="1 of 2 cocotb tests failed") as info:
        check_outcomes(outcomes, "sim.tb_x", allow_all_skipped=True)
    assert info.value.failures == ["test_layers: AssertionError: beat 3 differs"]


# -- the soak sample fails a refusal the backend had no reason for -------------------------

class _Backend:
    """A soak backend as test_soak's checks see it: a name and a provider."""

    available = True

    def __init__(self, name, provider=None):
        self.name, self.provider = name, provider


def _first(kind, predicate=lambda case: True):
    from tessera.soak import draw_case

    return next(case for case in (draw_case(1, i) for i in range(400))
                if case.kind == kind and predicate(case))


def test_the_soak_sample_rejects_refusals_within_the_limits():
    from test_soak import SIM_CONFIG, _illegitimate_refusal

    from sw_driver.providers.device import DeviceProvider
    from tessera.soak.runner import BackendOutcome

    refused = BackendOutcome("refused", "not today")
    device = object.__new__(DeviceProvider)  # its limits only: no twin is opened
    device.config = SIM_CONFIG
    device.accelerator = type("Registers", (), {"pool_max_width": 64})()
    sim, cpu, opencl = _Backend("sim", device), _Backend("cpu"), _Backend("opencl")

    dense, add = _first("Dense"), _first("Add")
    small_conv = _first("Conv", lambda c: c.layer.stride in ((1, 1), (2, 2))
                        and c.layer.dilation == (1, 1) and c.inputs[0].size <= 512
                        and max(c.layer.padding) <= min(c.layer.weight.shape[2:]) // 2)
    for case in (dense, add, small_conv):
        for backend in (cpu, opencl, sim):
            assert _illegitimate_refusal(backend, case, refused), (backend.name, case.kind)
            assert _illegitimate_refusal(backend, case, BackendOutcome("pass")) is None
    # Refusals the device is entitled to: a kind it lacks, a window its pool lacks.
    assert _illegitimate_refusal(sim, _first("AveragePool"), refused) is None
    odd_pool = _first("MaxPool", lambda c: tuple(c.layer.kernel) != (2, 2))
    assert _illegitimate_refusal(sim, odd_pool, refused) is None
    assert _illegitimate_refusal(cpu, odd_pool, refused)


# -- bench_conv's utilization cannot exceed 1 -----------------------------------------------

# resnet8.s1 (3x3, 16 -> 16 channels at 32x32) on the 8x8 twin: 36 864 ideal cycles; the
# activations stream in while the array computes, so only the last 31 986 busy cycles come
# after the last input word (PERF_COMPUTE). Over those alone the "utilization" was 1.153.
S1_MACS = 16 * 16 * 9 * 32 * 32
S1_COUNTERS = dict(cycles=38_300, busy=38_144, macs=S1_MACS, stalls=0, compute=31_986)


def test_bench_conv_utilization_is_a_fraction_of_the_pass():
    from bench.bench_conv import layer_figures, layer_metrics, utilization_target
    from sw_driver.accelerator import Counters

    figures = layer_figures(S1_MACS, Counters(**S1_COUNTERS), 64)
    assert figures["ideal"] == 36_864
    assert figures["utilization"] == pytest.approx(36_864 / 38_144)  # 0.966, not 1.153
    assert figures["issue_rate"] * figures["useful_share"] == \
        pytest.approx(figures["utilization"])
    assert (figures["input_cycles"], figures["drain_cycles"]) == (6_158, 31_986)
    metrics = layer_metrics("s1", figures, utilization_target(16, 16, 32, 3, 1, False))
    fractions = {m["name"]: m["value"] for m in metrics if m["unit"] == "fraction"}
    assert fractions and all(0 <= value <= 1 for value in fractions.values()), fractions
    (targeted,) = [m for m in metrics if "target" in m]
    assert targeted["name"] == "s1 utilization" and targeted["target"] == 0.85


@pytest.mark.parametrize("change, named", [
    (dict(busy=30_000), "MACs issued in 30000 busy cycles, more than 64 a cycle"),
    (dict(macs=S1_MACS - 64), f"{S1_MACS - 64} MACs issued for a layer of {S1_MACS}"),
    (dict(compute=40_000), "PERF_COMPUTE 40000 outside 0..PERF_BUSY 38144"),
])
def test_bench_conv_refuses_impossible_counters(change, named):
    from bench.bench_conv import layer_figures
    from sw_driver.accelerator import Counters

    with pytest.raises(ValueError, match="impossible counters") as info:
        layer_figures(S1_MACS, Counters(**{**S1_COUNTERS, **change}), 64)
    assert named in str(info.value)


# -- the twin's speedup over cocotb compares one netlist, in cycles per second --------------

def test_twin_speedup_is_cycles_per_second_of_one_netlist():
    from bench.bench_twin import speedup

    netlist = "1c42b2c2" * 8
    # Different cycle counts for the same layer: wall time per layer (1.91 / 0.049 = 39.0)
    # would credit the twin with the cycles cocotb did not run.
    twin = {"cycles": 55_718, "seconds": 0.049, "netlist": netlist}
    cocotb = {"cycles": 48_466, "seconds": 1.91, "netlist": netlist}
    assert speedup(twin, cocotb) == pytest.approx((55_718 / 0.049) / (48_466 / 1.91))
    assert speedup(twin, cocotb) == pytest.approx(44.81, abs=0.01)


def test_twin_speedup_refuses_two_designs():
    from bench.bench_twin import speedup

    twin = {"cycles": 55_718, "seconds": 0.049, "netlist": "a" * 64}
    engine_alone = {"cycles": 48_466, "seconds": 1.91, "netlist": "b" * 64}
    with pytest.raises(ValueError, match="a speedup compares one netlist"):
        speedup(twin, engine_alone)
    with pytest.raises(ValueError, match="the cocotb run has 0 cycles"):
        speedup(twin, {**twin, "cycles": 0})


def test_the_cocotb_build_is_the_twins_netlist(tmp_path, monkeypatch):
    """The cocotb side's build description writes its Verilog with the twin's own
    flattening step, of the twin's own top (checked without running Yosys)."""
    import twin.dma
    from contract.config import ArrayConfig, ConvEngineConfig
    from twin.netlist import TwinNetlist
    from twin.runner import _write_verilog
    from twin.top import TwinTop

    calls = []

    def fake_flatten(folder, make_top, *, what):
        calls.append((folder, make_top()))
        return folder / "tessera_top.v"

    monkeypatch.setattr(twin.netlist, "flatten_netlist", fake_flatten)
    build = TwinNetlist(ConvEngineConfig(array=ArrayConfig(rows=2, cols=2)))
    assert _write_verilog(build, tmp_path) == tmp_path / build.name / "tessera_top.v"
    ((folder, top),) = calls
    assert folder == tmp_path / build.name and isinstance(top, TwinTop)
    assert build.top_name == twin.dma.TOP_NAME
