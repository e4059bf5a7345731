"""Reading nextpnr's ``--report`` JSON: resources used per family, fmax per clock, the
critical path, and whether the design clock met its constraint."""

# Report name -> nextpnr cell type, per FPGA family. On ECP5 every LUT4 is a TRELLIS_COMB
# cell (half of a carry-chain CCU2C counts as one too), so "LUT4" is the fabric LUT count.
RESOURCE_CELLS = {
    "ecp5": {"LUT4": "TRELLIS_COMB", "TRELLIS_FF": "TRELLIS_FF", "MULT18X18D": "MULT18X18D",
             "DP16KD": "DP16KD"},
    "iCE40": {"LC": "ICESTORM_LC", "SB_MAC16": "ICESTORM_DSP", "EBR": "ICESTORM_RAM",
              "SPRAM": "ICESTORM_SPRAM"},
}

def parse_nextpnr_report(data, family="ecp5"):
    """Resources and fmax from nextpnr's ``--report`` JSON (a dict, already loaded).

    Returns ``{"resources": {name: {"used", "available", "percent"}}, "fmax": {clock:
    {"achieved_mhz", "constraint_mhz", "met"}}}``. Resources are named as in
    :data:`RESOURCE_CELLS`; cell types the report lacks count as zero used.
    """
    if family not in RESOURCE_CELLS:
        raise ValueError(f"family must be one of {sorted(RESOURCE_CELLS)}, not {family!r}")
    utilization = data.get("utilization")
    fmax = data.get("fmax")
    if not isinstance(utilization, dict) or not isinstance(fmax, dict):
        raise ValueError("not a nextpnr report: 'utilization' and 'fmax' are missing")
    resources = {}
    for name, cell in RESOURCE_CELLS[family].items():
        entry = utilization.get(cell, {"used": 0, "available": None})
        used, available = int(entry["used"]), entry.get("available")
        resources[name] = {
            "used": used,
            "available": None if available is None else int(available),
            "percent": round(100 * used / available, 1) if available else None,
        }
    clocks = {}
    for clock, entry in sorted(fmax.items()):
        achieved = float(entry["achieved"])
        constraint = float(entry["constraint"])
        clocks[_clock_name(clock)] = {
            "net": clock,
            "achieved_mhz": round(achieved, 2),
            "constraint_mhz": round(constraint, 2),
            "met": achieved >= constraint,
        }
    return {"resources": resources, "fmax": clocks}


def _clock_name(net):
    """A readable clock name from a nextpnr global net name (``$glbnet$clk`` -> ``clk``)."""
    name = net.removeprefix("$glbnet$")
    return name.split("$", 1)[0] or net


def critical_path(data, limit=6):
    """The worst register-to-register path of each clock in nextpnr's report.

    Returns ``{clock: {total_ns, logic_ns, routing_ns, start, end, largest_steps}}`` with
    at most ``limit`` of the path's largest steps; cross-domain and I/O paths are left out.
    """
    paths = {}
    for entry in data.get("critical_paths", []):
        source, sink = entry.get("from", ""), entry.get("to", "")
        if source != sink or "<async>" in source:
            continue
        steps = [{
            "type": step.get("type"),
            "from": step.get("from", {}).get("cell"),
            "to": step.get("to", {}).get("cell"),
            "delay_ns": round(float(step.get("delay", 0.0)), 3),
        } for step in entry.get("path", [])]
        total = sum(s["delay_ns"] for s in steps)
        routing = sum(s["delay_ns"] for s in steps if s["type"] == "routing")
        paths[_clock_name(source.split()[-1])] = {
            "total_ns": round(total, 3),
            "logic_ns": round(total - routing, 3),
            "routing_ns": round(routing, 3),
            "start": steps[0]["from"] if steps else None,
            "end": steps[-1]["to"] if steps else None,
            "largest_steps": sorted(steps, key=lambda s: -s["delay_ns"])[:limit],
        }
    return paths




def flat_resources(resources):
    """``{name}_used`` / ``{name}_available`` entries, the flat form the sweep reads."""
    flat = {}
    for name, entry in resources.items():
        flat[f"{name}_used"] = entry["used"]
        flat[f"{name}_available"] = entry["available"]
    return flat


def design_clock(fmax, clock_mhz):
    """The entry of a parsed ``fmax`` dict that is the design clock: the one constrained
    closest to ``clock_mhz`` (the PLL output; the oscillator pin carries no logic)."""
    if not fmax:
        return None, None
    name = min(fmax, key=lambda c: abs(fmax[c]["constraint_mhz"] - clock_mhz))
    return name, fmax[name]


def timing_verdict(parsed, paths, clock_mhz, log_path):
    """Whether the design clock met ``clock_mhz``: ``(clock entry, fmax_mhz, failure)``,
    where ``failure`` is ``None`` or a sentence with nextpnr's fmax, the critical path and
    the log to read."""
    name, clock = design_clock(parsed["fmax"], clock_mhz)
    if clock is None:
        return None, None, (f"nextpnr reported no fmax for the design clock; "
                            f"log: {log_path}")
    fmax_mhz = clock["achieved_mhz"]
    if fmax_mhz >= clock_mhz:
        return clock, fmax_mhz, None
    path = paths.get(name)
    where = (f"{path['total_ns']:.2f} ns, {path['start']} -> {path['end']}" if path
             else "not in the report")
    return clock, fmax_mhz, (
        f"nextpnr reached {fmax_mhz:g} MHz, below the {clock_mhz:g} MHz clock; critical "
        f"path {where}; log: {log_path}")
