"""Energy ESTIMATE: the energy twin's activity counts (per block, repeatable, proportional
to work), the energy model's arithmetic on fixed counts, calibration, and bad input.

The twin tests share one energy twin of a small configuration (built once per module,
about a minute the first time)."""

import copy
import json
import re

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.eltwise import add
from models.requant import requantize
from tessera.energy import model as energy_model
from tessera.energy.model import EnergyModelError
from twin.energy import BLOCKS, Instrumented, Memory, instrument_verilog, parse_coverage

#: The ULX3S-25F's default build (a 4x4 array), so the shared twin also serves
#: ``energy_of_model`` for that board.
BOARD = "ulx3s-25f"
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=4096,
                          weight_depth=1024, max_col_tiles=16)

# --- the model's arithmetic on fixed counts (no simulator) ---------------------------------

DEVICE = {"family": "ecp5", "core_voltage_v": 1.1, "register_toggle_pj": 0.5,
          "clock_pj_per_register_cycle": 0.02, "dsp_mac_pj": 2.0, "ebr_access_pj": 5.0,
          "static_w": 0.1, "ebr_modes": [[2048, 9], [1024, 18], [512, 36]]}
ACTIVITY = {"cycles": 1000, "macs": 64_000,
            "toggles": {"systolic_array": 100_000, "pool": 0, "csr_dma": 2_000},
            "register_bits": {"systolic_array": 2_000, "pool": 100, "csr_dma": 500},
            "memories": [{"name": "core.engine.act_buffer0", "block": "conv_engine",
                          "width": 8, "depth": 2048, "reads": 1000, "writes": 100},
                         {"name": "core.engine.param_table", "block": "conv_engine",
                          "width": 276, "depth": 8, "reads": 10, "writes": 0}]}


def test_estimate_arithmetic_on_fixed_counts():
    energy = energy_model.estimate(ACTIVITY, DEVICE, 100e6)
    array = energy["blocks"]["systolic_array"]
    assert array["fabric_j"] == pytest.approx(100_000 * 0.5e-12)
    assert array["dsp_j"] == pytest.approx(64_000 * 2e-12)
    assert array["clock_j"] == pytest.approx(2_000 * 1000 * 0.02e-12)
    assert energy["blocks"]["pool"]["fabric_j"] == 0
    # 276-bit words in 512x36 mode open ceil(276 / 36) = 8 primitives per access.
    assert energy["blocks"]["conv_engine"]["ebr_j"] == pytest.approx(
        (1100 * 1 + 10 * 8) * 5e-12)
    assert energy["seconds"] == pytest.approx(1e-5)
    assert energy["static_j"] == pytest.approx(0.1 * 1e-5)
    dynamic = (102_000 * 0.5 + 64_000 * 2 + 1180 * 5) * 1e-12
    clock = 2_600 * 1000 * 0.02e-12
    assert energy["dynamic_j"] == pytest.approx(dynamic)
    assert energy["total_j"] == pytest.approx(dynamic + clock + 1e-6)
    figures = energy_model.summary(energy, 2 * 64_000, inferences=2)
    assert figures["nj_per_inference"] == pytest.approx(energy["total_j"] * 1e9 / 2)
    assert figures["gops_per_w"] == pytest.approx(128_000 / energy["total_j"] / 1e9)
    assert figures["label"] == energy["label"] == "ESTIMATE"


@pytest.mark.parametrize("width, depth, opened", [
    (8, 2048, 1), (9, 2048, 1), (10, 2048, 2), (32, 512, 1), (36, 512, 1), (37, 100, 2),
    (8, 4096, 1),  # deeper than every mode: a cascade in depth opens one primitive
])
def test_ebr_primitives_per_access(width, depth, opened):
    assert energy_model.ebr_primitives(width, depth, DEVICE["ebr_modes"]) == opened


