"""Build a design with Verilator and run cocotb testbenches on it (cocotb_tools.runner).

The design is the systolic array for an ``ArrayConfig``, the convolution engine for a
``ConvEngineConfig``; a build description with ``make_top()`` and ``top_name`` (e.g.
``twin.system.TopBuild``) names its own top instead, and one with ``write_verilog`` also
writes its own Verilog (``twin.netlist.TwinNetlist``: the twin's netlist). The
configuration's ``env()`` adds to the testbench environment. Each configuration gets its
own Verilog and Verilator build folder, ``build/<config.name>/``; builds are serialised with
a file lock so parallel pytest workers can share them.

A failed build or run raises with the tool's or the testbench's own message (the first
``%Error`` lines, the failing test's exception), read from the logs and cocotb's results
file, rather than the traceback of the launching code. A run in which every cocotb test was
skipped checked nothing, and fails too unless the caller allows it.
"""

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from contract.config import ArrayConfig, ConvEngineConfig
from hw.toolchain import VERILATOR_WARNING_FLAGS, apply_tool_env
from hw.verilog import TOP_NAME, write_array_verilog

from .outcomes import failure_lines, first_build_errors, log_tail, read_outcomes

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


@contextmanager
def _shell_environment(env):
    """``env`` in ``os.environ`` while the block runs, then the shell's values again.

    cocotb's runner lays the shell's environment over ``extra_env``, so a ``TESSERA_SEED``
    exported for pytest would otherwise replace each testbench's own seed (and the seed the
    failure message prints would not be the one that ran).
    """
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _array_of(config):
    """The ``ArrayConfig`` of a configuration (the default array's when it names none)."""
    if isinstance(config, ArrayConfig):
        return config
    return getattr(config, "array", None) or ArrayConfig()


def _names_its_top(config):
    return isinstance(config, ConvEngineConfig) or hasattr(config, "make_top")


def _make_top(config):
    # ConvEngineConfig is plain contract data (no Amaranth), so its generator is found here
    # rather than by a method that would import the hardware from the contract.
    if isinstance(config, ConvEngineConfig):
        from hw.conv_engine import ConvEngine

        return ConvEngine(config)
    return config.make_top()


def _top_name(config):
    return config.top_name if _names_its_top(config) else TOP_NAME


def _write_verilog(config, build_root):
    """``build/<config.name>/<top>.v``, rewritten only when it changes (keeps builds cached).

    A build description with ``write_verilog(folder)`` writes its own Verilog there (the
    twin's flattened netlist, ``twin.netlist``) and returns its path."""
    if hasattr(config, "write_verilog"):
        return config.write_verilog(Path(build_root) / config.name)
    if not _names_its_top(config):
        return write_array_verilog(config, build_root)
    from amaranth.back import verilog

    path = Path(build_root) / config.name / f"{config.top_name}.v"
    text = verilog.convert(_make_top(config), name=config.top_name, emit_src=False)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def terminal_log(message):
    """Print a progress line to stderr when it is a terminal (quiet in tests and pipes)."""
    if sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)


#: The optimisation of the model's per-cycle code in cocotb builds. Verilator's default,
#: -Os, compiles the conv engine in 14 s here; -O1 in 9 s, and simulates it no slower
#: (measured on the lean 3x5 engine's testbench: 11.3 s against 12.4 s).
COCOTB_OPT_FAST = "-O1"


def _compile_env():
    # cocotb's runner calls make with this process's environment; MAKEFLAGS carries the
    # setting into Verilator's makefiles.
    makeflags = os.environ.get("MAKEFLAGS", "")
    return {"MAKEFLAGS": f"{makeflags} OPT_FAST={COCOTB_OPT_FAST}".strip()}


class SimBuildError(RuntimeError):
    """Verilator could not build the design; the message quotes its first errors and names
    the build log."""


def build_array(config, *, waves=False, build_root=BUILD_ROOT, log=terminal_log):
    """Generate Verilog for ``config`` and compile it with Verilator for cocotb.

    Returns ``(runner, build_dir)``. Waveforms need their own build (FST tracing).
    ``log(message)`` gets a line when the build starts and one with its duration (it takes
    up to a minute when the design changed, seconds when it is up to date).

    Raises
    ------
    SimBuildError
        With Verilator's first error lines and the path of the build log.
    """
    from cocotb_tools.runner import get_runner

    if not isinstance(config, ArrayConfig) and not _names_its_top(config):
        raise TypeError(f"config must be an ArrayConfig, a ConvEngineConfig or name its top "
                        f"(make_top), not {config!r}")
    apply_tool_env()
    build_root = Path(build_root).resolve()
    build_dir = build_root / config.name / ("verilator-fst" if waves else "verilator")
    runner = get_runner("verilator")
    with _locked(build_root / config.name / ".build.lock"):
        source = _write_verilog(config, build_root).resolve()
        flags = list(VERILATOR_WARNING_FLAGS)
        if waves:
            flags.append("--trace-fst")
        build_log = build_dir / "build.log"
        log(f"Verilator: building {config.name} (log: {build_log})")
        started = time.monotonic()
        try:
            with _shell_environment(_compile_env()):
                runner.build(sources=[source], hdl_toplevel=_top_name(config),
                             build_dir=build_dir, build_args=flags, waves=waves,
                             log_file=build_log)
        except (RuntimeError, SystemExit) as exc:
            # cocotb's runner raises "Command failed with return code" (or exits when
            # Verilator is missing); the reason is in the log.
            raise SimBuildError(
                f"Verilator failed to build {config.name} ({exc}):\n"
                f"{first_build_errors(build_log)}\nlog: {build_log}") from None
        log(f"Verilator: {config.name} ready in {time.monotonic() - started:.1f} s")
    return runner, build_dir


