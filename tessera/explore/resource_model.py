"""Resource and fmax model of the whole accelerator on a board, fitted on real builds.

Predicts, for a :class:`~contract.config.ConvEngineConfig` on an FPGA family, the LUTs,
flip-flops, multipliers (DSP) and block RAMs (EBR) that nextpnr reports for the board
build (:func:`hw.bitstream.build_bitstream`: the accelerator behind its UART bridge and
PLL), and the fmax nextpnr achieves. Each figure is a linear formula in features of the
configuration whose coefficients are fitted by least squares on the sweep's builds
(``tessera/explore/sweep.py``) and kept, with the runs they were fitted on, in
``tessera/explore/resource_model.json``:

- ``lut``, ``ff``: ``a + b·R·C + c·(R + C)``: per-PE logic (accumulator, skew registers),
  per-row and per-column logic (buffers' address paths, requantizer lanes), and the fixed
  part (CSRs, sequencer, host bridge, pool, add unit).
- ``dsp``: ``a·R·C + b·(multipliers outside the array)``, the latter counted from the
  shared post-processing units (``contract.postprocess``, as ``hw.bitstream`` counts them).
- ``ebr``: ``a + b·blocks``, where ``blocks`` is the block RAMs the activation buffer (R
  copies of ``act_depth`` bytes) and the weight buffer (``weight_depth`` words of C bytes)
  need in the family's best RAM aspect ratio.
- ``fmax``: the clock *period* is ``a + b·sqrt(R·C)``: the longest routes grow with the
  array's side.

The runs are the sweep's builds and the board builds recorded in
``tessera/explore/board_builds.json`` (``make bitstream`` builds, the latest per board and
configuration: the one record of the default builds' fmax that the docs quote); a board
build replaces any sweep build of the same board and configuration. Which runs fit and
which are held out is recorded, with the held-out error, so the model's accuracy is a
measured figure (``docs/build.md``).

Usage: ``python -m tessera.explore.resource_model --fit`` refits from ``build/sweep`` results
and the board builds.
"""

import dataclasses
import json
import math
from pathlib import Path

from contract.postprocess import postprocess_multipliers
from contract.requant import BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH
from hw.bitstream.registry import RAM_SHAPES, ram_blocks

MODEL_PATH = Path(__file__).resolve().parent / "resource_model.json"
#: Board builds measured outside the sweep, in the sweep's record format (see the module
#: docstring).
BOARD_BUILDS_PATH = Path(__file__).resolve().parent / "board_builds.json"
#: Where the sweep's builds are and what each one's record is called (``tessera.explore.sweep``).
SWEEP_BUILD = Path("build") / "sweep"
RESULT_NAME = "result.json"

#: The model's resource names -> the names in a board build report, per family. iCE40
#: logic cells hold a LUT and a flip-flop each, so ``ff`` has no separate count there.
REPORT_NAMES = {
    "ecp5": {"lut": "LUT4", "ff": "TRELLIS_FF", "dsp": "MULT18X18D", "ebr": "DP16KD"},
    "iCE40": {"lut": "LC", "dsp": "SB_MAC16", "ebr": "EBR"},
}

#: What each device offers (Lattice data sheets; the same figures nextpnr reports).
DEVICE_LIMITS = {
    "LFE5U-25F": {"lut": 24288, "ff": 24288, "dsp": 28, "ebr": 56},
    "LFE5U-45F": {"lut": 43848, "ff": 43848, "dsp": 72, "ebr": 108},
    "LFE5U-85F": {"lut": 83640, "ff": 83640, "dsp": 156, "ebr": 208},
    "iCE40UP5K": {"lut": 5280, "dsp": 8, "ebr": 30},
}

#: Fraction of each resource a configuration may be predicted to use: logic is kept below
#: 85 % so placement and routing still have room (and the model's error has some), hard
#: blocks may be used up.
UTILIZATION_CAP = {"lut": 0.85, "ff": 0.85, "dsp": 1.0, "ebr": 1.0}
#: Per family where measured otherwise: the UP5K's logic cells are counted after packing
#: (LUT, carry and flip-flop together), and the iCEBreaker's lean 1x1 engine placed,
#: routed and met its clock at 94 % of them (docs/boards.md).
FAMILY_CAPS = {"iCE40": {**UTILIZATION_CAP, "lut": 0.95}}

