"""Energy ESTIMATE per inference from the energy twin's switching activity (docs/energy.md).

    E = sum over blocks of  register toggles x register_toggle_pj
                          + register bits x cycles x clock_pj_per_register_cycle
                          + block-RAM primitive accesses x ebr_access_pj
                          + (array only) MACs issued x dsp_mac_pj
        + static_w x cycles / clock

Every figure this module produces is an ESTIMATE: no open power model of ECP5 or iCE40
exists, the default coefficients are order-of-magnitude assumptions (their reasoning is in
``tessera/energy/energy_coefficients.json`` and ``docs/energy.md``), and a user with a board and a
power meter replaces them with :func:`calibrate`. The arithmetic here is plain Python (no
simulator), so it is tested on fixed counts.
"""

import json
import math
from pathlib import Path

#: The shipped coefficients (uncalibrated, labelled ESTIMATE).
COEFFICIENTS = Path(__file__).resolve().parent / "energy_coefficients.json"
LABEL = "ESTIMATE"
#: Fields every device entry must have, and what each means.
DEVICE_FIELDS = {
    "family": "FPGA family (ecp5 or ice40)",
    "core_voltage_v": "core supply the per-event energies assume",
    "register_toggle_pj": "pJ per register bit transition, with the logic and routing it drives",
    "clock_pj_per_register_cycle": "pJ per register bit per clock cycle (clock tree)",
    "dsp_mac_pj": "pJ per multiply-accumulate in a DSP block",
    "ebr_access_pj": "pJ per read or write of one block-RAM primitive",
    "static_w": "W drawn by the configured device whatever it does (leakage, bias)",
    "ebr_modes": "block-RAM (depth, width) configurations: how many primitives an access opens",
}
NUMERIC_FIELDS = ("core_voltage_v", "register_toggle_pj", "clock_pj_per_register_cycle",
                  "dsp_mac_pj", "ebr_access_pj", "static_w")
#: Coefficients :func:`calibrate` scales together (busy minus idle power fixes their sum).
DYNAMIC_FIELDS = ("register_toggle_pj", "dsp_mac_pj", "ebr_access_pj")


class EnergyModelError(ValueError):
    """Bad coefficients, activity or measurements; the message names the file and field."""


def load_coefficients(path=COEFFICIENTS):
    """The coefficients document at ``path``, checked: every board names a device, every
    device has every field of :data:`DEVICE_FIELDS` with a sensible value."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise EnergyModelError(f"{path}: no such coefficients file") from None
    except json.JSONDecodeError as error:
        raise EnergyModelError(f"{path}: not JSON ({error})") from None
    check_coefficients(document, path)
    return document


def check_coefficients(document, where="coefficients"):
    """Raise :class:`EnergyModelError` naming ``where`` and the field unless ``document``
    is a valid coefficients document."""
    if not isinstance(document, dict):
        raise EnergyModelError(f"{where}: expected a JSON object, got {type(document).__name__}")
    for key in ("boards", "devices"):
        if not isinstance(document.get(key), dict) or not document[key]:
            raise EnergyModelError(f"{where}: field {key!r} must be a non-empty object")
    for board, device in document["boards"].items():
        if device not in document["devices"]:
            raise EnergyModelError(f"{where}: boards.{board} names device {device!r}, which "
                                   f"is not under 'devices' ({', '.join(document['devices'])})")
    for name, device in document["devices"].items():
        if not isinstance(device, dict):
            raise EnergyModelError(f"{where}: devices.{name} must be an object")
        for field in DEVICE_FIELDS:
            if field not in device:
                raise EnergyModelError(f"{where}: devices.{name}.{field} is missing "
                                       f"({DEVICE_FIELDS[field]})")
        for field in NUMERIC_FIELDS:
            value = device[field]
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise EnergyModelError(f"{where}: devices.{name}.{field} must be a number "
                                       f">= 0, not {value!r}")
        modes = device["ebr_modes"]
        if not isinstance(modes, list) or not modes or not all(
                isinstance(m, list) and len(m) == 2 and all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in m)
                for m in modes):
            raise EnergyModelError(f"{where}: devices.{name}.ebr_modes must be a list of "
                                   f"[depth, width] pairs of positive integers, not {modes!r}")


def device_for(document, board):
    """``(device name, coefficients)`` of ``board``; an unknown board's error lists them."""
    if board not in document["boards"]:
        raise EnergyModelError(f"unknown board {board!r}; boards with energy coefficients: "
                               f"{', '.join(sorted(document['boards']))}")
    name = document["boards"][board]
    return name, document["devices"][name]


def ebr_primitives(width, depth, modes):
    """Block-RAM primitives one access to a ``width`` x ``depth`` memory opens: the
    narrowest mode deep enough (else the deepest: a cascade in depth opens one row),
    one primitive per slice of the word."""
    deep_enough = [mode for mode in modes if mode[0] >= depth]
    _, mode_width = min(deep_enough) if deep_enough else max(modes)
    return math.ceil(width / mode_width)


