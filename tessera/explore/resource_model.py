"""Resource and fmax model of the whole accelerator on a board, fitted on real builds.

Predicts, for a :class:`~contract.config.ConvEngineConfig` on an FPGA family (and device),
the LUTs, flip-flops, multipliers (DSP) and block RAMs (EBR) that nextpnr reports for the
board build (:func:`hw.bitstream.build_bitstream`: the accelerator behind its UART bridge
and PLL), and the fmax nextpnr achieves.

- ``dsp`` and ``ebr`` are counted, not fitted: one multiplier per PE plus the
  post-processing bank's (:func:`hw.bitstream.registry.multipliers_needed`), and the block
  RAMs of every memory of the design from its size
  (:func:`hw.bitstream.registry.block_rams_needed`). Both are exact on every recorded build.
- ``lut``, ``ff`` and the clock period are linear in a few features of the configuration
  (:data:`FEATURES`, per family), fitted by least squares; ``ff`` also counts the resident
  data memory's bank registers (:data:`COUNTED`: their number is known, so it is added,
  not fitted).
- ECP5: ``lut``, ``ff`` = ``a + b·R·C + c·C + d·resident``: per PE (accumulator, skew), per
  column (the post-processing lanes, the result path), the fixed part (CSRs, sequencer,
  bridge, pool, add unit), and the resident block's player (its counters and segment
  registers do not grow with its memories). Period = ``a + c·resident + d·die·resident``
  with ``die`` the side of the device's logic (sqrt of its LUTs, in hundreds): without the
  block the routed builds' critical paths are local control paths, the same on every die;
  the resident block's block RAMs spread the design over the die, so its paths grow with
  the die.
- iCE40 (the lean engine): ``lut`` = ``a + b·(R + C)``; one routed build, so one period.

The runs are the board builds recorded in ``tessera/explore/board_builds.json``
(``make bitstream`` builds, the latest per board and configuration: the one record of
their figures), the sweep's builds of any other board and configuration
(``tessera/explore/sweep.py``, ``build/sweep``), and the runs the committed model was
fitted on that neither of those has (``build/sweep`` is not kept in the repository: a
refit on a machine without it keeps them). The model's accuracy is measured by leave one
out (each run predicted by the model fitted on the other runs of its family), recorded
with the coefficients in ``tessera/explore/resource_model.json`` and quoted in
``docs/build.md``.

Usage: ``python -m tessera.explore.resource_model --fit`` refits.
"""

import dataclasses
import json
import math
from pathlib import Path

from hw.bitstream.registry import RAM_SHAPES, block_rams_needed, multipliers_needed

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

#: Fitted figures and their features (names of :func:`features` entries), per family, most
#: telling first: with fewer runs than features a fit keeps the first ones.
FEATURES = {
    "ecp5": {"lut": ("one", "pes", "cols", "resident"),
             "ff": ("one", "pes", "cols", "resident"),
             "period_ns": ("one", "resident", "resident_die")},
    "iCE40": {"lut": ("one", "edge"), "ff": ("one", "edge"), "period_ns": ("one",)},
}
#: Terms of a fitted figure whose coefficient is known (1 per counted flip-flop): taken
#: off the measured figure before the fit and added to the prediction.
COUNTED = {"ff": ("bank_registers",)}
#: The figures counted from the configuration, not fitted.
STRUCTURAL = ("dsp", "ebr")
#: What the model reports the relative error of (``fmax`` rather than the period it fits).
ERROR_FIGURES = ("lut", "ff", "dsp", "ebr", "fmax")
#: The configuration fields no fitted feature reads: a prediction for a value none of a
#: family's runs had is an extrapolation (:meth:`ResourceModel.unmeasured`).
UNFITTED_FIELDS = ("pipelined", "residual_add", "perf_counters", "csr_readback",
                   "depthwise", "add_lanes", "pump")


class ModelError(ValueError):
    """The model cannot answer (unknown family, no coefficients); says what to do."""


