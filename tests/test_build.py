"""tessera build: the resource model (fit and prediction on stored data), the design-space
search (fits the board, respects its limits, scores the model) and its bad-input
messages. No synthesis or place and route runs here: ``--dry-run`` only."""

import dataclasses
import json

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import load_config
from models.zoo import DIGITS_QDQ
from tessera import build as tb
from tessera.cli import main
from tessera.explore import resource_model as rm

# A hand-made model (round numbers in the range of the measured ones) for the search
# tests, so they do not move when the committed model is refitted.
FAKE = {"coefficients": {
    "ecp5": {"lut": {"one": 9000.0, "pes": 150.0, "cols": 300.0, "resident": 4000.0},
             "ff": {"one": 6000.0, "pes": 200.0, "cols": 100.0, "resident": 3000.0},
             "period_ns": {"one": 5.0, "die_side": 0.4, "resident_die": 1.0}},
    "iCE40": {"lut": {"one": 3000.0, "edge": 150.0}, "period_ns": {"one": 30.0}},
}}


def engine(rows, cols, act=4096, weight=1024, **more):
    return ConvEngineConfig(array=ArrayConfig(rows=rows, cols=cols), act_depth=act,
                            weight_depth=weight, **more)


def record(rows, cols, act, weight, measured, family="ecp5", fmax=100.0, board="ulx3s-85f",
           **more):
    """A sweep record as tessera/explore/sweep.py stores it, with the given measured figures."""
    names = rm.REPORT_NAMES[family]
    config = engine(rows, cols, act, weight, **more)
    return {"label": f"{board} {config.name}", "board": board, "family": family,
            "device": rm.board_limits(board)["device"], "config": config.as_dict(),
            "fmax_mhz": fmax,
            "resources": {names[k]: {"used": v, "available": 1} for k, v in measured.items()}}


# ------------------------------------------------------------------ the resource model

def test_ram_blocks_take_the_cheapest_aspect_ratio():
    from hw.bitstream.registry import block_rams_needed, ram_blocks

    assert ram_blocks(4096, 8, "ecp5") == 2     # 2048 x 9: two blocks
    assert ram_blocks(1024, 64, "ecp5") == 4    # 1024 x 18: four side by side
    assert ram_blocks(16384, 1, "ecp5") == 1
    assert ram_blocks(256, 32, "ecp5") == 1     # 512 x 36: the bridge's buffers
    assert ram_blocks(64, 64, "ecp5") == 2      # the 8-lane pool's line
    assert ram_blocks(1024, 8, "iCE40") == 2    # 512 x 8
    assert ram_blocks(256, 16, "iCE40") == 1
    # The 8x8 default: 8 activation copies of 2 blocks + 4 weight blocks = 20 DP16KD, what
    # synth_ecp5 gives the engine; the bridge's 3 and the pool's 2 make the 25 nextpnr
    # placed on the board build.
    parts = block_rams_needed(engine(8, 8))
    assert (parts["activations"], parts["weights"], parts["host bridge"], parts["pool"],
            parts["total"]) == (16, 4, 3, 2, 25)


def test_dsp_and_block_ram_are_counted_exactly_on_every_recorded_build():
    """Not fitted: counted from the configuration, equal to what nextpnr placed on each
    run the model knows (the board builds, resident ones included, and the iCE40 runs)."""
    records = rm.fit_records([], kept=rm.committed_records())
    assert len(records) >= 11
    for r in records:
        measured = rm.measured_figures(r)
        counted = rm.structural(rm._config_of(r), r["family"])
        assert counted == {"dsp": measured["dsp"], "ebr": measured["ebr"]}, r["label"]


def test_counted_bank_registers_are_the_data_memorys():
    """The flip-flops the model counts per data memory bank are the registers the banks'
    Verilog declares (three banks, the last one short)."""
    import re

    from amaranth.back import verilog

    from hw.resident import DataMemory, data_bank_registers

    text = verilog.convert(DataMemory(depth=9000), name="data_memory")
    registers = re.findall(r"^\s*reg (?:\[(\d+):0\] )?\\?(bank\d+_(?:rd_addr|w_addr|w_data|"
                           r"w_en|word))\b", text, re.M)
    assert len(registers) == 3 * 5
    assert sum(int(top) + 1 if top else 1 for top, _ in registers) == \
        data_bank_registers(9000) == 2 * (2 * 12 + 65) + (2 * 10 + 65)


