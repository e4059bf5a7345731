"""The record of board builds (tessera/explore/build_records.py): a record taken from a
report.json, the latest-per-configuration list the resource model fits, and the generated
table in docs/boards.md."""

import json

import pytest

from tessera.explore import build_records as br


def _report(**changes):
    """A report.json of a whole-accelerator build, as ``tessera bitstream`` writes it."""
    report = {
        "kind": "accelerator", "board": "ulx3s-85f", "family": "ecp5", "device": "LFE5U-85F",
        "config": {"array": {"rows": 8, "cols": 8, "acc_width": 32}, "act_depth": 4096,
                   "clock_mhz": 62.5},
        "source": {"commit": "abcdef0123456789"}, "seed": 1, "router": "router2",
        "clock_mhz": 62.5, "target_mhz": 62.5, "fmax_mhz": 64.1, "timing_met": True,
        "clock_net": "$glbnet$clk",
        "resources": {name: {"used": used} for name, used in
                      (("LUT4", 28000), ("TRELLIS_FF", 22000), ("MULT18X18D", 80),
                       ("DP16KD", 113))},
        "wall_time_s": {"place_and_route_s": 1230.0},
        "critical_path": {"$glbnet$clk": {"total_ns": 15.6, "logic_ns": 2.1,
                                           "routing_ns": 13.5, "start": "a.q",
                                           "end": "b.d"}},
    }
    report.update(changes)
    return report


def test_a_record_takes_every_figure_from_the_report():
    record = br.record_from_report(_report(), label="85f try", date="2026-11-28",
                                   note="the bank's queue")
    assert record["commit"] == "abcdef0" and record["router"] == "router2"
    assert (record["fmax_mhz"], record["timing_met"], record["place_and_route_min"]) == \
        (64.1, True, 20.5)
    assert record["config"]["clock_mhz"] is None
    assert record["resources"]["DP16KD"] == {"used": 113}
    assert record["critical_path"] == "15.60 ns (2.10 logic, 13.50 routing): a.q -> b.d"
    assert br.record_from_report(_report(), label="x", date="d",
                                 critical_path="words")["critical_path"] == "words"


def test_bad_reports_are_refused_by_name():
    with pytest.raises(ValueError, match="bare: only whole-accelerator builds .* 'array'"):
        br.record_from_report(_report(kind="array"), label="bare", date="d")
    with pytest.raises(ValueError, match="ice: the report has no MULT18X18D"):
        br.record_from_report(_report(resources={"LUT4": {"used": 1},
                                                 "TRELLIS_FF": {"used": 1},
                                                 "DP16KD": {"used": 1}}),
                              label="ice", date="d")


def test_adding_replaces_the_configuration_in_builds_and_keeps_history():
    first = br.record_from_report(_report(), label="one", date="d")
    second = br.record_from_report(_report(fmax_mhz=70.0), label="two", date="d")
    other = br.record_from_report(
        _report(config={"array": {"rows": 6, "cols": 8}, "clock_mhz": None}),
        label="three", date="d")
    data = {"builds": [], "history": []}
    for record in (first, other, second):
        data = br.add_record(data, record)
    assert [r["label"] for r in data["builds"]] == ["three", "two"]
    assert [r["label"] for r in data["history"]] == ["one", "three", "two"]
    table = br.render_table(data)
    assert "| **70.00 MHz**, met |" in table and table.count("\n") == 4


def test_every_build_the_model_fits_is_in_the_history():
    data = json.loads(br.RECORDS_PATH.read_text())
    history = [json.dumps(r, sort_keys=True) for r in data["history"]]
    for record in data["builds"]:
        assert json.dumps(record, sort_keys=True) in history, record["label"]


def test_the_docs_table_is_generated_from_the_records():
    data = json.loads(br.RECORDS_PATH.read_text())
    assert br.update_doc(data, check=True), (
        "docs/boards.md's build table is stale: run python -m "
        "tessera.explore.build_records table")


def test_the_cli_names_a_missing_report(tmp_path, capsys):
    assert br.main(["add", str(tmp_path / "none.json"), "--label", "x",
                    "--date", "2026-11-28"]) == 2
    assert "no report at" in capsys.readouterr().err


def test_a_build_at_another_clock_goes_to_the_history_only():
    fitted = br.record_from_report(_report(), label="62.5", date="d")
    other = br.record_from_report(_report(clock_mhz=50.0, target_mhz=50.0), label="50",
                                  date="d")
    data = br.add_record({"builds": []}, fitted)
    data = br.add_record(data, other, history_only=True)
    assert [r["label"] for r in data["builds"]] == ["62.5"]
    assert [r["label"] for r in data["history"]] == ["62.5", "50"]