def test_calibrate_round_trip():
    idle, busy = energy_model.predicted_power(DEVICE, ACTIVITY, 100e6)
    assert busy > idle > DEVICE["static_w"]
    fitted = energy_model.calibrate(DEVICE, ACTIVITY, 100e6, idle_w=idle, busy_w=busy)
    for field in energy_model.NUMERIC_FIELDS:
        assert fitted[field] == pytest.approx(DEVICE[field]), field
    # A board drawing twice the modelled dynamic power doubles every dynamic coefficient
    # and keeps their ratios; a higher idle reading goes to static power.
    fitted = energy_model.calibrate(DEVICE, ACTIVITY, 100e6, idle_w=idle + 0.05,
                                    busy_w=idle + 0.05 + 2 * (busy - idle))
    for field in energy_model.DYNAMIC_FIELDS:
        assert fitted[field] == pytest.approx(2 * DEVICE[field]), field
    assert fitted["static_w"] == pytest.approx(DEVICE["static_w"] + 0.05)
    assert fitted["calibration"]["dynamic_scale"] == pytest.approx(2)
    assert energy_model.predicted_power(fitted, ACTIVITY, 100e6) == pytest.approx(
        (idle + 0.05, idle + 0.05 + 2 * (busy - idle)))
    assert DEVICE["static_w"] == 0.1  # the input is left alone


def _mix(toggles, macs, reads):
    activity = copy.deepcopy(ACTIVITY)
    activity.update(macs=macs, toggles={"systolic_array": toggles})
    activity["memories"] = [dict(ACTIVITY["memories"][0], reads=reads, writes=0)]
    return activity


def test_calibrate_many_separates_the_dynamic_coefficients():
    truth = dict(DEVICE, register_toggle_pj=0.8, dsp_mac_pj=1.5, ebr_access_pj=9.0)
    mixes = [_mix(100_000, 64_000, 1000), _mix(20_000, 64_000, 100),
             _mix(150_000, 0, 200), _mix(10_000, 1000, 3000)]
    idle = energy_model.predicted_power(truth, mixes[0], 100e6)[0]
    workloads = [(a, energy_model.predicted_power(truth, a, 100e6)[1]) for a in mixes]
    fitted = energy_model.calibrate_many(DEVICE, 100e6, idle_w=idle, workloads=workloads)
    for field in energy_model.NUMERIC_FIELDS:
        assert fitted[field] == pytest.approx(truth[field]), field
    assert fitted["calibration"]["rms_residual_w"] < 1e-9
    with pytest.raises(EnergyModelError, match="at least 3 workloads, got 2"):
        energy_model.calibrate_many(DEVICE, 100e6, idle_w=idle, workloads=workloads[:2])
    same = [(_mix(k * 1000, k * 640, k * 10), w)
            for k, (_, w) in zip((1, 2, 3), workloads[:3], strict=True)]
    with pytest.raises(EnergyModelError, match="do not separate the coefficients"):
        energy_model.calibrate_many(DEVICE, 100e6, idle_w=idle, workloads=same)
    # Readings that only a negative MAC energy explains are refused, not fitted.
    impossible = dict(truth, dsp_mac_pj=-0.1)
    readings = [(a, energy_model.predicted_power(impossible, a, 100e6)[1]) for a in mixes]
    with pytest.raises(EnergyModelError, match="the fit gives a negative dsp_mac_pj"):
        energy_model.calibrate_many(DEVICE, 100e6, idle_w=idle, workloads=readings)


def test_calibrated_coefficients_are_written_and_read_back(tmp_path):
    source = tmp_path / "coefficients.json"
    source.write_text(energy_model.COEFFICIENTS.read_text())
    document = energy_model.load_coefficients(source)
    name, device = energy_model.device_for(document, "ulx3s-85f")
    assert name == "ecp5-85f" and "calibration" not in device
    fitted = energy_model.calibrate(device, ACTIVITY, 125e6, idle_w=0.2, busy_w=0.35)
    energy_model.write_calibrated(source, "ulx3s-85f", fitted)
    again = energy_model.load_coefficients(source)
    assert again["devices"]["ecp5-85f"] == json.loads(json.dumps(fitted))
    assert again["devices"]["ice40-up5k"] == document["devices"]["ice40-up5k"]
    assert energy_model.predicted_power(again["devices"]["ecp5-85f"], ACTIVITY, 125e6) \
        == pytest.approx((0.2, 0.35))