def test_fit_recovers_the_coefficients_of_exact_data():
    truth = {"lut": (5000, 120, 80, 3000), "ff": (4000, 150, 30, 2000),
             "period_ns": (4.0, 0.5, 1.5)}
    family = rm.FEATURES["ecp5"]
    records = []
    for board, rows, cols, act, weight, words in [
            ("ulx3s-25f", 2, 2, 4096, 1024, 0), ("ulx3s-45f", 4, 4, 2048, 512, 0),
            ("ulx3s-85f", 8, 8, 4096, 1024, 0), ("ulx3s-85f", 4, 8, 1024, 2048, 8192),
            ("ulx3s-45f", 6, 6, 4096, 512, 4096), ("ulx3s-25f", 3, 4, 4096, 1024, 2048)]:
        more = {"resident_words": words, "program_words": 512} if words else {}
        device = rm.board_limits(board)["device"]
        f = rm.features(engine(rows, cols, act, weight, **more), "ecp5", device)
        values = {fig: sum(c * f[n] for c, n in zip(truth[fig], family[fig], strict=True))
                  for fig in truth}
        values["ff"] += f["bank_registers"]  # counted, not fitted
        period = values.pop("period_ns")
        records.append(record(rows, cols, act, weight, values, fmax=1e3 / period,
                              board=board, **more))
    coefficients = rm.fit(records)["ecp5"]
    for figure, want in truth.items():
        got = [coefficients[figure][n] for n in family[figure]]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), figure
    config = engine(3, 5, resident_words=5000, program_words=512)
    prediction = rm.predict_with(rm.fit(records), config, "ecp5", "LFE5U-85F")
    f = rm.features(config, "ecp5", "LFE5U-85F")
    # Two banks, of 4096 and 904 words: 12 and 10 address bits.
    assert f["bank_registers"] == (2 * 12 + 65) + (2 * 10 + 65)
    assert prediction["lut"] == round(5000 + 120 * 15 + 80 * 5 + 3000)
    assert prediction["ff"] == round(4000 + 150 * 15 + 30 * 5 + 2000 + f["bank_registers"])
    assert prediction["dsp"] == rm.structural(config, "ecp5")["dsp"]
    assert prediction["fmax_mhz"] == pytest.approx(
        1e3 / (4.0 + 0.5 * f["resident"] + 1.5 * f["resident_die"]), abs=0.05)


def test_fit_with_few_runs_uses_fewer_features():
    records = [record(2, 2, 1024, 1024, {"lut": 3000, "dsp": 4, "ebr": 4}, family="iCE40",
                      fmax=40.0, board="icebreaker")]
    coefficients = rm.fit(records)["iCE40"]
    assert coefficients == {"lut": {"one": 3000.0}, "period_ns": {"one": 25.0}}
    assert rm.predict_with({"iCE40": coefficients}, engine(2, 2, 1024, 1024),
                           "iCE40")["fmax_mhz"] == 40.0


def test_the_clock_of_a_family_fitted_on_the_die_needs_the_device():
    with pytest.raises(rm.ModelError, match="period_ns of ecp5 needs the device"):
        rm.predict_with(FAKE["coefficients"], engine(8, 8), "ecp5")
    with pytest.raises(rm.ModelError, match="device must be one of"):
        rm.predict_with(FAKE["coefficients"], engine(8, 8), "ecp5", "LFE5U-12F")


def test_failed_builds_are_left_out_of_the_fit():
    good = record(2, 2, 4096, 1024, {"lut": 10000, "ff": 9000, "dsp": 16, "ebr": 8})
    bad = {"label": "broken", "board": "ulx3s-85f", "error": "nextpnr failed"}
    document = rm.fit_document([good, bad])
    assert [r["label"] for r in document["runs"]] == [good["label"]]


def test_committed_model_reproduces_its_runs():
    """The committed coefficients against the real builds they were fitted on: DSP and
    block RAM exact; LUT/FF within 10 %, fmax within 15 %."""
    model = rm.ResourceModel()
    runs = model.document["runs"]
    assert len(runs) >= 11 and {r["family"] for r in runs} == {"ecp5", "iCE40"}
    for run in runs:
        config = rm._config_of(run)
        predicted = model.predict(config, run["family"], run["device"])
        measured = run["measured"]
        assert (predicted["dsp"], predicted["ebr"]) == (measured["dsp"], measured["ebr"]), \
            run["label"]
        for figure in ("lut", "ff"):
            if figure in measured:
                assert predicted[figure] == pytest.approx(measured[figure], rel=0.10), \
                    (run["label"], figure)
        if run["fmax_mhz"] is not None:  # pack-only runs have no fmax
            assert predicted["fmax_mhz"] == pytest.approx(run["fmax_mhz"], rel=0.15), \
                run["label"]


