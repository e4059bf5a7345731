"""tessera build: the resource model (fit and prediction on stored data), the design-space
search (fits the board, respects its limits, scores the model) and its bad-input
messages. No synthesis or place and route runs here: ``--dry-run`` only."""

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
    "ecp5": {"lut": {"one": 9000.0, "pes": 150.0, "edge": 100.0},
             "ff": {"one": 6000.0, "pes": 200.0, "edge": 50.0},
             "dsp": {"pes": 1.0, "post_mults": 1.0},
             "ebr": {"one": 2.0, "ram_blocks": 1.0},
             "period_ns": {"one": 5.0, "side": 0.4}},
    "iCE40": {"lut": {"one": 3000.0, "pes": 300.0}, "dsp": {"pes": 1.0},
              "ebr": {"ram_blocks": 1.0}, "period_ns": {"one": 30.0}},
}}


def engine(rows, cols, act=4096, weight=1024):
    return ConvEngineConfig(array=ArrayConfig(rows=rows, cols=cols), act_depth=act,
                            weight_depth=weight)


def record(rows, cols, act, weight, measured, family="ecp5", fmax=100.0):
    """A sweep record as tessera/explore/sweep.py stores it, with the given measured figures."""
    names = rm.REPORT_NAMES[family]
    return {"label": f"{rows}x{cols}-{act}-{weight}", "board": "ulx3s-85f", "family": family,
            "config": engine(rows, cols, act, weight).as_dict(), "fmax_mhz": fmax,
            "resources": {names[k]: {"used": v, "available": 1} for k, v in measured.items()}}


# ------------------------------------------------------------------ the resource model

def test_ram_blocks_take_the_cheapest_aspect_ratio():
    assert rm.ram_blocks(4096, 8, "ecp5") == 2     # 2048 x 9: two blocks
    assert rm.ram_blocks(1024, 64, "ecp5") == 4    # 1024 x 18: four side by side
    assert rm.ram_blocks(16384, 1, "ecp5") == 1
    assert rm.ram_blocks(1024, 8, "iCE40") == 2    # 512 x 8
    assert rm.ram_blocks(256, 16, "iCE40") == 1
    # The 8x8 default: 8 activation copies of 2 blocks + 4 weight blocks = 20 DP16KD, what
    # synth_ecp5 gives the engine (bench/results/synth.json: conv_engine DP16KD 20).
    assert rm.features(engine(8, 8), "ecp5")["ram_blocks"] == 20


def test_fit_recovers_the_coefficients_of_exact_data():
    truth = {"lut": (5000, 120, 80), "ff": (4000, 150, 30), "dsp": (1, 1), "ebr": (3, 1),
             "period_ns": (4.0, 0.5)}
    records = []
    for rows, cols, act, weight in [(2, 2, 4096, 1024), (4, 4, 2048, 512), (8, 8, 4096, 1024),
                                    (4, 8, 1024, 2048), (6, 6, 4096, 512)]:
        f = rm.features(engine(rows, cols, act, weight), "ecp5")
        values = {fig: sum(c * f[n] for c, n in zip(truth[fig], rm.FEATURES[fig],
                                                     strict=True))
                  for fig in truth}
        period = values.pop("period_ns")
        records.append(record(rows, cols, act, weight, values, fmax=1e3 / period))
    coefficients = rm.fit(records)["ecp5"]
    for figure, want in truth.items():
        got = [coefficients[figure][n] for n in rm.FEATURES[figure]]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), figure
    prediction = rm.predict_with(rm.fit(records), engine(3, 5), "ecp5")
    f = rm.features(engine(3, 5), "ecp5")
    assert prediction["lut"] == round(5000 + 120 * 15 + 80 * 8)
    assert prediction["dsp"] == 15 + f["post_mults"]
    assert prediction["fmax_mhz"] == pytest.approx(1e3 / (4.0 + 0.5 * 15 ** 0.5), abs=0.05)


def test_fit_with_few_runs_uses_fewer_features():
    records = [record(2, 2, 1024, 1024, {"lut": 3000, "dsp": 4, "ebr": 4}, family="iCE40",
                      fmax=40.0)]
    coefficients = rm.fit(records)["iCE40"]
    assert list(coefficients["lut"]) == ["one"]
    assert coefficients["dsp"] == {"pes": 1.0}
    assert rm.predict_with({"iCE40": coefficients}, engine(2, 2, 1024, 1024),
                           "iCE40")["fmax_mhz"] == 40.0


def test_failed_builds_are_left_out_of_the_fit():
    good = record(2, 2, 4096, 1024, {"lut": 10000, "ff": 9000, "dsp": 16, "ebr": 8})
    bad = {"label": "broken", "board": "ulx3s-85f", "error": "nextpnr failed"}
    document = rm.fit_document([good, bad])
    assert [r["label"] for r in document["runs"]] == [good["label"]]