def die_side(device):
    """The side of ``device``'s logic array: the square root of its LUTs, in hundreds
    (LFE5U-25F 1.56, -45F 2.09, -85F 2.89)."""
    if device not in DEVICE_LIMITS:
        raise ModelError(f"device must be one of {sorted(DEVICE_LIMITS)}, not {device!r}")
    return math.sqrt(DEVICE_LIMITS[device]["lut"]) / 100


def features(config, family, device=None):
    """The model's features of ``config`` on ``family`` (a dict of floats); the die's
    (``die_side``, ``resident_die``) only with ``device``."""
    from hw.resident import data_bank_registers

    if family not in RAM_SHAPES:
        raise ModelError(f"family must be one of {sorted(RAM_SHAPES)}, not {family!r}")
    r, c = config.rows, config.cols
    resident = 1.0 if config.resident else 0.0
    out = {
        "one": 1.0,
        "pes": float(r * c),
        "edge": float(r + c),
        "cols": float(c),
        "resident": resident,
        "bank_registers": float(data_bank_registers(config.resident_words)),
    }
    if device is not None:
        die = die_side(device)
        out.update(die_side=die * math.sqrt(r * c), resident_die=die * resident)
    return out


def structural(config, family):
    """``{"dsp", "ebr"}`` counted from ``config`` on ``family`` (exact on the builds)."""
    return {"dsp": multipliers_needed(config, family),
            "ebr": block_rams_needed(config, family)["total"]}


def measured_figures(record):
    """``{figure: value}`` of a sweep record (``tessera.explore.sweep``), in the model's names."""
    names = REPORT_NAMES[record["family"]]
    figures = {key: record["resources"][name]["used"] for key, name in names.items()
               if name in record["resources"]}
    if record.get("fmax_mhz"):  # pack-only builds have resources but no fmax
        figures["period_ns"] = 1e3 / record["fmax_mhz"]
    return figures