def test_shipped_coefficients_cover_every_board():
    from hw.bitstream import KNOWN_BOARDS

    document = energy_model.load_coefficients()
    assert document["label"] == "ESTIMATE"
    assert set(document["boards"]) == set(KNOWN_BOARDS)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["devices"]["ecp5-85f"].pop("dsp_mac_pj"),
     r"devices\.ecp5-85f\.dsp_mac_pj is missing"),
    (lambda d: d["devices"]["ecp5-85f"].update(static_w=-1),
     r"devices\.ecp5-85f\.static_w must be a number >= 0, not -1"),
    (lambda d: d["devices"]["ecp5-85f"].update(register_toggle_pj="0.5"),
     r"devices\.ecp5-85f\.register_toggle_pj must be a number >= 0, not '0\.5'"),
    (lambda d: d["devices"]["ecp5-85f"].update(ebr_modes=[[512]]),
     r"devices\.ecp5-85f\.ebr_modes must be a list of \[depth, width\] pairs"),
    (lambda d: d["boards"].update(icebreaker="ice40-hx8k"),
     r"boards\.icebreaker names device 'ice40-hx8k', which is not under 'devices'"),
    (lambda d: d.pop("boards"), r"field 'boards' must be a non-empty object"),
])
def test_bad_coefficients_name_the_file_and_field(tmp_path, mutate, message):
    document = json.loads(energy_model.COEFFICIENTS.read_text())
    mutate(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(EnergyModelError, match=rf"{re.escape(str(path))}: {message}"):
        energy_model.load_coefficients(path)


def test_missing_or_broken_coefficients_file(tmp_path):
    with pytest.raises(EnergyModelError, match=r"nothere\.json: no such coefficients file"):
        energy_model.load_coefficients(tmp_path / "nothere.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(EnergyModelError, match=r"broken\.json: not JSON"):
        energy_model.load_coefficients(tmp_path / "broken.json")


def test_unknown_board_lists_the_boards():
    with pytest.raises(EnergyModelError,
                       match=r"unknown board 'ulx3s-12f'; .*icebreaker, ulx3s-25f"):
        energy_model.device_for(energy_model.load_coefficients(), "ulx3s-12f")


@pytest.mark.parametrize("idle, busy, message", [
    (0.2, 0.2, r"busy_w \(0\.2 W\) must exceed idle_w \(0\.2 W\)"),
    (0.3, 0.2, r"busy_w \(0\.2 W\) must exceed idle_w"),
    (-0.1, 0.2, r"idle_w must be a positive number of watts, not -0\.1"),
    (0.1, float("nan"), r"busy_w must be a positive number of watts, not nan"),
    (0.001, 0.2, r"clock-tree power \(0\.0052 W\) is not below the measured idle power"),
])
def test_bad_calibration_readings(idle, busy, message):
    with pytest.raises(EnergyModelError, match=message):
        energy_model.calibrate(DEVICE, ACTIVITY, 100e6, idle_w=idle, busy_w=busy)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("macs"), r"activity: field 'macs' is missing"),
    (lambda a: a.update(cycles=0), r"activity: cycles must be a positive integer, not 0"),
    (lambda a: a["toggles"].update(pool=-3), r"activity: toggles\.pool must be a count"),
])
def test_bad_activity(change, message):
    activity = copy.deepcopy(ACTIVITY)
    change(activity)
    with pytest.raises(EnergyModelError, match=message):
        energy_model.estimate(activity, DEVICE, 100e6)
    with pytest.raises(EnergyModelError, match=r"clock_hz must be a positive number, not 0"):
        energy_model.estimate(ACTIVITY, DEVICE, 0)


# --- the Verilog markup and the coverage file, on a small hand-written example ------------

FLAT = """\
module tessera_top(clock, d);
  input clock;
  wire clock;
  input [3:0] d;
  reg [3:0] \\core.pool.x  = 4'h0;
  reg \\flush$1  = 1'h0;
  wire [3:0] \\core.pool.y ;
  reg [7:0] \\core.engine.act_buffer0  [15:0];
  always @(posedge clock)
    \\core.pool.x  <= d;
  always @(posedge clock) begin
    if (\\core.engine.wr__en )
      \\core.engine.act_buffer0 [d] <= 8'h00;
  end
  reg [7:0] _0_;
  always @(posedge clock) begin
    _0_ <= \\core.engine.act_buffer0 [d];
  end
endmodule"""


