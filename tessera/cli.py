"""The `tessera` command line: the programs behind the make targets, each a thin layer
over the packages."""

import argparse
import sys

from tessera.commands import checks, demo, energy, hardware, run, serve
from tessera.commands.common import fail, print_error


def build_parser():
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # The order of `tessera --help`.
    hardware.add_commands(sub)  # sim, verilog, bitstream
    checks.add_commands(sub)  # bench, soak
    demo.add_commands(sub)  # demo, demo-array
    run.add_commands(sub)  # run, run-dataset, quantize, zoo
    serve.add_commands(sub)  # serve, loadtest
    energy.add_commands(sub)  # energy
    from tessera.build import add_commands  # build, sweep (docs/build.md)

    add_commands(sub)
    from tessera.flash import add_command as add_flash_command  # flash (docs/boards.md)

    add_flash_command(sub)
    return parser


def main(argv=None):
    from contract.config_file import ConfigFileError
    from hw.toolchain import ToolchainError, apply_tool_env

    args = build_parser().parse_args(argv)
    try:
        apply_tool_env()
        return args.func(args)
    except ConfigFileError as error:  # one line naming the file, the field and the range
        return fail(error)
    except (ValueError, ToolchainError) as error:
        print_error(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
