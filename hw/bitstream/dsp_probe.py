"""Read an ECP5 device's MULT18X18D sites from nextpnr-ecp5, to check hw.dsp_sites' tables.

``python -m hw.bitstream.dsp_probe LFE5U-85F`` synthesises a chain that uses every
multiplier of the device, lets nextpnr-ecp5 place it (seconds: there is almost no logic),
reads each cell's ``NEXTPNR_BEL`` back, and prints the DSP rows and slice columns found
beside the table's. Exit status 1 when they differ.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from hw.dsp_sites import ECP5_DSP_SLICES, SLICE_SITES
from hw.toolchain import YOWASP_TOOLS, tool_env, venv_bin

#: nextpnr-ecp5's device option and the number of MULT18X18D, per device.
DEVICES = {"LFE5U-85F": ("--85k", 156), "LFE5U-45F": ("--45k", 72),
           "LFE5U-25F": ("--25k", 28)}


def chain_verilog(count):
    """Verilog of ``count`` registered MULT18X18D, each fed by the one before (so none is
    removed), with no fabric logic beyond registers: synthesis needs no LUT mapping."""
    a = ", ".join(f".A{k}(chain[i][{k}])" for k in range(18))
    b = ", ".join(f".B{k}(chain[i][{k}])" for k in range(18))
    p = ", ".join(f".P{k}(p[{k}])" for k in range(36))
    return f"""module top(input clk, input [17:0] din, output dout);
  wire [17:0] chain [0:{count}];
  assign chain[0] = din;
  genvar i;
  generate for (i = 0; i < {count}; i = i + 1) begin : g
    wire [35:0] p;
    reg [17:0] r;
    MULT18X18D #(.REG_INPUTA_CLK("CLK0"), .REG_INPUTB_CLK("CLK0"), .REG_OUTPUT_CLK("CLK0"),
      .REG_PIPELINE_CLK("NONE"), .REG_INPUTC_CLK("NONE"), .GSR("DISABLED"),
      .RESETMODE("SYNC")) m (.CLK0(clk), .CE0(1'b1), .RST0(1'b0), .SIGNEDA(1'b1),
      .SIGNEDB(1'b1), .SOURCEA(1'b0), .SOURCEB(1'b0), {a}, {b}, {p});
    always @(posedge clk) r <= p[35:18];
    assign chain[i+1] = r;
  end endgenerate
  assign dout = chain[{count}][0];
endmodule
"""


def placed_sites(device, workdir):
    """The ``NEXTPNR_BEL`` of every MULT18X18D after placing the chain on ``device``."""
    option, count = DEVICES[device]
    work = Path(workdir)
    (work / "top.v").write_text(chain_verilog(count))
    env = tool_env()
    tools = venv_bin()
    # Synthesis without the LUT mapping step (nothing to map; ABC fails on an empty net).
    subprocess.run([str(tools / YOWASP_TOOLS["YOSYS"]), "-q", "-p",
                    "read_verilog top.v; synth_ecp5 -top top -run :map_luts; "
                    "synth_ecp5 -top top -run map_cells:; write_json top.json"],
                   cwd=work, env=env, check=True, capture_output=True)
    subprocess.run([str(tools / YOWASP_TOOLS["NEXTPNR_ECP5"]), option, "--package", "CABGA381",
                    "--json", "top.json", "--write", "placed.json",
                    "--lpf-allow-unconstrained"],
                   cwd=work, env=env, check=True, capture_output=True)
    cells = json.loads((work / "placed.json").read_text())["modules"]["top"]["cells"]
    return [cell["attributes"]["NEXTPNR_BEL"] for cell in cells.values()
            if cell["type"] == "MULT18X18D"]


def slices_from_sites(sites):
    """(DSP row ys, slice first-site xs) from site names; ValueError where a slice is
    not four sites at x, x+1, x+4, x+5 in every row."""
    rows = defaultdict(set)
    for site in sites:
        x, y, name = re.fullmatch(r"X(\d+)/Y(\d+)/(\w+)", site).groups()
        rows[int(y)].add((int(x), name))
    firsts = sorted(x for x, name in next(iter(rows.values())) if name == SLICE_SITES[0][1])
    for y, found in rows.items():
        expected = {(x + dx, name) for x in firsts for dx, name in SLICE_SITES}
        if found != expected:
            raise ValueError(f"DSP row y={y}: sites do not form slices at x={firsts}")
    return sorted(rows), firsts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device", choices=sorted(DEVICES))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        ys, xs = slices_from_sites(placed_sites(args.device, workdir))
    table_ys, table_xs = ECP5_DSP_SLICES[args.device]
    print(f"{args.device}: DSP rows y={ys}, slices at x={xs}")
    same = sorted(table_ys) == ys and list(table_xs) == xs
    print("matches hw.dsp_sites" if same else
          f"differs from hw.dsp_sites: rows y={sorted(table_ys)}, slices x={list(table_xs)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
