"""`tessera energy`: the estimate of the energy per inference from the energy twin."""


from rich.table import Table

from tessera.commands.common import (
    fail,
    int_from,
)
from tessera.console import console


def cmd_energy(args):
    from tessera.energy.estimate import energy_of_model
    from tessera.energy.model import COEFFICIENTS, EnergyModelError

    calibrate = None
    if (args.idle_w is None) != (args.busy_w is None):
        return fail("--idle-w and --busy-w go together (docs/energy.md: calibration)")
    if args.idle_w is not None:
        calibrate = (args.idle_w, args.busy_w)
    try:
        result = energy_of_model(args.model, args.board, batch=args.batch, seed=args.seed,
                                 coefficients=args.coefficients or COEFFICIENTS,
                                 clock_mhz=args.clock_mhz, calibrate=calibrate,
                                 write=args.write, log=console.print)
    except EnergyModelError as error:
        return fail(error)
    table = Table(title=f"ESTIMATE: energy of {result['model']} on {result['board']} "
                        f"({result['device']}, {result['clock_mhz']:g} MHz, "
                        f"{'calibrated' if result['calibrated'] else 'uncalibrated'} "
                        "coefficients)", title_justify="left")
    for column in ("block", "register toggles", "fabric nJ", "clock nJ", "EBR nJ", "DSP nJ",
                   "total nJ"):
        table.add_column(column, justify="left" if column == "block" else "right")
    per = 1e9 / result["batch"]
    for block, entry in result["energy"]["blocks"].items():
        table.add_row(block, f"{result['activity']['toggles'].get(block, 0):,}",
                      *(f"{entry[k] * per:,.1f}" for k in ("fabric_j", "clock_j", "ebr_j",
                                                            "dsp_j", "total_j")))
    table.add_row("static", "", "", "", "", "",
                  f"{result['energy']['static_j'] * per:,.1f}")
    console.print(table)
    if result["resources"]:
        console.print("resources (build report): " + ", ".join(
            f"{name} {used}/{available}" for name, (used, available)
            in sorted(result["resources"].items())))
    else:
        console.print(f"resources: no build report for {result['board']} "
                      f"(make bitstream BOARD={result['board']})")
    if result["not_counted"]:
        console.print("not counted (ran on the host): " + ", ".join(result["not_counted"]))
    console.print(f"ESTIMATE: {result['nj_per_inference']:,.0f} nJ/inference, "
                  f"{result['average_w'] * 1e3:,.1f} mW while busy, "
                  f"{result['gops_per_w']:,.1f} GOP/s/W ({result['gops']:,.2f} GOP/s, "
                  f"{result['cycles'] / result['batch']:,.0f} cycles per inference); "
                  f"coefficients {result['coefficients']}")
    if args.json:
        import json

        with open(args.json, "w") as sink:
            json.dump(result, sink, indent=2)
        console.print(f"wrote {args.json}")
    return 0


def add_commands(sub):
    """Add ``energy`` to the subcommands ``sub``."""
    p = sub.add_parser("energy", help="ESTIMATE of the energy per inference from the energy "
                                      "twin's switching activity (docs/energy.md)")
    p.add_argument("model", help="QDQ int8 ONNX model")
    p.add_argument("--board", default="ulx3s-85f",
                   help="board whose default configuration and clock are used "
                        "(default %(default)s)")
    p.add_argument("--batch", type=int_from(1, 1024), default=1,
                   help="images per measured run (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--clock-mhz", type=float, help="design clock (default: the board's)")
    p.add_argument("--coefficients", help="coefficients JSON (default: the shipped, "
                                          "uncalibrated tessera/energy/energy_coefficients.json)")
    p.add_argument("--idle-w", type=float, help="calibrate: measured watts, board idle")
    p.add_argument("--busy-w", type=float,
                   help="calibrate: measured watts, board running MODEL back to back")
    p.add_argument("--write", help="calibrate: write the fitted coefficients here "
                                   "(default: rewrite --coefficients)")
    p.add_argument("--json", help="also write the whole report to this JSON file")
    p.set_defaults(func=cmd_energy)
