"""Build a design with Verilator and run cocotb testbenches on it (cocotb_tools.runner).

The design is the systolic array for an ``ArrayConfig``; a configuration object with
``make_top()`` and ``top_name`` (e.g. ``hw.conv_config.ConvEngineConfig``) names its own top
instead, and its ``env()`` adds to the testbench environment. Each configuration gets its
own Verilog and Verilator build folder, ``build/<config.name>/``; builds are serialised with
a file lock so parallel pytest workers can share them.
"""

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from hw.config import ArrayConfig
from hw.verilog import TOP_NAME, write_array_verilog
from tessera.toolchain import VERILATOR_WARNING_FLAGS, apply_tool_env

BUILD_ROOT = Path(os.environ.get("TESSERA_BUILD", "build"))


@contextmanager
def _locked(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _top_name(config):
    return config.top_name if hasattr(config, "make_top") else TOP_NAME


def _write_verilog(config, build_root):
    """``build/<config.name>/<top>.v``, rewritten only when it changes (keeps builds cached)."""
    if not hasattr(config, "make_top"):
        return write_array_verilog(config, build_root)
    from amaranth.back import verilog

    path = Path(build_root) / config.name / f"{config.top_name}.v"
    text = verilog.convert(config.make_top(), name=config.top_name, emit_src=False)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def build_array(config, *, waves=False, build_root=BUILD_ROOT):
    """Generate Verilog for ``config`` and compile it with Verilator for cocotb.

    Returns ``(runner, build_dir)``. Waveforms need their own build (FST tracing)."""
    from cocotb_tools.runner import get_runner

    if not isinstance(config, ArrayConfig) and not hasattr(config, "make_top"):
        raise TypeError(f"config must be an ArrayConfig or name its top (make_top), "
                        f"not {config!r}")
    apply_tool_env()
    build_root = Path(build_root).resolve()
    build_dir = build_root / config.name / ("verilator-fst" if waves else "verilator")
    runner = get_runner("verilator")
    with _locked(build_root / config.name / ".build.lock"):
        source = _write_verilog(config, build_root).resolve()
        flags = list(VERILATOR_WARNING_FLAGS)
        if waves:
            flags.append("--trace-fst")
        runner.build(sources=[source], hdl_toplevel=_top_name(config), build_dir=build_dir,
                     build_args=flags, waves=waves, log_file=build_dir / "build.log")
    return runner, build_dir


class TestbenchFailed(AssertionError):
    """Some cocotb tests failed; the message names the log."""


def run_testbench(module, config, *, seed, testcase=None, waves=False, extra_env=None,
                  build_root=BUILD_ROOT, name=None, check=True):
    """Run the cocotb test module ``module`` (e.g. ``"sim.tb_systolic"``) on ``config``.

    Returns ``(results_xml, waves_path or None)``. With ``check`` a failing cocotb test
    raises :class:`TestbenchFailed` naming the simulation log (under pytest the cocotb
    runner raises first, with the failing test names)."""
    from cocotb_tools.check_results import get_results

    runner, build_dir = build_array(config, waves=waves, build_root=build_root)
    label = name or (testcase or "all")
    test_dir = build_dir.parent / "runs" / f"{module.rsplit('.', 1)[-1]}-{label}"
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "TESSERA_ROWS": str(config.rows),
        "TESSERA_COLS": str(config.cols),
        "TESSERA_ACC_WIDTH": str(config.acc_width),
        "TESSERA_SEED": str(seed),
        **(config.env() if hasattr(config, "env") else {}),
        **(extra_env or {}),
    }
    results = runner.test(test_module=module, hdl_toplevel=_top_name(config), testcase=testcase,
                          seed=seed, extra_env=env, waves=waves, build_dir=build_dir,
                          test_dir=test_dir, results_xml=str(test_dir / "results.xml"),
                          log_file=test_dir / "sim.log",
                          test_args=(["--trace-file", str(test_dir / "dump.fst")]
                                     if waves else []))
    if check:
        tests, failed = get_results(Path(results))
        if failed or not tests:
            raise TestbenchFailed(f"{failed} of {tests} cocotb tests failed in {module} on "
                                  f"{config.name} (seed {seed}); log: {test_dir / 'sim.log'}")
    return Path(results), (test_dir / "dump.fst") if waves else None
