"""The one-screen summary of a board build's ``report.json`` (:mod:`hw.bitstream`), and the
progress lines of a build on a rich console: presentation, so above the hardware layer."""


def console_say(console):
    """A ``say`` callable for :func:`hw.bitstream.build_bitstream` that prints to
    ``console``."""
    def say(text):
        # Tool output may contain [brackets]: no markup, one line each.
        console.print(text, markup=False, no_wrap=True, overflow="ellipsis")
    return say


def _config_line(report):
    config = report["config"]
    if report.get("kind") == "accelerator":
        array = config["array"]
        return (f"whole accelerator, {array['rows']}x{array['cols']} array, act "
                f"{config['act_depth']} B/row, weights {config['weight_depth']} words, "
                f"{config['max_col_tiles']} column tiles")
    return f"{config['rows']}x{config['cols']} int8 array"


def print_summary(report, console=None):
    """Print a one-screen summary of a report made by :func:`build_bitstream`."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False) if console is None else console
    console.print(f"[bold]{report['board']}[/bold] ({report['device']}): "
                  f"{_config_line(report)}")
    table = Table()
    table.add_column("resource")
    table.add_column("used", justify="right")
    table.add_column("available", justify="right")
    table.add_column("%", justify="right")
    for name, entry in report["resources"].items():
        table.add_row(name, str(entry["used"]),
                      "?" if entry["available"] is None else str(entry["available"]),
                      "" if entry["percent"] is None else f"{entry['percent']:.1f}")
    console.print(table)
    if report.get("kind") == "accelerator":
        verdict = "[green]met[/green]" if report["timing_met"] else "[red]NOT met[/red]"
        pll = report["pll"]
        console.print(f"clock: target {report['target_mhz']:g} MHz, PLL makes "
                      f"{report['clock_mhz']:g} MHz from {report['board_clock_mhz']:g} MHz "
                      f"({pll['primitive']}); fmax [bold]{report['fmax_mhz']} MHz[/bold] "
                      f"({verdict})")
        array = report["config"]["array"]
        pump = array.get("pump", 1)
        if pump != 1:
            ratio = report["array_clock_mhz"] / report["clock_mhz"]
            console.print(f"array clock: {report['array_clock_mhz']:g} MHz (the PLL's second "
                          f"output, {ratio:.3g}x), fmax [bold]{report['array_fmax_mhz']} MHz"
                          f"[/bold]")
        if report.get("peak_gops") is not None:
            size = f"{array['rows']}x{array['cols']}"
            multipliers = array["rows"] * array["cols"] // pump
            macs = (f"{size} MACs at {report['array_clock_mhz']:g} MHz" if pump == 1 else
                    f"{size} PEs on {multipliers} multipliers at "
                    f"{report['array_clock_mhz']:g} MHz")
            console.print(f"peak: [bold]{report['peak_gops']:g} GOP/s[/bold] ({macs})")
        uart = report["uart"]
        console.print(f"host link: UART {uart['baud']} baud, divisor {uart['divisor']} "
                      f"({uart['baud_error_percent']}% off)")
    else:
        for clock, entry in report["fmax"].items():
            verdict = "[green]met[/green]" if entry["met"] else "[yellow]not met[/yellow]"
            console.print(f"fmax {clock}: [bold]{entry['achieved_mhz']:.1f} MHz[/bold] "
                          f"achieved, constrained to {entry['constraint_mhz']:.1f} MHz "
                          f"({verdict}); board clock {report['board_clock_mhz']:g} MHz")
    for clock, path in report.get("critical_path", {}).items():
        console.print(f"critical path ({clock}): {path['total_ns']:.2f} ns = "
                      f"{path['logic_ns']:.2f} logic + {path['routing_ns']:.2f} routing, "
                      f"{path['start']} -> {path['end']}")
    if report.get("timing_failure"):
        console.print(f"[red]timing failure:[/red] {report['timing_failure']}",
                      markup=True)
    times = report["wall_time_s"]
    console.print(f"wall time: synthesis {times['synthesis_s']:.1f} s, place and route "
                  f"{times['place_and_route_s']:.1f} s, pack {times['pack_s']:.1f} s; "
                  f"bitstream {report['bitstream']}")
    if report.get("logs"):
        console.print("logs: " + ", ".join(report["logs"].values()), markup=False)
