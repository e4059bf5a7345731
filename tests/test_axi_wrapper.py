"""The XDMA wrapper (hw/axi_wrapper.py): Verilator lint, and a conv layer through cocotbext-axi
AXI4-Lite and AXI4-Stream masters with random stream gaps (sim/tb_axi.py)."""

import subprocess
from dataclasses import dataclass

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from hw.axi_wrapper import TOP_NAME, XdmaWrapper, lint_command, write_xdma_verilog
from hw.toolchain import require, tool_env

ENGINE = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=512, max_col_tiles=8)


@dataclass(frozen=True)
class XdmaBuild:
    """The wrapper for ``engine`` as a build description for ``twin.runner``."""

    engine: ConvEngineConfig

    top_name = TOP_NAME
    rows = property(lambda self: self.engine.rows)
    cols = property(lambda self: self.engine.cols)
    acc_width = property(lambda self: self.engine.acc_width)
    name = property(lambda self: f"{self.engine.name}-xdma")

    def make_top(self):
        return XdmaWrapper(self.engine)

    def env(self):
        return self.engine.env()


def test_wrapper_rejects_bad_config():
    with pytest.raises(TypeError, match="config must be a ConvEngineConfig, not 8"):
        XdmaWrapper(8)


def test_lint_clean(tmp_path):
    path = write_xdma_verilog(ENGINE, tmp_path)
    result = subprocess.run(lint_command(require("verilator"), path), capture_output=True,
                            text=True, env=tool_env())
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and "%Warning" not in report and "%Error" not in report, \
        report[:3000]
    ports = path.read_text().split(");", 1)[0]
    for name in ("s_axil_awaddr", "s_axil_rdata", "s_axis_h2c_tkeep", "m_axis_c2h_tlast",
                 "axi_aclk", "axi_aresetn", "usr_irq_req"):
        assert name in ports, f"{name} is not a port of {TOP_NAME}"


@pytest.mark.slow
def test_conv_layer_through_axi(seed):
    from twin.runner import run_testbench

    build = XdmaBuild(ENGINE)
    print(f"seed={seed} config={build.name}")
    run_testbench("sim.tb_axi", build, seed=seed, name=f"pytest-{seed}")


def test_cli_writes_xdma_verilog(tmp_path):
    from tessera.cli import main

    assert main(["verilog", "--target", "xdma", "--rows", "2", "--cols", "2",
                 "--build", str(tmp_path)]) == 0
    (path,) = tmp_path.glob(f"*-xdma/{TOP_NAME}.v")
    assert f"module {TOP_NAME}(" in path.read_text()