def test_instrument_verilog_counts_registers_and_memory_ports_only():
    marked = instrument_verilog(FLAT)
    lines = marked.text.split("\n")
    assert len(lines) == len(FLAT.split("\n"))  # Verilator's line numbers are ours
    assert lines[0].endswith("/*verilator coverage_off*/")
    assert lines[4].startswith("/*verilator coverage_on*/") and "core.pool.x" in lines[4]
    for plain in (1, 5, 6, 7, 14):  # ports, the twin's own register, wires, memory, read reg
        assert "coverage_on" not in lines[plain], FLAT.split("\n")[plain]
    assert lines[10].startswith("/*verilator coverage_on*/") and lines[13].endswith("_off*/")
    assert marked.memories == {"core.engine.act_buffer0":
                               Memory("core.engine.act_buffer0", 8, 16)}
    assert marked.if_lines == {12: ("core.engine.act_buffer0", "write")}
    assert marked.block_lines == {16: ("core.engine.act_buffer0", "read")}
    with pytest.raises(ValueError, match="no 'module' line"):
        instrument_verilog("wire x;")


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.replace("      \\core.engine.act_buffer0 [d] <= 8'h00;\n", ""),
     r"found no write port of memory core\.engine\.act_buffer0"),
    (lambda text: text.replace("_0_ <= \\core.engine.act_buffer0 [d];", "_0_ <= d;"),
     r"found no read port of memory core\.engine\.act_buffer0"),
    (lambda text: text.replace("\\core.pool.x ", "\\flush$2 "),
     r"no register named core\.\* found"),
])
def test_instrument_verilog_refuses_what_it_cannot_count(edit, message):
    assert edit(FLAT) != FLAT
    with pytest.raises(ValueError, match=message):
        instrument_verilog(edit(FLAT))


def test_parse_coverage_sums_per_block():
    marked = Instrumented("", {"core.engine.act_buffer0": Memory("core.engine.act_buffer0",
                                                                 8, 16)},
                          if_lines={12: ("core.engine.act_buffer0", "write")},
                          block_lines={16: ("core.engine.act_buffer0", "read")})

    def point(count, **fields):
        keys = "".join(f"\x01{key}\x02{value}" for key, value in fields.items())
        return f"C '{keys}' {count}"

    text = "\n".join([
        "# SystemC::Coverage-3",
        point(5, page="v_toggle/t", o="core__02epool__02ex[0]:0->1", l=5),
        point(4, page="v_toggle/t", o="core__02epool__02ex[0]:1->0", l=5),
        point(7, page="v_toggle/t", o="core__02eengine__02earray__02epe_0_0__02eacc[3]:0->1"),
        point(6, page="v_toggle/t", o="core__02eengine__02earray__02epe_0_0__02eacc[3]:1->0"),
        point(99, page="v_toggle/t", o="flush__024_1:0->1"),  # not the accelerator's
        point(30, page="v_branch/t", o="if", l=12),
        point(70, page="v_branch/t", o="else", l=12),
        point(100, page="v_line/t", o="block", l=16),
        point(100, page="v_line/t", o="block", l=99),
    ])
    toggles, bits, memories = parse_coverage(text, marked)
    assert toggles == {**dict.fromkeys(BLOCKS, 0), "pool": 9, "systolic_array": 13}
    assert bits == {**dict.fromkeys(BLOCKS, 0), "pool": 1, "systolic_array": 1}
    assert memories == [Memory("core.engine.act_buffer0", 8, 16, reads=100, writes=30)]


# --- the energy twin itself ----------------------------------------------------------------


@pytest.fixture(scope="module")
def energy_run():
    from tessera.energy.estimate import EnergyRun

    run = EnergyRun(CONFIG)
    yield run
    run.close()


def requant_params(rng, channels):
    return (rng.integers(-2**14, 2**14, channels).astype(np.int32),
            rng.integers(2**30, 2**31, channels), rng.integers(12, 22, channels))


def conv_work(run, x, weights, params, pool=False):
    def work():
        return run.accelerator.conv2d(x, weights, *params, x_zero_point=3, y_zero_point=-2,
                                      padding=1, pool=pool, name="energy conv")
    return work