#: The model's targets on a build it was not fitted on: DSP and block RAM exact, LUT and
#: FF within 10 %, fmax within 15 %.
HELD_OUT_BOUNDS = {"lut": 0.10, "ff": 0.10, "dsp": 0.0, "ebr": 0.0, "fmax": 0.15}
#: How docs/build.md names each figure in its "Leave one out" item.
DOC_NAMES = {"LUT": "lut", "FF": "ff", "DSP": "dsp", "EBR": "ebr", "fmax": "fmax"}


def _beyond_bounds(errors):
    """The errors (``relative_errors`` entries) beyond HELD_OUT_BOUNDS, as messages."""
    return [f"held-out {entry['label']}: {figure} error {entry[figure]:+.1%}, beyond the "
            f"model's {bound:.0%}"
            for entry in errors for figure, bound in HELD_OUT_BOUNDS.items()
            if figure in entry and abs(entry[figure]) > bound]


def test_leave_one_out_is_within_the_targets():
    """Each run the model knows (the board builds of board_builds.json, resident ones
    included, and the committed model's other runs), predicted by the model fitted on the
    other runs of its family: within the targets, and what the committed model records."""
    records = rm.fit_records([], kept=rm.committed_records())
    errors = rm.leave_one_out(records)
    assert _beyond_bounds(errors) == []
    by_label = {e["label"]: e for e in errors}
    # Every recorded board build was held out once, and every routed one's clock.
    for build in rm.board_builds():
        assert build["label"] in by_label, build["label"]
        assert ("fmax" in by_label[build["label"]]) == bool(build["fmax_mhz"]), build["label"]
    assert errors == rm.ResourceModel().document["leave_one_out"], \
        "tessera/explore/resource_model.json is stale: python -m tessera.explore." \
        "resource_model --fit"


def test_an_error_beyond_the_targets_is_caught():
    errors = [{"label": "8x8", "lut": 0.3, "ff": -0.05, "dsp": 1 / 80, "ebr": 0.0,
               "fmax": -0.16}]
    assert _beyond_bounds(errors) == [
        "held-out 8x8: lut error +30.0%, beyond the model's 10%",
        "held-out 8x8: dsp error +1.2%, beyond the model's 0%",
        "held-out 8x8: fmax error -16.0%, beyond the model's 15%"]


