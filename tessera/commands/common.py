"""What the command groups share: the ``--config``, ``--rows/--cols`` and ``--ray``
options, the configuration they name, and the one-line error forms."""

import argparse
import sys

from rich.text import Text

from tessera.console import console


def add_config_option(parser, what="the hardware to build or simulate",
                      default="the 'default' preset"):
    parser.add_argument("--config", metavar="FILE|PRESET",
                        help=f"{what}: a .toml/.json configuration file or a preset (default, "
                             f"tiny, ulx3s-85f, ...; docs/config.md); default: {default}")


def engine_config(args):
    """The ``ConvEngineConfig`` ``--config`` names (the default preset when none), with the
    command's ``--rows``/``--cols``, where it has them, overriding the array's size."""
    import dataclasses

    from contract.config import ArrayConfig
    from contract.config_file import DEFAULT_PRESET, load_config

    options = vars(args)
    config = load_config(options.get("config") or DEFAULT_PRESET)
    rows, cols = options.get("rows"), options.get("cols")
    if rows is not None or cols is not None:
        array = ArrayConfig(rows=config.rows if rows is None else rows,
                            cols=config.cols if cols is None else cols,
                            acc_width=config.acc_width, pump=config.array.pump)
        config = dataclasses.replace(config, array=array)
    return config


def array_config(args):
    return engine_config(args).array


def int_from(low, high):
    """An argparse type: an integer in ``[low, high]``; anything else is a usage error (exit
    2) naming the option and the range."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high}, not {text!r}")
        return value
    return parse


def add_array_options(parser):
    # No default here: the size comes from --config (or the default preset) unless given.
    parser.add_argument("--rows", type=int, help="array rows R (default: the configuration's)")
    parser.add_argument("--cols", type=int, help="array columns C (default: the configuration's)")


def print_error(error, prefix="error: "):
    """An error in its own words, no Python traceback (on this module's ``console``, which
    tests may replace)."""
    # Text, not markup: messages hold "[...]" (lists, shapes, TOML tables such as
    # [tenants.a]) that rich's markup would silently eat.
    console.print(Text.assemble((prefix, "red"), str(error)))


def one_line(error):
    return " ".join(str(error).split())


def fail(error):
    # Plain stderr, not rich: messages hold "[1, 8, 8]" (markup) and must not wrap.
    print(f"error: {one_line(error)}", file=sys.stderr)
    return 2


def add_ray_argument(parser, what):
    from tessera.ray_cluster import LOCAL

    parser.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS",
                        help=f"run {what}: alone, on a local Ray (127.0.0.1 only); with "
                             f"HOST:PORT, on that Ray cluster (docs/ray.md; needs the [ray] "
                             f"extra)")
