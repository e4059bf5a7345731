"""``tessera flash``: a built bitstream onto its board (``make flash``, docs/boards.md)."""


def cmd_flash(args):
    from hw.flash import PROGRAMMERS, FlashError, bitstream_path, flash
    from tessera.console import console, print_error

    if args.board not in PROGRAMMERS:
        print_error(f"unknown board {args.board!r}; boards that can be flashed: "
                     + ", ".join(sorted(PROGRAMMERS)))
        return 2
    programmer = PROGRAMMERS[args.board]
    where = "the configuration flash" if args.flash else "SRAM (lost at power-off)"
    console.print(f"{args.board}: {bitstream_path(args.board, args.build)} into {where}, "
                  f"openFPGALoader -b {programmer.loader_board} over the {programmer.cable} "
                  f"(USB {programmer.usb_id})", highlight=False)
    try:
        flash(args.board, to_flash=args.flash, build_root=args.build)
    except FlashError as error:
        print_error(error, prefix="flash failed: ")
        return 1
    console.print(f"{args.board}: loaded", highlight=False)
    return 0


def add_command(sub):
    """``tessera flash`` (added to the CLI's subparsers)."""
    p = sub.add_parser("flash", help="load a board's bitstream from `make bitstream` into its "
                                     "FPGA, or its flash (docs/boards.md)")
    p.add_argument("--board", required=True,
                   help="as for `tessera bitstream`: ulx3s-25f/45f/85f or icebreaker")
    p.add_argument("--flash", action="store_true",
                   help="write the configuration flash (kept at power-off) instead of SRAM")
    p.add_argument("--build", default="build",
                   help="the folder `make bitstream` built into (default %(default)s)")
    p.set_defaults(func=cmd_flash)