def _quoted_leave_one_out():
    """``{family: {figure: fraction}}`` from docs/build.md's "**Leave one out**" item."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "build.md").read_text()
    item = re.search(r"^- \*\*Leave one out\*\*(.*?)(?=^- |^$)", text, re.M | re.S)
    assert item, "docs/build.md has no '- **Leave one out**' item quoting the model's error"
    quoted = {}
    for family, figures in re.findall(r"(ECP5|iCE40):? ([^;]*)", " ".join(item.group(1).split())):
        quoted[{"ECP5": "ecp5"}.get(family, family)] = {
            DOC_NAMES[name]: float(value) / 100
            for name, value in re.findall(r"(LUT|FF|DSP|EBR|fmax) (\d+(?:\.\d+)?) %", figures)}
    return quoted


def test_docs_quote_the_leave_one_out_errors_that_are_recorded():
    worst = rm.ResourceModel().document["leave_one_out_worst"]
    quoted = _quoted_leave_one_out()
    assert set(quoted) == set(worst), quoted
    for family, figures in worst.items():
        assert set(quoted[family]) == set(figures), (family, quoted[family])
        for figure, value in figures.items():
            assert quoted[family][figure] == pytest.approx(value, abs=0.0005 + 1e-9), (
                f"docs/build.md quotes the {family} {figure} error as "
                f"{quoted[family][figure]:.1%}; the model records {value:.2%}")


def test_model_without_the_family_says_what_to_do():
    model = rm.ResourceModel({"coefficients": {"ecp5": FAKE["coefficients"]["ecp5"]}})
    with pytest.raises(rm.ModelError, match="no coefficients for 'iCE40'.*make sweep"):
        model.predict(engine(2, 2), "iCE40")


# ------------------------------------------------------------------ the search

@pytest.mark.parametrize("board", ["ulx3s-25f", "ulx3s-85f", "icebreaker"])
def test_search_picks_a_fitting_configuration(board):
    model = rm.ResourceModel(FAKE)
    info = rm.board_limits(board)
    plan = tb.search(DIGITS_QDQ, board, resource_model=model)
    chosen, prediction = plan["config"], plan["prediction"]
    assert prediction == model.predict(chosen, info["family"], info["device"])
    cap = rm.FAMILY_CAPS.get(info["family"], rm.UTILIZATION_CAP)
    for name, available in info["limits"].items():
        assert prediction[name] <= cap[name] * available, name
    # The clock is below the predicted fmax by the margin, and the PLL makes it.
    assert plan["clock_mhz"] <= prediction["fmax_mhz"] * (1 - tb.CLOCK_MARGIN)
    assert plan["clock_mhz"] == tb.pll_clock(info, prediction["fmax_mhz"])
    # Every candidate the search kept fits the board; the best configuration of the whole
    # space (the largest array) does not, so the limits did bind.
    for _, predicted in tb.candidates(info, model):
        assert not rm.fits(predicted, info)
    biggest = engine(max(tb.SIDES), max(tb.SIDES), max(tb.ACT_DEPTHS), max(tb.WEIGHT_DEPTHS))
    assert rm.fits(model.predict(biggest, info["family"], info["device"]), info)


def test_search_scores_the_model_with_the_cycle_model():
    """The chosen score is the per-layer cycle model at the chosen clock plus the CPU
    fallbacks, and no runner-up scores higher."""
    from sw_driver.providers.costs import device_work

    model = rm.ResourceModel(FAKE)
    plan = tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=model)
    profile = tb.ModelProfile(DIGITS_QDQ)
    cycles = sum(device_work(layer, profile.shape_of(layer), plan["config"]).cycles
                 for layer in profile.required)
    assert [c.name for c in plan["layers"]] == ["conv1", "pool1", "conv2", "fc"]
    assert sum(c.cycles for c in plan["layers"]) == cycles
    seconds = cycles / (plan["clock_mhz"] * 1e6) + profile.fallback_seconds
    assert plan["images_per_s"] == pytest.approx(1 / seconds)
    assert all(r["images_per_s"] <= plan["images_per_s"] for r in plan["runners_up"])
    fallbacks = {f.name: f.reason for f in plan["fallbacks"]}
    assert set(fallbacks) == {"input_QuantizeLinear", "gap", "flatten",
                              "logits_DequantizeLinear"}
    assert "not GlobalAveragePool" in fallbacks["gap"]


def test_search_takes_the_boards_optional_blocks_and_drops_an_unused_add(tmp_path):
    """The digits CNN has no Add: no build carries the residual add. The iCEBreaker's
    build leaves out what its preset leaves out; a model with an Add keeps the add on the
    ULX3S, and on the iCEBreaker its Add falls back to the cpu with the reason."""
    import qdq_models

    model = rm.ResourceModel(FAKE)
    ulx3s = tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=model)["config"]
    ice = tb.search(DIGITS_QDQ, "icebreaker", resource_model=model)["config"]
    assert (ulx3s.residual_add, ulx3s.perf_counters, ulx3s.csr_readback) == \
        (False, True, True)
    assert (ice.residual_add, ice.perf_counters, ice.csr_readback) == (False, False, False)

    _, residual, _ = qdq_models.build("residual", 7, tmp_path)
    assert tb.search(residual, "ulx3s-85f", resource_model=model)["config"].residual_add
    plan = tb.search(residual, "icebreaker", resource_model=model)
    assert not plan["config"].residual_add
    reasons = {f.name: f.reason for f in plan["fallbacks"]}
    assert "without the residual add" in reasons["residual_add"], reasons


def test_search_stays_within_the_largest_routed_array_of_the_device():
    """The committed model's clock is fitted on routed builds up to 8x8 on the 85F (the
    16x8 placed but did not route), 6x8 on the 45F, 4x4 on the 25F: no candidate has more
    PEs, so the clock of what the search picks is not an extrapolation. A model without
    runs (FAKE) sets no such limit."""
    model = rm.ResourceModel()
    for board, largest in (("ulx3s-85f", 64), ("ulx3s-45f", 48), ("ulx3s-25f", 16)):
        info = rm.board_limits(board)
        assert model.largest_routed(info["family"], info["device"]) == largest
        sizes = {c.rows * c.cols for c, _ in tb.candidates(info, model)}
        assert max(sizes) == largest, board
    info = rm.board_limits("ulx3s-85f")
    assert rm.ResourceModel(FAKE).largest_routed("ecp5", info["device"]) is None
    assert max(c.rows * c.cols for c, _ in tb.candidates(info, rm.ResourceModel(FAKE))) > 64


def test_resident_candidates_carry_the_blocks_cost_and_are_resized_to_the_image():
    """On a resident board every candidate is predicted with the smallest resident block
    (the player's logic and clock in its score); the chosen one holds the image in
    memories of its size, predicted and clocked again."""
    model = rm.ResourceModel(FAKE)
    info = rm.board_limits("ulx3s-85f")
    for config, prediction in tb.candidates(info, model, resident=True):
        assert (config.resident_words, config.program_words) == (512, 512)
        assert prediction == model.predict(config, "ecp5", info["device"])
    plan = tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=model)
    config = plan["config"]
    assert config.resident_words >= plan["image"].data_words
    assert plan["prediction"] == model.predict(config, "ecp5", info["device"])
    assert plan["clock_mhz"] == tb.pll_clock(info, plan["prediction"]["fmax_mhz"])


def test_without_a_candidate_for_the_image_the_best_is_built_without_the_block(monkeypatch):
    from sw_driver.errors import ResidentFitError

    def refuse(model_path, config):
        raise ResidentFitError("the constants need 9999 words, more than the 16 free")

    monkeypatch.setattr(tb, "model_image", refuse)
    model = rm.ResourceModel(FAKE)
    info = rm.board_limits("ulx3s-85f")
    plan = tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=model)
    assert plan["image"] is None and "9999 words" in plan["image_refused"]
    config = plan["config"]
    assert not config.resident
    assert plan["prediction"] == model.predict(config, "ecp5", info["device"])
    assert plan["clock_mhz"] == tb.pll_clock(info, plan["prediction"]["fmax_mhz"])


def test_unmeasured_fields_are_named():
    """LUT, FF and the clock see no feature of the optional blocks, the lean engine, the
    depthwise mode or add_lanes: a value none of the family's runs had is named."""
    model = rm.ResourceModel()
    preset = engine(8, 8)
    assert model.unmeasured(preset, "ecp5") == []
    lean = dataclasses.replace(preset, pipelined=False, depthwise=True, add_lanes=4)
    assert model.unmeasured(lean, "ecp5") == [
        "pipelined=False (runs: True)", "depthwise=True (runs: False)",
        "add_lanes=4 (runs: 8)"]
    assert model.unmeasured(engine(1, 1, residual_add=False, pipelined=False,
                                   perf_counters=False, csr_readback=False), "iCE40") == []


def test_pll_clock_is_made_by_the_pll_and_divides_the_uart():
    from hw.boards.accelerator import uart_divisor
    from hw.boards.pll import ecp5_pll_settings

    ecp5, ice40 = rm.board_limits("ulx3s-85f"), rm.board_limits("icebreaker")
    assert tb.pll_clock(ecp5, 150.0) == 135.0  # 25 MHz x 27 / 5, divisor 45
    # 44 MHz less 10 % is 39.6: 39.5 is no PLL setting, 39.25 is (25 x 11 / 7 = 39.29 MHz)
    # and divides 3 Mbaud by 13 (0.7 % off).
    assert tb.pll_clock(ecp5, 44.0) == 39.25
    ecp5_pll_settings(25.0, 39.25)
    assert uart_divisor(39.25, tb.BAUD)[0] == 13
    assert tb.pll_clock(ice40, 10.0) is None  # below the iCE40 PLL's 16 MHz
    # The UART divides what the PLL makes, not what was asked: 64.25 and 64 MHz asked are
    # both 64.29 made (25 x 18 / 7): 2.04 % off with a divisor of 21 (64.25: 1.98 %).
    uart_divisor(64.25, tb.BAUD)
    assert tb.pll_clock(ecp5, 71.4) == 62.75
    for fmax in (40.0, 55.5, 71.4, 83.3, 97.0):
        made = ecp5_pll_settings(25.0, tb.pll_clock(ecp5, fmax)).f_out_mhz
        uart_divisor(made, tb.BAUD)


def test_model_that_fits_no_configuration_names_the_layer(monkeypatch):
    """With weight buffers of at most 128 words, conv2 (K = 16 x 3 x 3 = 144 weights per
    output channel) runs on no engine: the message names it and what it needs."""
    monkeypatch.setattr(tb, "WEIGHT_DEPTHS", (64, 128))
    with pytest.raises(tb.BuildSearchError) as error:
        tb.search(DIGITS_QDQ, "icebreaker", resource_model=rm.ResourceModel(FAKE))
    message = str(error.value)
    assert "no configuration that fits icebreaker (iCE40UP5K)" in message
    assert "weight_depth 128" in message
    assert "layer 'conv2' (Conv) needs more than" in message
    assert "K=144" in message and "weight buffer" in message
    assert "conv1" not in message  # K = 9 fits


def test_nothing_fits_the_board():
    huge = {"coefficients": {"ecp5": {**FAKE["coefficients"]["ecp5"],
                                      "lut": {"one": 1e6}}}}
    with pytest.raises(tb.BuildSearchError, match="not even a 1x1 array") as error:
        tb.search(DIGITS_QDQ, "ulx3s-25f", resource_model=rm.ResourceModel(huge))
    assert "it needs lut 1000000 > 20644.8 (85% of 24288)" in str(error.value)


# ------------------------------------------------------------------ the command line

def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())  # rich wraps lines