def fit_figure(rows, figure, names):
    """Least-squares coefficients of ``figure`` over ``rows`` (``(features, figures)``),
    less its :data:`COUNTED` terms."""
    import numpy as np

    counted = COUNTED.get(figure, ())
    a = np.array([[f[n] for n in names] for f, _ in rows])
    y = np.array([m[figure] - sum(f[n] for n in counted) for f, m in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return {name: round(float(v), 6) for name, v in zip(names, coef, strict=True)}


def _device_of(record):
    return record.get("device") or board_limits(record["board"])["device"]


def fit(records):
    """Coefficients per family and fitted figure, fitted on ``records`` (sweep records;
    failed builds are left out)."""
    by_family = {}
    for record in records:
        if "error" in record:
            continue
        family = record["family"]
        if family not in FEATURES:
            raise ModelError(f"the resource model has no features for family {family!r} "
                             f"(run {record['label']!r}); known: {sorted(FEATURES)}")
        config = _config_of(record)
        by_family.setdefault(family, []).append(
            (features(config, family, _device_of(record)), measured_figures(record)))
    coefficients = {}
    for family, rows in by_family.items():
        coefficients[family] = {}
        for figure, names in FEATURES[family].items():
            usable = [row for row in rows if figure in row[1]]
            # As many runs as features: the whole formula (its error is measured by
            # leave one out); fewer: its first features.
            if usable:
                coefficients[family][figure] = fit_figure(usable, figure,
                                                          names[:len(usable)])
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
              if build_key(b) == (board, dataclasses.replace(config, clock_mhz=None))]
    if not builds:
        raise ModelError(f"{path} records no build of {config.name} on {board}; add one "
                         f"from `make bitstream BOARD={board}`'s report.json")
    return max(builds, key=lambda b: b["date"])


def run_record(run):
    """A run of a model document (``runs``) as a sweep record, to fit on again."""
    names = REPORT_NAMES[run["family"]]
    return {"label": run["label"], "board": run["board"], "family": run["family"],
            "device": run.get("device"), "config": run["config"],
            "fmax_mhz": run["fmax_mhz"], "pll_clock_mhz": run.get("clock_mhz"),
            "resources": {names[k]: {"used": v} for k, v in run["measured"].items()
                          if k in names}}


def fit_records(sweep_records, builds=None, kept=()):
    """The records the model is fitted on: the board ``builds`` (default: the recorded
    ones), the sweep records of any other board and configuration, and the ``kept``
    records (a model document's runs, :func:`run_record`) of any other still."""
    builds = board_builds() if builds is None else builds
    recorded = {build_key(b) for b in builds}
    sweep = [r for r in sweep_records if "error" in r or build_key(r) not in recorded]
    have = recorded | {build_key(r) for r in sweep if "error" not in r}
    return builds + sweep + [r for r in kept if build_key(r) not in have]


def build_key(record):
    """What a build measured: the board and the configuration (whatever clock it asked)."""
    return record["board"], dataclasses.replace(_config_of(record), clock_mhz=None)


def predict_with(coefficients, config, family, device=None):
    """Predicted ``{lut, ff, dsp, ebr, fmax_mhz}`` of ``config`` from ``coefficients``
    (``fmax_mhz`` None when the family has no fitted clock period); ``device`` is needed
    for a period that depends on the die."""
    if family not in coefficients:
        raise ModelError(f"the resource model has no coefficients for {family!r} (fitted: "
                         f"{', '.join(sorted(coefficients)) or 'none'}); run `make sweep` "
                         f"with a board of that family, then "
                         f"`python -m tessera.explore.resource_model --fit`")
    f = features(config, family, device)
    out = {}
    for figure, coef in coefficients[family].items():
        missing = [name for name in coef if name not in f]
        if missing:
            raise ModelError(f"the {figure} of {family} needs the device (for "
                             f"{', '.join(missing)}); pass device=")
        out[figure] = sum(value * f[name] for name, value in coef.items()) \
            + sum(f[name] for name in COUNTED.get(figure, ()))
    prediction = {k: max(0, round(out[k])) for k in ("lut", "ff") if k in out}
    prediction.update(structural(config, family))
    # None when no full build of the family was fitted (pack-only runs, or builds that
    # did not fit their device): resources can still be judged, a clock cannot.
    prediction["fmax_mhz"] = round(1e3 / out["period_ns"], 1) if "period_ns" in out else None
    return prediction


def relative_errors(coefficients, records):
    """Per record: ``{"label", figure: (predicted - measured) / measured}`` for the
    figures of :data:`ERROR_FIGURES` it measured (``fmax``: of the clock, not the period)."""
    errors = []
    for record in records:
        config, measured = _config_of(record), measured_figures(record)
        predicted = predict_with(coefficients, config, record["family"], _device_of(record))
        if "period_ns" in measured:
            measured["fmax"] = record["fmax_mhz"]
        predicted["fmax"] = predicted.pop("fmax_mhz")
        errors.append({
            "label": record["label"],
            **{k: round((predicted[k] - measured[k]) / measured[k], 4) for k in ERROR_FIGURES
               if k in measured and predicted.get(k) is not None and measured[k]},
        })
    return errors


def leave_one_out(records):
    """Each good record predicted by the model fitted on the other records of its family
    (those with at least three others): :func:`relative_errors` per record."""
    good = [r for r in records if "error" not in r]
    errors = []
    for index, run in enumerate(good):
        others = [r for i, r in enumerate(good) if i != index and r["family"] == run["family"]]
        coefficients = fit(others)
        if len(others) >= 3 and run["family"] in coefficients:  # else nothing to learn from
            errors.extend(relative_errors(coefficients, [run]))
    return errors


def worst_errors(errors, labels_family):
    """``{family: {figure: largest |error|}}`` over ``errors`` (:func:`relative_errors`)."""
    worst = {}
    for entry in errors:
        family = worst.setdefault(labels_family[entry["label"]], {})
        for figure in ERROR_FIGURES:
            if figure in entry:
                family[figure] = max(family.get(figure, 0.0), abs(entry[figure]))
    return worst


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

    def predict(self, config, family, device=None):
        """Predicted ``{lut, ff, dsp, ebr, fmax_mhz}`` of ``config`` on ``family``
        (``device``: the part, for the clock of a family whose clock depends on the die)."""
        return predict_with(self.coefficients, config, family, device)

    def largest_routed(self, family, device):
        """The most PEs of a routed run (one with an fmax) on ``device``, else of any
        device of ``family``; None without one. Beyond it the clock model extrapolates:
        the 85F's 16x8 placed but did not route (docs/boards.md)."""
        runs = [r for r in self.document.get("runs", [])
                if r["family"] == family and r.get("fmax_mhz")]
        on_device = [r for r in runs if r.get("device") == device] or runs
        if not on_device:
            return None
        return max(_config_of(r).rows * _config_of(r).cols for r in on_device)

    def unmeasured(self, config, family):
        """The fields of ``config`` (:data:`UNFITTED_FIELDS`) whose value none of the
        family's runs had, as ``["residual_add=False (runs: True)", ...]``: the model's
        LUT, FF and clock for them are those of the runs' value (DSP and block RAM are
        counted, so exact whatever the value)."""
        runs = [r for r in self.document.get("runs", []) if r["family"] == family]
        if not runs:
            return []
        out = []
        for name in UNFITTED_FIELDS:
            seen = {_field(_config_of(r), name) for r in runs}
            value = _field(config, name)
            if value not in seen:
                out.append(f"{name}={value} (runs: {', '.join(map(str, sorted(seen)))})")
        return out


def _field(config, name):
    """A configuration's field by name, the array's included (``pump``)."""
    return getattr(config.array, name) if name == "pump" else getattr(config, name)


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
    return config.array.multipliers <= board_info["limits"]["dsp"]


def fit_document(records, held_out=()):
    """Fit on every good record; measure the error by leave one out; with ``held_out``
    labels, also fit without them and report the error on them."""
    good = [r for r in records if "error" not in r]
    loo = leave_one_out(good)
    labels_family = {r["label"]: r["family"] for r in good}
    document = {
        "about": "tessera/explore/resource_model.py: resource and clock-period model of the "
                 "whole accelerator's board build: DSP and block RAM counted from the "
                 "configuration, LUT, FF and the period fitted by least squares on the runs "
                 "below; leave_one_out: each run predicted by the model fitted on the other "
                 "runs of its family (fmax: the error of the clock)",
        "features": {family: {k: list(v) for k, v in figures.items()}
                     for family, figures in FEATURES.items()},
        "counted": {k: list(v) for k, v in COUNTED.items()},
        "structural": list(STRUCTURAL),
        "coefficients": fit(good),
        "runs": [{"label": r["label"], "board": r["board"], "family": r["family"],
                  "device": _device_of(r), "config": r["config"], "fmax_mhz": r["fmax_mhz"],
                  "clock_mhz": r.get("pll_clock_mhz", r.get("clock_mhz")),
                  "measured": {k: round(v, 3) for k, v in measured_figures(r).items()
                               if k != "period_ns"}}
                 for r in good],
        "leave_one_out": loo,
        "leave_one_out_worst": worst_errors(loo, labels_family),
    }
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


def committed_records(path=MODEL_PATH):
    """The committed model's runs as sweep records (:func:`run_record`); none without it."""
    if not Path(path).exists():
        return []
    return [run_record(run) for run in json.loads(Path(path).read_text())["runs"]]


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true",
                        help="refit from the board builds, build/sweep results and the "
                             "committed model's other runs")
    parser.add_argument("--hold-out", default="",
                        help="comma-separated run labels to hold out when measuring error")
    args = parser.parse_args(argv)
    if args.fit:
        sweep = [json.loads(p.read_text()) for p in sorted(SWEEP_BUILD.glob(f"*/{RESULT_NAME}"))]
        records = fit_records(sweep, kept=committed_records())
        held = [s.strip() for s in args.hold_out.split(",") if s.strip()]
        document = fit_document(records, held)
        MODEL_PATH.write_text(json.dumps(document, indent=1) + "\n")
        print(json.dumps(document["leave_one_out_worst"], indent=1))
        print(f"wrote {MODEL_PATH} from {len(document['runs'])} runs")


if __name__ == "__main__":
    main()
