"""What a cocotb run and a Verilator build leave behind, read for the messages a user needs.

cocotb writes one ``<testcase>`` per test into its results file, with a ``<failure>`` (or
``<error>``) element whose ``message`` is the testbench's own exception text; the logs keep
the rest. A failing run is reported with those messages, not with the Python traceback of
the code that launched the simulator.
"""

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Outcome", "failure_lines", "first_build_errors", "log_tail", "read_outcomes"]


@dataclass(frozen=True)
class Outcome:
    """One cocotb test case.

    Attributes
    ----------
    name : str
    result : str
        ``"PASS"``, ``"FAIL"`` or ``"SKIP"``.
    sim_us : float
        Simulated time in microseconds.
    error : str
        For a failure, ``"<exception type>: <message>"`` as the testbench raised it; else "".
    """

    name: str
    result: str
    sim_us: float
    error: str = ""


def _error_text(element):
    kind = element.get("type") or ""
    message = (element.get("message") or "").strip()
    if not message and element.text:
        # No message attribute: the traceback's last line is the exception.
        message = element.text.strip().splitlines()[-1]
    return f"{kind}: {message}" if kind and message else (message or kind or "failed")


def read_outcomes(results_xml):
    """Every test case of a cocotb results file, in order, as :class:`Outcome`."""
    outcomes = []
    for case in ElementTree.parse(results_xml).getroot().iter("testcase"):
        failed = case.find("failure")
        if failed is None:
            failed = case.find("error")
        if failed is not None:
            result, error = "FAIL", _error_text(failed)
        elif case.find("skipped") is not None:
            result, error = "SKIP", ""
        else:
            result, error = "PASS", ""
        props = {prop.get("name"): prop.get("value") for prop in case.iter("property")}
        sim_ns = float(props.get("sim_time_duration", 0.0))
        outcomes.append(Outcome(case.get("name"), result, sim_ns / 1000, error))
    return outcomes


def failure_lines(outcomes):
    """``"<test>: <exception type>: <message>"`` for each failed test."""
    return [f"{o.name}: {o.error}" for o in outcomes if o.result == "FAIL"]


def log_tail(path, lines=12):
    """The last ``lines`` non-blank lines of a log (what a crash leaves), or ""."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def first_build_errors(path, limit=5):
    """The first ``limit`` error lines of a Verilator/compiler build log, or its tail.

    Verilator starts its errors with ``%Error`` and Yosys with ``ERROR:``; the C++
    compiler and make write ``error:`` and ``make: ***``.
    """
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    errors = [line.strip() for line in text.splitlines()
              if line.lstrip().startswith(("%Error", "ERROR:", "make: ***"))
              or " error:" in line]
    return "\n".join(errors[:limit]) if errors else log_tail(path, limit)