def touched(activity):
    """Blocks with any register toggle or memory access."""
    blocks = {b for b, count in activity["toggles"].items() if count}
    return blocks | {m["block"] for m in activity["memories"] if m["reads"] + m["writes"]}


@pytest.mark.slow
def test_counts_are_nonzero_exactly_for_the_blocks_a_layer_uses(energy_run, rng, seed):
    x = rng.integers(-128, 128, (1, 5, 8, 8), dtype=np.int8)
    weights = rng.integers(-128, 128, (6, 5, 3, 3), dtype=np.int8)
    params = requant_params(rng, 6)
    activity, got = energy_run.measure(conv_work(energy_run, x, weights, params))
    want = requantize(conv2d(x, weights, params[0], x_zero_point=3, padding=1), *params[1:],
                      -2)
    np.testing.assert_array_equal(got, want, err_msg=f"seed={seed}: the energy twin's conv")
    assert touched(activity) == {"systolic_array", "conv_engine", "postprocess", "csr_dma"}, \
        f"seed={seed}: {activity['toggles']}"
    assert activity["macs"] > 0 and activity["cycles"] > 0
    pool_memory = [m for m in activity["memories"] if m["block"] == "pool"]
    assert pool_memory and all(m["reads"] == m["writes"] == 0 for m in pool_memory)

    activity, _ = energy_run.measure(conv_work(energy_run, x, weights, params, pool=True))
    assert touched(activity) == {"systolic_array", "conv_engine", "postprocess", "pool",
                                 "csr_dma"}, f"seed={seed}: {activity['toggles']}"
    assert sum(m["writes"] for m in activity["memories"] if m["block"] == "pool") > 0

    a = rng.integers(-128, 128, (1, 4, 4, 4), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 4, 4, 4), dtype=np.int8)
    args = (a, 0.05, 3, b, 0.02, -128, 0.07, -4, -4, 127)
    activity, got = energy_run.measure(lambda: energy_run.accelerator.add(*args))
    np.testing.assert_array_equal(got, add(*args), err_msg=f"seed={seed}: the twin's add")
    assert "postprocess" in touched(activity)  # the bank also adds
    assert activity["toggles"]["systolic_array"] == activity["toggles"]["pool"] == 0
    assert activity["macs"] == 0


@pytest.mark.slow
def test_counts_repeat_exactly_and_scale_with_work(energy_run, rng, seed):
    weights = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    params = requant_params(rng, 8)
    x = rng.integers(-128, 128, (2, 4, 8, 8), dtype=np.int8)
    # A hard reset clears the registers but not the block RAMs, and the engine reads some
    # words before this layer writes them: a first run leaves the RAMs as every later run
    # of the same layer will find them.
    energy_run.measure(conv_work(energy_run, x[:1], weights, params))
    one, _ = energy_run.measure(conv_work(energy_run, x[:1], weights, params))
    again, _ = energy_run.measure(conv_work(energy_run, x[:1], weights, params))
    assert again == one, f"seed={seed}: two runs of the same input counted differently"
    two, _ = energy_run.measure(conv_work(energy_run, x, weights, params))
    assert two["macs"] == 2 * one["macs"]
    for block in ("systolic_array", "postprocess"):
        ratio = two["toggles"][block] / one["toggles"][block]
        assert 1.7 < ratio < 2.3, f"seed={seed}: {block} toggles x{ratio:.2f} for 2x the work"
    reads = [sum(m["reads"] + m["writes"] for m in run["memories"]) for run in (one, two)]
    assert 1.7 < reads[1] / reads[0] < 2.3, f"seed={seed}: block-RAM accesses {reads}"


# --- the command line: bad input is one line, before anything is built ---------------------


