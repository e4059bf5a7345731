"""scripts/suite_report.py: the per-file table and the slowest tests of a JUnit report."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "suite_report.py"
REPORT = """<testsuites><testsuite>
<testcase classname="tests.test_a" name="test_one" time="3.0"/>
<testcase classname="tests.test_a" name="test_two[x]" time="1.0"/>
<testcase classname="tests.test_b" name="test_build" time="12.0"/>
<testcase classname="tests.test_c" name="test_fast" time="0.5"/>
</testsuite></testsuites>"""


def _script():
    spec = importlib.util.spec_from_file_location("suite_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_by_time_and_the_slowest_tests(tmp_path):
    path = tmp_path / "suite.xml"
    path.write_text(REPORT)
    text = _script().markdown(_script().read_times(path), files=2, slowest=2)
    lines = text.splitlines()
    assert lines[0] == "4 tests, 16 s of test time over both workers."
    assert lines[4:7] == ["| `test_b.py` | 1 | 12.0 | 73 % |", "| `test_a.py` | 2 | 4.0 | 24 % |",
                          "| the other 1 files | 1 | 0.5 | 3 % |"]
    assert lines[-2:] == ["| `test_b::test_build` | 12.0 |", "| `test_a::test_one` | 3.0 |"]