def _check_activity(activity):
    for key in ("cycles", "toggles", "register_bits", "memories", "macs"):
        if key not in activity:
            raise EnergyModelError(f"activity: field {key!r} is missing")
    if not isinstance(activity["cycles"], int) or activity["cycles"] <= 0:
        raise EnergyModelError(f"activity: cycles must be a positive integer, "
                               f"not {activity['cycles']!r}")
    for key in ("toggles", "register_bits"):
        for block, count in activity[key].items():
            if not isinstance(count, int) or count < 0:
                raise EnergyModelError(f"activity: {key}.{block} must be a count >= 0, "
                                       f"not {count!r}")


def estimate(activity, device, clock_hz):
    """Energy of the run ``activity`` describes on ``device`` at ``clock_hz``.

    Parameters
    ----------
    activity : dict
        ``twin.energy.Activity.as_dict()`` plus ``macs`` (array MACs issued).
    device : dict
        One entry of the coefficients' ``devices``.
    clock_hz : float
        The build's design clock.

    Returns
    -------
    dict
        ``blocks``: joules per block by kind (fabric, clock, ebr, dsp); ``dynamic_j``,
        ``clock_j``, ``static_j``, ``total_j``, ``seconds``, all labelled ESTIMATE.
    """
    _check_activity(activity)
    if isinstance(clock_hz, bool) or not isinstance(clock_hz, (int, float)) or clock_hz <= 0:
        raise EnergyModelError(f"clock_hz must be a positive number, not {clock_hz!r}")
    pj = 1e-12
    cycles = activity["cycles"]
    blocks = {}
    for block in activity["toggles"]:
        blocks[block] = {
            "fabric_j": activity["toggles"][block] * device["register_toggle_pj"] * pj,
            "clock_j": activity["register_bits"].get(block, 0) * cycles
            * device["clock_pj_per_register_cycle"] * pj,
            "ebr_j": 0.0, "dsp_j": 0.0}
    for memory in activity["memories"]:
        opened = ebr_primitives(memory["width"], memory["depth"], device["ebr_modes"])
        entry = blocks.setdefault(memory["block"], {"fabric_j": 0.0, "clock_j": 0.0,
                                                    "ebr_j": 0.0, "dsp_j": 0.0})
        entry["ebr_j"] += (memory["reads"] + memory["writes"]) * opened \
            * device["ebr_access_pj"] * pj
    array = blocks.setdefault("systolic_array", {"fabric_j": 0.0, "clock_j": 0.0,
                                                 "ebr_j": 0.0, "dsp_j": 0.0})
    array["dsp_j"] = activity["macs"] * device["dsp_mac_pj"] * pj
    for entry in blocks.values():
        entry["total_j"] = sum(entry.values())
    seconds = cycles / clock_hz
    dynamic = sum(e["fabric_j"] + e["ebr_j"] + e["dsp_j"] for e in blocks.values())
    clock = sum(e["clock_j"] for e in blocks.values())
    static = device["static_w"] * seconds
    return {"label": LABEL, "blocks": blocks, "dynamic_j": dynamic, "clock_j": clock,
            "static_j": static, "total_j": dynamic + clock + static, "seconds": seconds}


def summary(energy, ops, inferences=1):
    """nJ per inference, average W and GOP/s/W of an :func:`estimate` covering
    ``inferences`` inferences and ``ops`` operations (2 per MAC)."""
    if energy["total_j"] <= 0:
        raise EnergyModelError("the estimate's energy is zero: nothing to divide by")
    return {"label": LABEL,
            "nj_per_inference": energy["total_j"] * 1e9 / inferences,
            "average_w": energy["total_j"] / energy["seconds"],
            "gops": ops / energy["seconds"] / 1e9,
            "gops_per_w": ops / energy["total_j"] / 1e9}


