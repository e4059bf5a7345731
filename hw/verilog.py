"""Write the Verilog of a configuration into its own build folder."""

from pathlib import Path

from contract.config import ArrayConfig

TOP_NAME = "systolic_array"


def array_verilog(config):
    """Verilog text of the systolic array for ``config`` (one netlist per configuration)."""
    from amaranth.back import verilog

    from .double_pumped import DoublePumpedArray
    from .systolic import SystolicArray

    array = SystolicArray(config) if config.pump == 1 else DoublePumpedArray(config)
    return verilog.convert(array, name=TOP_NAME, emit_src=False)


def write_array_verilog(config, build_root="build"):
    """Write ``build/<config>/systolic_array.v``; leave it untouched when unchanged, so
    Verilator builds that depend on it stay cached. Returns the path."""
    if not isinstance(config, ArrayConfig):
        raise TypeError(f"config must be an ArrayConfig, not {config!r}")
    path = Path(build_root) / config.name / f"{TOP_NAME}.v"
    text = array_verilog(config)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path
