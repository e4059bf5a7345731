"""The XDMA wrapper (hw/axi_wrapper.py): Verilator lint, and a conv layer and a resident
program (the digits CNN, two loops from one start) through cocotbext-axi AXI4-Lite and
AXI4-Stream masters with random stream gaps (sim/tb_axi.py)."""

import pickle
import subprocess
from dataclasses import dataclass

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from hw.axi_wrapper import TOP_NAME, XdmaWrapper, lint_command, write_xdma_verilog
from hw.toolchain import require, tool_env

#: A 4x4 engine with a resident block just large enough for the digits CNN (1,700 data and
#: 427 program words at this array), so one build runs both the layer and the program.
ENGINE = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=512, max_col_tiles=8, resident_words=2048,
                          program_words=512)
#: Iterations of the resident run (RES_LOOPS) and the stream gaps it runs with.
RESIDENT_LOOPS, RESIDENT_IDLE = 2, 0.3


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


def resident_case(rng):
    """The digits CNN compiled for ``ENGINE``, ``RESIDENT_LOOPS`` random inputs and the cpu
    provider's outputs for them, by the image's port names."""
    from models.zoo import DIGITS_QDQ
    from sw_driver import InferenceSession
    from sw_driver.providers.cpu import CPUProvider
    from sw_driver.resident import compile_model

    graph = InferenceSession(str(DIGITS_QDQ), providers=["cpu"]).graph
    image = compile_model(graph, ENGINE, data_words=ENGINE.resident_words,
                          program_words=ENGINE.program_words)
    cpu = CPUProvider()
    x = rng.random((RESIDENT_LOOPS, 1, 8, 8), dtype=np.float32)
    tensors = {graph.inputs[0].name: x}
    for layer in graph.layers:
        tensors[layer.output] = np.asarray(cpu.run(layer, [tensors[n] for n in layer.inputs]))
    feeds = {p.name: tensors[p.name] for p in image.inputs}
    want = {p.name: tensors[p.name] for p in image.outputs}
    # Inputs that differ, and outputs that are not all clamped, or the check proves little.
    for name, array in {**feeds, **want}.items():
        assert len(np.unique(array)) > 2 and not np.array_equal(array[0], array[1]), name
    return {"image": image, "feeds": feeds, "want": want, "idle": RESIDENT_IDLE}


@pytest.mark.slow
def test_conv_layer_and_resident_program_through_axi(seed, rng, tmp_path):
    from twin.runner import run_testbench

    build = XdmaBuild(ENGINE)
    print(f"seed={seed} config={build.name}")
    case = tmp_path / "resident.pkl"
    case.write_bytes(pickle.dumps(resident_case(rng)))
    run_testbench("sim.tb_axi", build, seed=seed, name=f"pytest-{seed}",
                  extra_env={"TESSERA_RESIDENT_CASE": str(case)})


def test_cli_writes_xdma_verilog(tmp_path):
    from tessera.cli import main

    assert main(["verilog", "--target", "xdma", "--rows", "2", "--cols", "2",
                 "--build", str(tmp_path)]) == 0
    (path,) = tmp_path.glob(f"*-xdma/{TOP_NAME}.v")
    assert f"module {TOP_NAME}(" in path.read_text()
