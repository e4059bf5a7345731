"""fmax and resources of the array on an FPGA board, from a real place and route.

Builds the bare-array board top (``hw.bitstream.build_bitstream`` with an ``ArrayConfig``)
unless ``build/<board>-array/report.json`` is fresh -- made from the same board,
configuration, build options and ``hw/`` source -- and writes ``bench/results/fmax.json``.
The target (150 MHz for the 8x8 array on the ULX3S-85F) is the achieved fmax nextpnr
reports, not the constraint it was given.

Usage: ``python -m bench.bench_fmax [--board ulx3s-85f] [--rows 8 --cols 8] [--rebuild]``
"""

import argparse
import sys

from bench.common import metric, write_results
from contract.config import ArrayConfig
from hw import bitstream
from tessera.board_report import print_summary

TARGET_MHZ = 150.0  # the project's fmax target for the 8x8 array on the ULX3S-85F


def fresh_report(board, config, build_root, **options):
    """The saved report for ``board`` if it was made from exactly these inputs, else None."""
    report = bitstream.load_report(board, build_root, array=True)
    if report is None:
        return None
    key = bitstream.inputs_key(board, config, **options)
    return report if report.get("inputs_key") == key else None


def metrics_from_report(report, *, target_mhz=TARGET_MHZ):
    """The benchmark's metric list for one ``report.json``."""
    config = report["config"]
    macs = config["rows"] * config["cols"]
    entries = []
    for clock, fmax in report["fmax"].items():
        achieved = fmax["achieved_mhz"]
        suffix = "" if len(report["fmax"]) == 1 else f"_{clock}"
        entries.append(metric(
            f"fmax{suffix}", achieved, "MHz", target=target_mhz,
            note=f"achieved by nextpnr at a {fmax['constraint_mhz']:g} MHz constraint; "
                 f"{'meets' if achieved >= target_mhz else 'misses'} the target"))
        entries.append(metric(
            f"peak_mac_rate{suffix}", round(achieved * 1e6 * macs / 1e9, 2), "GMAC/s",
            note=f"{macs} MACs per cycle at the achieved fmax ({clock})"))
    for name, used in report["resources"].items():
        note = None if used["available"] is None else \
            f"of {used['available']} ({used['percent']}%)"
        entries.append(metric(f"{name}_used", used["used"], "cells", note=note))
    times = report["wall_time_s"]
    entries.append(metric("synthesis_wall_time", times["synthesis_s"], "s"))
    entries.append(metric("place_and_route_wall_time", times["place_and_route_s"], "s"))
    return entries


def main(argv=()):
    """Build (or reuse) the board report and write ``bench/results/fmax.json``.

    ``argv`` defaults to no options: ``tessera bench`` calls every benchmark's ``main()``
    while its own arguments are still in ``sys.argv``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="ulx3s-85f", choices=sorted(bitstream.KNOWN_BOARDS))
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--build-root", default="build")
    parser.add_argument("--rebuild", action="store_true",
                        help="place and route even when a fresh report exists")
    args = parser.parse_args(argv)
    config = ArrayConfig(rows=args.rows, cols=args.cols)
    options = {"target_mhz": bitstream.DEFAULT_TARGET_MHZ, "seed": bitstream.DEFAULT_SEED,
               "tile_k": 16, "backpressure": True}

    report = None if args.rebuild else fresh_report(args.board, config, args.build_root,
                                                    **options)
    if report is None:
        report = bitstream.build_bitstream(args.board, config, args.build_root, **options)
        print_summary(report)
        reused = False
    else:
        print(f"reusing {args.build_root}/{args.board}{bitstream.ARRAY_SUFFIX}/"
              f"{bitstream.REPORT_NAME} "
              f"(inputs {report['inputs_key']})")
        print_summary(report)
        reused = True
    write_results(
        "fmax", metrics_from_report(report),
        board=report["board"], device=report["device"], config=report["config"],
        constraint_mhz=report["target_mhz"], seed=report["seed"],
        tools=report["tools"], reused_report=reused, critical_path=report["critical_path"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