class TestbenchFailed(AssertionError):
    """Some cocotb tests failed, or the simulation ended without results.

    The message gives each failing test with the testbench's own exception (or, when there
    are no results, the end of the simulation log) and names the log.

    Attributes
    ----------
    failures : list of str
        ``"<test>: <exception type>: <message>"`` per failing test.
    log : pathlib.Path
        The simulation log.
    """

    __test__ = False  # a name starting with "Test" is not a pytest test class

    def __init__(self, message, failures=(), log=None):
        super().__init__(message)
        self.failures = list(failures)
        self.log = log


def check_outcomes(outcomes, where, sim_log=None, *, allow_all_skipped=False):
    """Raise :class:`TestbenchFailed` unless ``outcomes`` (:func:`twin.outcomes.read_outcomes`
    of the run ``where`` names) show a pass: no test failed, some test ran and, unless
    ``allow_all_skipped``, not every test was skipped (a run that checked nothing)."""
    failures = failure_lines(outcomes)
    log_line = f"\nlog: {sim_log}" if sim_log else ""
    if failures or not outcomes:
        listed = "".join(f"\n  {line}" for line in failures) or " (no test ran)"
        raise TestbenchFailed(f"{len(failures)} of {len(outcomes)} cocotb tests failed in "
                              f"{where}:{listed}{log_line}", failures, sim_log)
    if not allow_all_skipped and all(o.result == "SKIP" for o in outcomes):
        names = ", ".join(o.name for o in outcomes)
        raise TestbenchFailed(f"all {len(outcomes)} cocotb tests were skipped in {where}, so "
                              f"nothing was checked: {names} (run_testbench("
                              f"allow_all_skipped=True) where that is expected){log_line}",
                              [], sim_log)


def run_testbench(module, config, *, seed, testcase=None, waves=False, extra_env=None,
                  build_root=BUILD_ROOT, name=None, check=True, allow_all_skipped=False,
                  log=terminal_log):
    """Run the cocotb test module ``module`` (e.g. ``"sim.tb_systolic"``) on ``config``.

    Returns ``(results_xml, waves_path or None)``. ``log`` gets the build's progress lines
    (:func:`build_array`).

    Raises
    ------
    SimBuildError
        Verilator could not build the design.
    TestbenchFailed
        The simulation ended without a results file; or, with ``check``, a cocotb test
        failed, or every test was skipped and ``allow_all_skipped`` is false
        (:func:`check_outcomes`). The message quotes the testbench's own error.
    """
    runner, build_dir = build_array(config, waves=waves, build_root=build_root, log=log)
    label = name or (testcase or "all")
    test_dir = build_dir.parent / "runs" / f"{module.rsplit('.', 1)[-1]}-{label}"
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "TESSERA_ROWS": str(config.rows),
        "TESSERA_COLS": str(config.cols),
        "TESSERA_ACC_WIDTH": str(config.acc_width),
        # Only for a double-pumped array: the environment of others stays what it was.
        **({"TESSERA_PUMP": str(_array_of(config).pump)} if _array_of(config).pump != 1
           else {}),
        "TESSERA_SEED": str(seed),
        **(config.env() if hasattr(config, "env") else {}),
        **(extra_env or {}),
    }
    results, sim_log = test_dir / "results.xml", test_dir / "sim.log"
    where = f"{module} on {config.name} (seed {seed})"
    exit_note = ""
    try:
        with _shell_environment(env):
            runner.test(test_module=module, hdl_toplevel=_top_name(config), testcase=testcase,
                        seed=seed, extra_env=env, waves=waves, build_dir=build_dir,
                        test_dir=test_dir, results_xml=str(results), log_file=sim_log,
                        test_args=(["--trace-file", str(test_dir / "dump.fst")]
                                   if waves else []))
    except SystemExit as exc:
        # cocotb's runner exits when the simulator fails and, under pytest, when a test
        # fails; the results file (when written) says which and why.
        exit_note = f" (exit {exc.code})"
    if not results.exists():
        raise TestbenchFailed(f"the simulation of {where} ended{exit_note} without results; "
                              f"the end of its log:\n{log_tail(sim_log)}\nlog: {sim_log}",
                              log=sim_log)
    if check:
        check_outcomes(read_outcomes(results), where, sim_log,
                       allow_all_skipped=allow_all_skipped)
    return results, (test_dir / "dump.fst") if waves else None