@pytest.mark.parametrize("board", ["ulx3s-85f", "ulx3s-25f"])
def test_dry_run_digits(board, tmp_path, capsys):
    code, out = run_cli(["build", str(DIGITS_QDQ), "--board", board, "--dry-run",
                         "--out", str(tmp_path)], capsys)
    assert code == 0, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["dry_run"] is True and report["board"] == board
    assert "achieved" not in report
    config = load_config(str(tmp_path / "run-config.json"))
    assert config.clock_mhz == report["clock_mhz"]
    assert config.rows == report["config"]["array"]["rows"]
    predicted = report["predicted"]
    for name in ("lut", "dsp", "ebr"):
        assert 0 < predicted[name] <= predicted["available"][name]
    assert predicted["images_per_s"] > 0
    assert predicted["peak_gops"] == pytest.approx(
        2 * config.rows * config.cols * config.clock_mhz / 1e3, abs=1e-3)
    assert {f["layer"] for f in report["fallbacks"]} >= {"gap", "flatten"}
    assert "predicted" in out and "dry run: nothing built" in out


def _closest_build(board, config):
    """The recorded build of ``board`` nearest ``config``: routed, with the resident block
    if ``config`` has it, the nearest number of PEs, then of columns."""
    builds = [b for b in rm.board_builds() if b["board"] == board and b["fmax_mhz"]
              and rm._config_of(b).resident == config.resident]
    return min(builds, key=lambda b: (abs(rm._config_of(b).rows * rm._config_of(b).cols
                                          - config.rows * config.cols),
                                      abs(rm._config_of(b).cols - config.cols)))


