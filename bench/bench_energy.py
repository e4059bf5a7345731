"""Energy ESTIMATE per inference from the energy twin's switching activity
(docs/energy.md): the digits CNN and the ResNet-8-like zoo model on the ULX3S-85F's default
configuration at its default clock, and the digits CNN on the iCEBreaker's, with the
shipped (uncalibrated) coefficients; writes bench/results/energy.json. Every figure is an
ESTIMATE, not a measurement of a board.
"""

from bench.common import metric, write_results
from tessera.energy.estimate import EnergyRun, board_setup, energy_of_model

#: (board, model) pairs measured.
RUNS = (("ulx3s-85f", "digits"), ("ulx3s-85f", "resnet8"), ("icebreaker", "digits"))
NOTE = "ESTIMATE: twin toggle counts x uncalibrated coefficients (docs/energy.md)"


def _model_paths():
    from pathlib import Path

    from models.zoo import random_models

    root = Path(__file__).resolve().parent.parent
    return {"digits": root / "models" / "zoo" / "digits_qdq.onnx",
            "resnet8": random_models.built("resnet8", root / random_models.BUILD_DIR)}


def main():
    metrics, runs = [], {}
    paths = _model_paths()
    runs_open = {}  # one energy twin per board, shared by its models
    for board, model in RUNS:
        name = f"{model} on {board}"
        if board not in runs_open:
            runs_open[board] = EnergyRun(board_setup(board)[0])
        result = energy_of_model(paths[model], board, run=runs_open[board])
        runs[name] = {key: result[key] for key in (
            "model", "board", "device", "clock_mhz", "calibrated", "cycles", "macs",
            "not_counted", "resources", "energy", "activity", "counters_added")}
        metrics += [
            metric(f"{name} energy per inference (ESTIMATE)",
                   round(result["nj_per_inference"], 1), "nJ", note=NOTE),
            metric(f"{name} efficiency (ESTIMATE)", round(result["gops_per_w"], 2),
                   "GOP/s/W", note="ops = 2 x MACs issued by the array"),
            metric(f"{name} average power while busy (ESTIMATE)",
                   round(result["average_w"] * 1e3, 1), "mW", note=NOTE),
            metric(f"{name} device cycles per inference", result["cycles"], "cycles"),
        ]
    for run in runs_open.values():
        run.close()
    write_results("energy", metrics, label="ESTIMATE", runs=runs)


if __name__ == "__main__":
    main()