#: Features of each modelled figure (names of :func:`features` entries).
FEATURES = {
    "lut": ("one", "pes", "edge"),
    "ff": ("one", "pes", "edge"),
    "dsp": ("pes", "post_mults"),
    "ebr": ("one", "ram_blocks"),
    "period_ns": ("one", "side"),
}
#: With fewer runs than a formula has coefficients (a family seldom built), these.
SMALL_FEATURES = {
    "lut": ("one", "pes"), "ff": ("one", "pes"), "dsp": ("pes", "post_mults"),
    "ebr": ("one", "ram_blocks"), "period_ns": ("one",),
}


class ModelError(ValueError):
    """The model cannot answer (unknown family, no coefficients); says what to do."""


def features(config, family):
    """The model's features of ``config`` on ``family`` (a dict of floats)."""
    if family not in RAM_SHAPES:
        raise ModelError(f"family must be one of {sorted(RAM_SHAPES)}, not {family!r}")
    r, c = config.rows, config.cols
    return {
        "one": 1.0,
        "pes": float(r * c),
        "edge": float(r + c),
        "side": math.sqrt(r * c),
        "post_mults": float(postprocess_multipliers(c, residual_add=config.residual_add,
                                                       pipelined=config.pipelined,
                                                       add_lanes=config.add_lanes)),
        "ram_blocks": float(r * ram_blocks(config.act_depth, 8, family)
                            + ram_blocks(config.weight_depth, 8 * c, family)
                            + _param_table_blocks(config, family)
                            + ram_blocks(config.resident_words, 32, family)
                            + ram_blocks(config.program_words, 32, family)),
    }


#: Bits of one lane's entry in the engine's parameter table: bias, multiplier, shift.
PARAM_LANE_BITS = BIAS_WIDTH + MULTIPLIER_WIDTH + SHIFT_WIDTH


def _param_table_blocks(config, family):
    """Block RAMs of the engine's parameter table (``max_col_tiles`` entries of
    :data:`PARAM_LANE_BITS` per lane): on the iCE40, which has no distributed RAM, it takes
    block RAM (5 SB_RAM40_4K for one lane, 9 for two); the ECP5 holds it in LUT RAM."""
    if family != "iCE40":
        return 0
    return ram_blocks(config.max_col_tiles, PARAM_LANE_BITS * config.cols, family)


def measured_figures(record):
    """``{figure: value}`` of a sweep record (``tessera.explore.sweep``), in the model's names."""
    names = REPORT_NAMES[record["family"]]
    figures = {key: record["resources"][name]["used"] for key, name in names.items()
               if name in record["resources"]}
    if record.get("fmax_mhz"):  # pack-only builds have resources but no fmax
        figures["period_ns"] = 1e3 / record["fmax_mhz"]
    return figures