@pytest.mark.parametrize("board", ["ulx3s-85f", "ulx3s-45f", "ulx3s-25f"])
def test_dry_run_predicts_the_closest_recorded_build_held_out(board, tmp_path, capsys):
    """What `tessera build digits --board B --dry-run` picks (the committed model's
    choice, with the model built in) is predicted within the targets of the recorded build
    closest to it, both by the committed model and by the model fitted without that build:
    LUT and FF within 10 %, fmax within 15 % of the build's; DSP and block RAM are the
    counts of the picked configuration (exact on every recorded build:
    test_dsp_and_block_ram_are_counted_exactly_on_every_recorded_build). The clock is the
    picked design's prediction less the margin."""
    code, out = run_cli(["build", str(DIGITS_QDQ), "--board", board, "--dry-run",
                         "--out", str(tmp_path)], capsys)
    assert code == 0, out
    report = json.loads((tmp_path / "report.json").read_text())
    config = dataclasses.replace(load_config(str(tmp_path / "run-config.json")),
                                 clock_mhz=None)
    info = rm.board_limits(board)
    assert config.resident, "the ULX3S builds the model in"
    closest = _closest_build(board, config)
    measured = rm.measured_figures(closest)
    others = [r for r in rm.fit_records([], kept=rm.committed_records())
              if r["label"] != closest["label"]]
    held_out = rm.ResourceModel({"coefficients": rm.fit(others)})
    for model, predicted in (("committed", report["predicted"]),
                             ("held out", held_out.predict(config, "ecp5", info["device"]))):
        where = f"{board}: {config.name} ({model}) against {closest['label']}"
        for figure in ("lut", "ff"):
            assert predicted[figure] == pytest.approx(measured[figure], rel=0.10), \
                (where, figure, predicted[figure], measured[figure])
        assert predicted["fmax_mhz"] == pytest.approx(closest["fmax_mhz"], rel=0.15), \
            (where, predicted["fmax_mhz"], closest["fmax_mhz"])
        assert {k: predicted[k] for k in ("dsp", "ebr")} == rm.structural(config, "ecp5")
    assert report["clock_mhz"] == tb.pll_clock(info, report["predicted"]["fmax_mhz"])
    # The digits CNN has no Add: no residual add, which no ECP5 build has left out.
    assert report["predicted"]["unmeasured"] == ["residual_add=False (runs: True)"]