def test_committed_model_reproduces_its_runs():
    """The committed coefficients against the real builds they were fitted on: the DSP
    count is structural and exact; LUT/FF/EBR and fmax within the targets (10 %, 15 %)."""
    model = rm.ResourceModel()
    runs = model.document["runs"]
    assert len(runs) >= 4 and {r["family"] for r in runs} >= {"ecp5"}
    for run in runs:
        config = rm._config_of(run)
        predicted = model.predict(config, run["family"])
        measured = run["measured"]
        assert predicted["dsp"] == measured["dsp"], run["label"]
        for figure in ("lut", "ebr"):
            assert abs(predicted[figure] - measured[figure]) <= 0.10 * measured[figure], \
                (run["label"], figure, predicted[figure], measured[figure])
        if run["fmax_mhz"] is not None:  # pack-only runs have no fmax
            assert predicted["fmax_mhz"] == pytest.approx(run["fmax_mhz"], rel=0.15), \
                run["label"]


#: The model's targets on a build it was not fitted on, as for the fitted runs above: DSP
#: exact, LUT / FF / EBR within 10 %, the clock period within 15 %.
HELD_OUT_BOUNDS = {"lut": 0.10, "ff": 0.10, "dsp": 0.0, "ebr": 0.10, "period_ns": 0.15}
#: How docs/build.md names each figure in its "Held out" line.
DOC_NAMES = {"LUT": "lut", "FF": "ff", "DSP": "dsp", "EBR": "ebr", "clock period": "period_ns"}


def _quoted_held_out_errors():
    """``{figure: fraction}`` from docs/build.md's "**Held out**" item."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "build.md").read_text()
    item = re.search(r"^- \*\*Held out\*\*(.*?)(?=^- |^$)", text, re.M | re.S)
    assert item, "docs/build.md has no '- **Held out**' item quoting the model's error"
    quoted = re.findall(r"(LUT|FF|DSP|EBR|clock period) ([−+-]?\d+(?:\.\d+)?) %",
                        item.group(1))
    return {DOC_NAMES[name]: float(value.replace("−", "-")) / 100 for name, value in quoted}


def _held_out_beyond_bounds(held):
    """The held-out errors of a model document's ``held_out`` beyond HELD_OUT_BOUNDS."""
    return [f"held-out {entry['label']}: {figure} error {entry[figure]:+.1%}, beyond the "
            f"model's {bound:.0%}"
            for entry in held["errors"] for figure, bound in HELD_OUT_BOUNDS.items()
            if figure in entry and abs(entry[figure]) > bound]


def test_committed_model_records_its_held_out_error():
    held = rm.ResourceModel().document["held_out"]
    assert held["errors"] and held["fitted_on"]
    for entry in held["errors"]:
        assert entry["label"] not in held["fitted_on"]
        assert set(entry) >= {"label", "lut", "dsp", "ebr"}
    assert _held_out_beyond_bounds(held) == [], "tessera/explore/resource_model.json"
    assert {entry["label"] for entry in rm.ResourceModel().document["leave_one_out"]}


def test_a_held_out_error_beyond_the_targets_is_caught():
    held = {"errors": [{"label": "8x8", "lut": 0.3, "ff": -0.05, "dsp": 1 / 80, "ebr": 0.0,
                        "period_ns": -0.16}]}
    assert _held_out_beyond_bounds(held) == [
        "held-out 8x8: lut error +30.0%, beyond the model's 10%",
        "held-out 8x8: dsp error +1.2%, beyond the model's 0%",
        "held-out 8x8: period_ns error -16.0%, beyond the model's 15%"]


def test_docs_quote_the_held_out_error_that_is_recorded():
    (entry,) = rm.ResourceModel().document["held_out"]["errors"]
    quoted = _quoted_held_out_errors()
    assert set(quoted) == {figure for figure in HELD_OUT_BOUNDS if figure in entry}, quoted
    for figure, value in quoted.items():
        assert value == pytest.approx(entry[figure], abs=0.0005 + 1e-9), (
            f"docs/build.md quotes the held-out {figure} error as {value:+.1%}; "
            f"tessera/explore/resource_model.json records {entry[figure]:+.2%}")


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
    assert prediction == model.predict(chosen, info["family"])
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
    assert rm.fits(model.predict(biggest, info["family"]), info)


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
    assert list(coefficients["lut"]) == ["one", "pes", "edge"]  # 3 runs: 3 coefficients
    # The period is fitted on the two full builds only: exact there.
    assert rm.predict_with({"ecp5": coefficients}, engine(8, 8), "ecp5")["fmax_mhz"] == 120.0
    assert rm.predict_with({"ecp5": coefficients}, engine(2, 2), "ecp5")["fmax_mhz"] == 150.0
    one_run = rm.fit([full[0]])["ecp5"]
    assert list(one_run["lut"]) == ["one"] and one_run["period_ns"] == {
        "one": pytest.approx(1e3 / 150)}
    errors = rm.relative_errors({"ecp5": coefficients}, [pack])[0]
    assert "period_ns" not in errors and set(errors) >= {"lut", "dsp", "ebr"}
    only_pack = rm.predict_with(rm.fit([pack]), engine(2, 2), "ecp5")
    assert only_pack["fmax_mhz"] is None and only_pack["dsp"] > 0
    with pytest.raises(rm.ModelError, match="no fmax for ecp5"):
        tb.search(DIGITS_QDQ, "ulx3s-85f", resource_model=rm.ResourceModel(
            {"coefficients": rm.fit([pack])}))
