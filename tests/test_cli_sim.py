"""`tessera sim`: reading cocotb's results files and the testbench registry."""

import pytest

from twin.outcomes import read_outcomes
from twin.testbenches import TESTBENCHES, find_testbench

RESULTS = """<?xml version='1.0' encoding='utf-8'?>
<testsuites name="cocotb tests"><testsuite name="sim.tb" tests="3">
<testcase name="ok" time="0.1"><properties>
  <property name="sim_time_duration" value="4260.0" /></properties></testcase>
<testcase name="bad" time="0.1"><failure message="boom" /></testcase>
<testcase name="other" time="0.0"><skipped message="Test was skipped" /></testcase>
</testsuite></testsuites>
"""


def test_outcomes_are_read_from_results_xml(tmp_path):
    path = tmp_path / "results.xml"
    path.write_text(RESULTS)
    assert [(o.name, o.result, o.sim_us) for o in read_outcomes(path)] == [
        ("ok", "PASS", 4.26), ("bad", "FAIL", 0.0), ("other", "SKIP", 0.0)]


def test_unknown_testbench_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown testbench 'nope'; known testbenches: "
                                         + ", ".join(sorted(TESTBENCHES))):
        find_testbench("nope")