def fit_figure(rows, figure, names):
    """Least-squares coefficients of ``figure`` over ``rows`` (``(features, figures)``)."""
    import numpy as np

    a = np.array([[f[n] for n in names] for f, _ in rows])
    y = np.array([m[figure] for _, m in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return {name: round(float(v), 6) for name, v in zip(names, coef, strict=True)}


def fit(records):
    """Coefficients per family and figure, fitted on sweep ``records`` (failed builds are
    left out)."""
    by_family = {}
    for record in records:
        if "error" in record:
            continue
        config = _config_of(record)
        family = record["family"]
        by_family.setdefault(family, []).append(
            (features(config, family), measured_figures(record)))
    coefficients = {}
    for family, rows in by_family.items():
        coefficients[family] = {}
        for figure in FEATURES:
            usable = [row for row in rows if figure in row[1]]
            # As many runs as coefficients: the full formula (an exact fit; its error is
            # measured on held-out runs); fewer: the smaller one.
            names = FEATURES[figure] if len(usable) >= len(FEATURES[figure]) \
                else SMALL_FEATURES[figure]
            if usable:
                coefficients[family][figure] = fit_figure(usable, figure, names[:len(usable)])
    return coefficients


def _config_of(record):
    from contract.config import ArrayConfig, ConvEngineConfig

    config = dict(record["config"])
    return ConvEngineConfig(array=ArrayConfig(**config.pop("array")), **config)


def board_builds(path=BOARD_BUILDS_PATH):
    """The recorded board builds (``tessera/explore/board_builds.json``), as sweep records."""
    return json.loads(Path(path).read_text())["builds"]


def measured_build(board, config=None, path=BOARD_BUILDS_PATH):
    """The latest recorded build of ``config`` (default: the board's preset) on ``board``.

    Raises
    ------
    ModelError
        No build of that configuration on that board is recorded.
    """
    from hw.bitstream import default_config

    config = default_config(board) if config is None else config
    builds = [b for b in board_builds(path)
              if _build_key(b) == (board, dataclasses.replace(config, clock_mhz=None))]
    if not builds:
        raise ModelError(f"{path} records no build of {config.name} on {board}; add one "
                         f"from `make bitstream BOARD={board}`'s report.json")
    return max(builds, key=lambda b: b["date"])


def fit_records(sweep_records, builds=None):
    """The records the model is fitted on: the board ``builds`` (default: the recorded
    ones) without the resident block, and the sweep records of any other board and
    configuration."""
    builds = board_builds() if builds is None else builds
    recorded = {_build_key(b) for b in builds}
    # Builds with the resident block are left out: the features have no term for its
    # player's logic, so they would skew the LUT, FF and clock fits of every engine.
    return [r for r in sweep_records if "error" in r or _build_key(r) not in recorded] \
        + [b for b in builds if not _config_of(b).resident]


def _build_key(record):
    """What a build measured: the board and the configuration (whatever clock it asked)."""
    return record["board"], dataclasses.replace(_config_of(record), clock_mhz=None)


def predict_with(coefficients, config, family):
    """Predicted ``{lut, ff, dsp, ebr, fmax_mhz}`` of ``config`` from ``coefficients``
    (``fmax_mhz`` None when the family has no fitted clock period)."""
    if family not in coefficients:
        raise ModelError(f"the resource model has no coefficients for {family!r} (fitted: "
                         f"{', '.join(sorted(coefficients)) or 'none'}); run `make sweep` "
                         f"with a board of that family, then "
                         f"`python -m tessera.explore.resource_model --fit`")
    f = features(config, family)
    out = {}
    for figure, coef in coefficients[family].items():
        out[figure] = sum(value * f[name] for name, value in coef.items())
    prediction = {k: max(0, round(out[k])) for k in ("lut", "ff", "dsp", "ebr") if k in out}
    # None when no full build of the family was fitted (pack-only runs, or builds that
    # did not fit their device): resources can still be judged, a clock cannot.
    prediction["fmax_mhz"] = round(1e3 / out["period_ns"], 1) if "period_ns" in out else None
    return prediction


def relative_errors(coefficients, records):
    """Per held-out record: ``{figure: (predicted - measured) / measured}``."""
    errors = []
    for record in records:
        config, measured = _config_of(record), measured_figures(record)
        predicted = predict_with(coefficients, config, record["family"])
        fmax = predicted.pop("fmax_mhz", None)
        if fmax:
            predicted["period_ns"] = 1e3 / fmax
        errors.append({
            "label": record["label"],
            **{k: round((predicted[k] - v) / v, 4) for k, v in measured.items()
               if k in predicted and v},
        })
    return errors


class ResourceModel:
    """The fitted model (coefficients from ``tessera/explore/resource_model.json`` by default).

    Parameters
    ----------
    document : dict, optional
        A fitted document (what :func:`fit_document` returns); default the committed one.
    """

    def __init__(self, document=None):
        if document is None:
            if not MODEL_PATH.exists():
                raise ModelError(f"{MODEL_PATH} is missing; run `make sweep` and "
                                 f"`python -m tessera.explore.resource_model --fit`")
            document = json.loads(MODEL_PATH.read_text())
        self.document = document
        self.coefficients = document["coefficients"]

    def predict(self, config, family):
        """Predicted ``{lut, ff, dsp, ebr, fmax_mhz}`` of ``config`` on ``family``."""
        return predict_with(self.coefficients, config, family)


def board_limits(board):
    """``{"family", "device", "limits": {lut, ff, dsp, ebr}}`` of a known board."""
    from hw.bitstream import KNOWN_BOARDS

    if board not in KNOWN_BOARDS:
        raise ValueError(f"unknown board {board!r}; known boards: "
                         f"{', '.join(sorted(KNOWN_BOARDS))}")
    platform = KNOWN_BOARDS[board]()
    return {"board": board, "family": platform.family, "device": platform.device,
            "limits": DEVICE_LIMITS[platform.device]}


def fits(prediction, board_info, cap=None):
    """The resources ``prediction`` exceeds on the board: ``[]`` when it fits, else
    ``["dsp 180 > 156", ...]``. ``cap``: the family's (:data:`FAMILY_CAPS`, else
    :data:`UTILIZATION_CAP`)."""
    if cap is None:
        cap = FAMILY_CAPS.get(board_info.get("family"), UTILIZATION_CAP)
    over = []
    for name, available in board_info["limits"].items():
        if name in prediction and prediction[name] > cap[name] * available:
            over.append(f"{name} {prediction[name]} > {cap[name] * available:g}"
                        + ("" if cap[name] == 1 else f" ({cap[name]:.0%} of {available})"))
    return over


def fits_structurally(config, board_info):
    """Whether the array's own multipliers fit the device (the sweep's cheap pre-check,
    which needs no fitted model)."""
    return config.rows * config.cols <= board_info["limits"]["dsp"]


def fit_document(records, held_out=()):
    """Fit on every good record; also fit without the ``held_out`` labels and report the
    relative error on them (the model's measured accuracy)."""
    good = [r for r in records if "error" not in r]
    document = {
        "about": "tessera/explore/resource_model.py: linear resource and clock-period model of the "
                 "whole accelerator's board build, fitted by least squares on the runs below",
        "features": {k: list(v) for k, v in FEATURES.items()},
        "coefficients": fit(good),
        "runs": [{"label": r["label"], "board": r["board"], "family": r["family"],
                  "config": r["config"], "fmax_mhz": r["fmax_mhz"],
                  "clock_mhz": r.get("pll_clock_mhz", r.get("clock_mhz")),
                  "measured": {k: round(v, 3) for k, v in measured_figures(r).items()}}
                 for r in good],
    }
    # Leave-one-out: each run predicted by the model fitted on the others of its family.
    loo = []
    for index, run in enumerate(good):
        others = [r for i, r in enumerate(good) if i != index and r["family"] == run["family"]]
        coefficients = fit(others)
        if len(others) >= 3 and run["family"] in coefficients:  # else nothing to learn from
            loo.extend(relative_errors(coefficients, [run]))
    document["leave_one_out"] = loo
    held = [r for r in good if r["label"] in held_out]
    train = [r for r in good if r["label"] not in held_out]
    if held:
        coefficients = fit(train)
        document["held_out"] = {
            "fitted_on": [r["label"] for r in train],
            "errors": relative_errors(coefficients,
                                      [r for r in held if r["family"] in coefficients]),
        }
    return document


def merge_families(old, new, families):
    """``old`` (a model document) with the coefficients, runs and leave-one-out errors of
    ``families`` taken from ``new``: a refit of one family from its own builds (a machine
    that has not built the others keeps what they were fitted on)."""
    label_family = {run["label"]: run["family"] for run in old["runs"] + new["runs"]}
    merged = dict(old)
    merged["coefficients"] = {**{f: c for f, c in old["coefficients"].items()
                                 if f not in families},
                              **{f: c for f, c in new["coefficients"].items() if f in families}}
    merged["runs"] = ([r for r in old["runs"] if r["family"] not in families]
                      + [r for r in new["runs"] if r["family"] in families])
    merged["leave_one_out"] = (
        [e for e in old.get("leave_one_out", []) if label_family.get(e["label"]) not in families]
        + [e for e in new.get("leave_one_out", []) if label_family.get(e["label"]) in families])
    if "held_out" in new:  # the refit's own, or the old one's stays
        merged["held_out"] = new["held_out"]
    return merged


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit from build/sweep results")
    parser.add_argument("--hold-out", default="",
                        help="comma-separated run labels to hold out when measuring error")
    parser.add_argument("--families", default="",
                        help="refit only these families (comma-separated, e.g. iCE40); the "
                             "others keep their coefficients and runs from the model file")
    args = parser.parse_args(argv)
    if args.fit:
        records = fit_records([json.loads(p.read_text())
                               for p in sorted(SWEEP_BUILD.glob(f"*/{RESULT_NAME}"))])
        held = [s.strip() for s in args.hold_out.split(",") if s.strip()]
        families = {s.strip() for s in args.families.split(",") if s.strip()}
        if families:
            records = [r for r in records if r.get("family") in families]
            document = merge_families(json.loads(MODEL_PATH.read_text()),
                                      fit_document(records, held), families)
        else:
            document = fit_document(records, held)
        MODEL_PATH.write_text(json.dumps(document, indent=1) + "\n")
        print(json.dumps(document.get("held_out", {}), indent=1))
        print(f"wrote {MODEL_PATH} from {len(document['runs'])} runs")


if __name__ == "__main__":
    main()