@pytest.mark.parametrize("argv, message", [
    (["energy", "nothere.onnx"], r"error: nothere\.onnx: no such model file"),
    (["energy", "DIGITS", "--board", "ulx3s-12f"],
     r"error: unknown board 'ulx3s-12f'; boards with energy coefficients: icebreaker, "),
    (["energy", "DIGITS", "--idle-w", "0.2"], r"error: --idle-w and --busy-w go together"),
    (["energy", "DIGITS", "--coefficients", "nothere.json"],
     r"error: nothere\.json: no such coefficients file"),
])
def test_cli_bad_input_is_one_line(capsys, argv, message):
    from models.zoo import DIGITS_QDQ
    from tessera.cli import main

    argv = [str(DIGITS_QDQ) if arg == "DIGITS" else arg for arg in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match(message, err) and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_a_whole_model_through_the_driver(energy_run):
    from models.zoo import DIGITS_QDQ
    from tessera.energy.estimate import measure_model, report

    activity, elsewhere = measure_model(energy_run, DIGITS_QDQ, batch=1, seed=3)
    # The digits CNN: convolutions with fused 2x2 max pools, no residual add.
    assert touched(activity) == {"systolic_array", "conv_engine", "postprocess", "pool",
                                 "csr_dma"}, activity["toggles"]
    # The device runs every int8 layer, its global average pool too; the host only the
    # float edges and the Flatten view.
    assert "gap (GlobalAveragePool)" not in elsewhere
    assert "flatten (Flatten)" in elsewhere
    result = report(activity, BOARD, clock_mhz=100.0)
    assert result["label"] == "ESTIMATE" and not result["calibrated"]
    assert result["nj_per_inference"] * 1e-9 == pytest.approx(result["energy"]["total_j"])
    assert result["gops_per_w"] == pytest.approx(
        2 * activity["macs"] / result["energy"]["total_j"] / 1e9)


def test_resources_come_from_the_build_report(tmp_path):
    from tessera.energy.estimate import resources

    assert resources("ulx3s-85f", tmp_path) is None  # not built: the CLI says how to build
    (tmp_path / "ulx3s-85f").mkdir()
    (tmp_path / "ulx3s-85f" / "report.json").write_text(json.dumps({
        "fmax_mhz": 131.2, "MULT18X18D_used": 128, "MULT18X18D_available": 156,
        "LUT4_used": 30000, "LUT4_available": 83640}))
    assert resources("ulx3s-85f", tmp_path) == {"MULT18X18D": [128, 156],
                                                "LUT4": [30000, 83640]}


@pytest.mark.slow
def test_energy_of_a_model_and_its_calibration_end_to_end(energy_run, tmp_path):
    from models.zoo import DIGITS_QDQ
    from tessera.energy.estimate import board_setup, energy_of_model

    assert board_setup(BOARD)[0] == CONFIG
    # A warm-up run leaves the block RAMs as both measured runs find them (see above).
    energy_of_model(DIGITS_QDQ, BOARD, clock_mhz=100.0, run=energy_run)
    result = energy_of_model(DIGITS_QDQ, BOARD, clock_mhz=100.0, run=energy_run)
    assert result["label"] == "ESTIMATE" and not result["calibrated"]
    assert result["clock_mhz"] == 100.0 and result["config"] == CONFIG.as_dict()
    # Readings 1.5x the model's dynamic power and 20 mW more idle: calibrated, written to
    # a new file (the shipped one untouched), and the report made with them says so.
    coefficients = tmp_path / "c.json"
    coefficients.write_text(energy_model.COEFFICIENTS.read_text())
    _, device = energy_model.device_for(energy_model.load_coefficients(coefficients), BOARD)
    idle, busy = energy_model.predicted_power(device, result["activity"], 100e6)
    calibrated = energy_of_model(DIGITS_QDQ, BOARD, clock_mhz=100.0, run=energy_run,
                                 coefficients=coefficients,
                                 calibrate=(idle + 0.02, idle + 0.02 + 1.5 * (busy - idle)),
                                 write=tmp_path / "fitted.json")
    assert calibrated["calibrated"] and calibrated["coefficients"].endswith("fitted.json")
    assert calibrated["activity"] == result["activity"]  # the same run, counted again
    fitted = energy_model.device_for(energy_model.load_coefficients(
        tmp_path / "fitted.json"), BOARD)[1]
    assert fitted["dsp_mac_pj"] == pytest.approx(1.5 * device["dsp_mac_pj"])
    assert energy_model.load_coefficients(coefficients) == json.loads(
        energy_model.COEFFICIENTS.read_text())
    with pytest.raises(EnergyModelError, match="simulates .* not icebreaker's"):
        energy_of_model(DIGITS_QDQ, "icebreaker", run=energy_run)
