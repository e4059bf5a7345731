"""The suite's time per test file and its slowest tests, as Markdown, from a JUnit XML report.

    .venv/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider \
        --junitxml=build/suite.xml
    .venv/bin/python scripts/suite_report.py build/suite.xml

A test's time includes its fixtures: the first test to use a Verilator build pays for the
build. `docs/performance.md` ("Tests") holds the latest table.
"""

import argparse
import collections
import xml.etree.ElementTree as ET


def read_times(path):
    """``[(seconds, file stem, test name)]`` of every test case in the report."""
    cases = []
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").split(".")[-1] or "?"
        cases.append((float(case.get("time", 0)), module, case.get("name", "?")))
    return cases


def markdown(cases, files=15, slowest=10):
    """Two Markdown tables: the ``files`` costliest test files, the ``slowest`` tests."""
    per_file = collections.Counter()
    counts = collections.Counter()
    for seconds, module, _ in cases:
        per_file[module] += seconds
        counts[module] += 1
    total = sum(per_file.values())
    lines = [f"{len(cases)} tests, {total:.0f} s of test time over both workers.", "",
             "| test file | tests | seconds | share |", "|---|---:|---:|---:|"]
    for module, seconds in per_file.most_common(files):
        lines.append(f"| `{module}.py` | {counts[module]} | {seconds:.1f} | "
                     f"{100 * seconds / total:.0f} % |")
    rest = total - sum(seconds for _, seconds in per_file.most_common(files))
    lines.append(f"| the other {len(per_file) - files} files | "
                 f"{len(cases) - sum(counts[m] for m, _ in per_file.most_common(files))} | "
                 f"{rest:.1f} | {100 * rest / total:.0f} % |")
    lines += ["", "| slowest tests | seconds |", "|---|---:|"]
    for seconds, module, name in sorted(cases, reverse=True)[:slowest]:
        lines.append(f"| `{module}::{name}` | {seconds:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("report", help="pytest's --junitxml file")
    parser.add_argument("--files", type=int, default=15, help="test files to list")
    parser.add_argument("--slowest", type=int, default=10, help="tests to list")
    args = parser.parse_args(argv)
    print(markdown(read_times(args.report), args.files, args.slowest))


if __name__ == "__main__":
    main()