def calibrate(device, activity, clock_hz, *, idle_w, busy_w):
    """Coefficients fitted to two power-meter readings of a board at ``clock_hz``.

    ``idle_w``: the configured board with its clock running and no work; ``busy_w``: the
    same board running the workload ``activity`` describes back to back. The idle reading
    fixes ``static_w`` (idle minus the model's clock-tree power); busy minus idle, times the
    workload's duration, is its dynamic energy, which fixes one common scale for
    :data:`DYNAMIC_FIELDS` (two readings cannot separate them: their ratios are kept; more
    workloads of different mixes would be needed for that). Returns a new device entry with
    a ``calibration`` record; the input is not changed.
    """
    for name, value in (("idle_w", idle_w), ("busy_w", busy_w)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise EnergyModelError(f"{name} must be a positive number of watts, not {value!r}")
    if busy_w <= idle_w:
        raise EnergyModelError(f"busy_w ({busy_w} W) must exceed idle_w ({idle_w} W): the "
                               "meter saw no work; run inferences back to back while reading")
    energy = estimate(activity, device, clock_hz)
    clock_w = energy["clock_j"] / energy["seconds"]
    if clock_w >= idle_w:
        raise EnergyModelError(
            f"the model's clock-tree power ({clock_w:.4g} W) is not below the measured idle "
            f"power ({idle_w} W); lower clock_pj_per_register_cycle, or check that the idle "
            "reading is of the core supply at this clock")
    if energy["dynamic_j"] <= 0:
        raise EnergyModelError("the activity has no dynamic energy to scale")
    measured_dynamic_j = (busy_w - idle_w) * energy["seconds"]
    scale = measured_dynamic_j / energy["dynamic_j"]
    fitted = dict(device)
    for field in DYNAMIC_FIELDS:
        fitted[field] = device[field] * scale
    fitted["static_w"] = idle_w - clock_w
    fitted["calibration"] = {"idle_w": idle_w, "busy_w": busy_w, "clock_hz": clock_hz,
                             "cycles": activity["cycles"], "dynamic_scale": scale}
    return fitted


def dynamic_events(activity, device):
    """``(register toggles, MACs, block-RAM primitive accesses)`` of ``activity``: what the
    three dynamic coefficients multiply."""
    _check_activity(activity)
    ebr = sum((m["reads"] + m["writes"]) * ebr_primitives(m["width"], m["depth"],
                                                          device["ebr_modes"])
              for m in activity["memories"])
    return sum(activity["toggles"].values()), activity["macs"], ebr


def calibrate_many(device, clock_hz, *, idle_w, workloads):
    """Coefficients fitted to an idle reading and the busy readings of several workloads of
    different mixes (``workloads``: ``(activity, busy_w)`` pairs, at least three), which,
    unlike :func:`calibrate`, separates :data:`DYNAMIC_FIELDS`: a least-squares fit of
    ``busy_w - idle_w = (toggles x register_toggle_pj + MACs x dsp_mac_pj + EBR accesses x
    ebr_access_pj) / duration``. A fit that needs a negative coefficient is refused (the
    readings or the workloads do not fit the model); static power is set as in
    :func:`calibrate`.
    """
    import numpy as np

    if len(workloads) < len(DYNAMIC_FIELDS):
        raise EnergyModelError(f"calibrate_many needs at least {len(DYNAMIC_FIELDS)} "
                               f"workloads, got {len(workloads)}; with one use calibrate")
    rows, rhs, clock_w = [], [], None
    for activity, busy_w in workloads:
        # calibrate() checks the readings and gives the clock-tree power they leave over.
        clock_w = idle_w - calibrate(device, activity, clock_hz, idle_w=idle_w,
                                     busy_w=busy_w)["static_w"]
        seconds = activity["cycles"] / clock_hz
        rows.append([count * 1e-12 / seconds for count in dynamic_events(activity, device)])
        rhs.append(busy_w - idle_w)
    matrix = np.array(rows)
    if np.linalg.matrix_rank(matrix) < len(DYNAMIC_FIELDS):
        raise EnergyModelError("the workloads do not separate the coefficients (their mixes "
                               "of toggles, MACs and block-RAM accesses are proportional); "
                               "add a MAC-heavy and a data-moving workload")
    solution, *_ = np.linalg.lstsq(matrix, np.array(rhs), rcond=None)
    for field, value in zip(DYNAMIC_FIELDS, solution, strict=True):
        if value < 0:
            raise EnergyModelError(f"the fit gives a negative {field} ({value:.3g} pJ): the "
                                   "readings do not fit the model; check that every busy "
                                   "reading ran its workload back to back at the same clock")
    fitted = dict(device)
    fitted.update({field: float(value) for field, value in
                   zip(DYNAMIC_FIELDS, solution, strict=True)})
    fitted["static_w"] = idle_w - clock_w
    residual = matrix @ solution - np.array(rhs)
    fitted["calibration"] = {"idle_w": idle_w, "busy_w": [w for _, w in workloads],
                             "clock_hz": clock_hz, "workloads": len(workloads),
                             "rms_residual_w": float(np.sqrt(np.mean(residual ** 2)))}
    return fitted


def predicted_power(device, activity, clock_hz):
    """``(idle_w, busy_w)`` the model predicts for ``activity`` run back to back: what a
    power meter would read if the coefficients were right (the inverse of
    :func:`calibrate`)."""
    energy = estimate(activity, device, clock_hz)
    idle = device["static_w"] + energy["clock_j"] / energy["seconds"]
    return idle, idle + energy["dynamic_j"] / energy["seconds"]


def write_calibrated(path, board, fitted, out=None):
    """Rewrite the coefficients file ``path`` (or write ``out``) with ``board``'s device
    replaced by ``fitted``; returns the path written."""
    document = load_coefficients(path)
    name, _ = device_for(document, board)
    document["devices"][name] = fitted
    check_coefficients(document, out or path)
    target = Path(out or path)
    target.write_text(json.dumps(document, indent=2) + "\n")
    return target