def test_dry_run_resnet8(tmp_path, capsys):
    from models.zoo import random_models

    _, qdq = random_models.build("resnet8", tmp_path / "zoo")
    code, out = run_cli(["build", str(qdq), "--board", "ulx3s-85f", "--dry-run",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 0, out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    on_device = {layer["name"] for layer in report["layers"]}
    # Every convolution and the three residual adds run on the engine.
    assert {"stem", "b1_conv1", "b2_proj", "b3_conv2", "b1_add", "b3_add", "fc"} <= on_device
    assert {f["layer"] for f in report["fallbacks"]} == {
        "input_QuantizeLinear", "gap", "flatten", "logits_DequantizeLinear"}
    # ResNet-8 has more work than the digits CNN: the search takes a larger array.
    assert report["config"]["array"]["rows"] * report["config"]["array"]["cols"] >= 16


def test_dry_run_on_the_icebreaker_picks_the_lean_engine(tmp_path, capsys):
    """The committed model's iCE40 runs are lean engines (1x1 built, 4 976 logic cells;
    1x2 and 2x2 packed, 5 777 and 6 428): only the 1x1 is under 95 % of the UP5K's 5 280,
    and the search keeps the board preset's blocks (no add, counters or timing
    registers)."""
    code, out = run_cli(["build", str(DIGITS_QDQ), "--board", "icebreaker", "--dry-run",
                         "--out", str(tmp_path)], capsys)
    assert code == 0, out
    report = json.loads((tmp_path / "report.json").read_text())
    config = load_config(str(tmp_path / "run-config.json"))
    assert (config.rows, config.cols) == (1, 1)
    assert not config.pipelined and not config.residual_add and not config.perf_counters
    assert report["predicted"]["lut"] <= 0.95 * 5280
    assert report["clock_mhz"] <= report["predicted"]["fmax_mhz"]


def test_unknown_board_lists_the_boards(tmp_path, capsys):
    code, out = run_cli(["build", str(DIGITS_QDQ), "--board", "de10", "--dry-run",
                         "--out", str(tmp_path)], capsys)
    assert code == 2
    assert "unknown board 'de10'" in out
    assert "icebreaker, ulx3s-25f, ulx3s-45f, ulx3s-85f"  in out


def test_missing_model_file(tmp_path, capsys):
    code, out = run_cli(["build", str(tmp_path / "nope.onnx"), "--board", "icebreaker",
                         "--dry-run"], capsys)
    assert code == 2 and "no such model file" in out


def test_build_records_predicted_against_achieved(tmp_path, monkeypatch):
    """The non-dry path with the board flow stood in for (no tools run): the board build
    gets the chosen configuration and clock, and report.json puts its figures beside the
    prediction."""
    import hw.bitstream

    asked = {}

    def fake_build(board, config, build_root, *, clock_mhz, say, image):
        asked.update(board=board, config=config, root=build_root, clock=clock_mhz,
                     image=image)
        return {"fmax_mhz": 40.5, "timing_met": True, "LC_used": 4000, "SB_MAC16_used": 8,
                "EBR_used": 20, "bitstream": str(build_root / board / "top.bin"),
                "logs": {"nextpnr": "x.log"}}

    monkeypatch.setattr(hw.bitstream, "build_bitstream", fake_build)
    monkeypatch.setattr(tb, "_write_verilog", lambda top, path: path.write_text("// top\n"))
    document = tb.build(DIGITS_QDQ, "icebreaker", tmp_path, resource_model=rm.ResourceModel(FAKE))
    assert asked["board"] == "icebreaker" and asked["clock"] == document["clock_mhz"]
    assert asked["config"].rows == document["config"]["array"]["rows"]
    assert asked["config"].clock_mhz is None and asked["root"] == tmp_path / "pnr"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["achieved"] == {"fmax_mhz": 40.5, "timing_met": True, "lut": 4000,
                                  "dsp": 8, "ebr": 20}
    assert report["verilog"] == str(tmp_path / "top.v") and report["dry_run"] is False
    # The iCEBreaker's preset has no resident block: nothing is built in.
    assert asked["image"] is None and "image" not in report


@pytest.mark.parametrize("board", ["ulx3s-85f", "ulx3s-25f"])
def test_build_on_a_resident_board_builds_the_model_in(board, tmp_path, monkeypatch):
    """On a ULX3S (its preset has the resident block) the chosen engine takes the resident
    compiler (columns a multiple of 4), its memories hold the model's image in whole
    DP16KD blocks, and the board build gets the image whose checksum a session's runner
    compares."""
    import hw.bitstream
    from sw_driver import InferenceSession
    from sw_driver.resident import compile_model

    asked = {}

    def fake_build(board, config, build_root, *, clock_mhz, say, image):
        asked.update(config=config, image=image)
        return {"fmax_mhz": 70.0, "timing_met": True, "DP16KD_used": 30,
                "block_ram": {"used": 30, "available": 208}, "logs": {}}

    monkeypatch.setattr(hw.bitstream, "build_bitstream", fake_build)
    monkeypatch.setattr(tb, "_write_verilog", lambda top, path: path.write_text("// top\n"))
    document = tb.build(DIGITS_QDQ, board, tmp_path)
    config, image = asked["config"], asked["image"]
    assert config.cols % 4 == 0 and config.resident
    assert config.resident_words % 512 == 0 and config.program_words % 512 == 0
    graph = InferenceSession(DIGITS_QDQ, providers=["cpu"]).graph
    want = compile_model(graph, config, data_words=config.resident_words,
                         program_words=config.program_words)
    assert image.checksum == want.checksum and image.data == tuple(int(w) for w in want.data)
    assert len(image.data) <= config.resident_words < len(image.data) + want.arena_words + 512
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["image"]["key"] == image.key and report["image"]["checksum"] == [
        f"{value:#010x}" for value in image.checksum]
    assert report["image"]["data_words"] == len(image.data)
    assert report["config"]["resident_words"] == config.resident_words
    assert load_config(str(tmp_path / "run-config.json")).resident_words == \
        config.resident_words
    assert report["block_ram"] == {"used": 30, "available": 208}
    assert document["image"]["layers"][0] == "conv1"


def test_no_clock_the_pll_makes():
    slow = {"coefficients": {"iCE40": {**FAKE["coefficients"]["iCE40"],
                                       "period_ns": {"one": 100.0}}}}  # 10 MHz
    with pytest.raises(tb.BuildSearchError, match="has a clock its PLL makes below"):
        tb.search(DIGITS_QDQ, "icebreaker", resource_model=rm.ResourceModel(slow))


def test_pack_only_runs_fit_resources_but_not_fmax():
    full = [record(2, 2, 4096, 1024, {"lut": 10000, "ff": 9000, "dsp": 28, "ebr": 9},
                   fmax=150.0),
            record(8, 8, 4096, 1024, {"lut": 22000, "ff": 20000, "dsp": 80, "ebr": 22},
                   fmax=120.0)]
    pack = record(4, 4, 4096, 1024, {"lut": 13000, "ff": 12000, "dsp": 40, "ebr": 13})
    pack["fmax_mhz"] = None
    coefficients = rm.fit(full + [pack])["ecp5"]
    assert list(coefficients["lut"]) == ["one", "pes", "cols"]  # 3 runs: 3 coefficients
    # The period is fitted on the two full builds only (the pack-only run has no fmax):
    # without the block, the model's period is one figure, their mean.
    mean = 1e3 / ((1e3 / 120.0 + 1e3 / 150.0) / 2)
    for config in (engine(8, 8), engine(2, 2)):
        assert rm.predict_with({"ecp5": coefficients}, config, "ecp5",
                               "LFE5U-85F")["fmax_mhz"] == pytest.approx(mean, abs=0.05)
    one_run = rm.fit([full[0]])["ecp5"]
    assert list(one_run["lut"]) == ["one"] and one_run["period_ns"] == {
        "one": pytest.approx(1e3 / 150)}
    errors = rm.relative_errors({"ecp5": coefficients}, [pack])[0]
    assert "fmax" not in errors and set(errors) >= {"lut", "ff", "dsp", "ebr"}
    only_pack = rm.predict_with(rm.fit([pack]), engine(2, 2), "ecp5")
    assert only_pack["fmax_mhz"] is None and only_pack["dsp"] > 0
    with pytest.raises(rm.ModelError, match="no fmax for ecp5"):
        tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=rm.ResourceModel(
            {"coefficients": rm.fit([pack])}))
