"""The record of board builds: one entry per build from its ``report.json``, and the table
of all of them that ``docs/boards.md`` shows.

``tessera/explore/board_builds.json`` keeps two lists. ``builds`` is the latest build per
board and configuration, what the resource model fits (``resource_model.board_builds``);
``history`` is every build recorded, in the order they were made, failed and unrouted ones
included, which the table in ``docs/boards.md`` is generated from (so no figure of a build
is typed by hand):

    python -m tessera.explore.build_records add build/ulx3s-85f/report.json \\
        --label "ulx3s-85f 8x8 default" [--critical-path TEXT] [--note TEXT]
    python -m tessera.explore.build_records table [--check]

``add`` takes every figure from the report (seed, router, clock asked, fmax, timing,
resources, place-and-route time, critical path); ``--critical-path`` replaces nextpnr's
start and end names with words a person reads, and ``--note`` says what the build tried.
``table`` rewrites the generated blocks of ``docs/boards.md`` and ``docs/build.md``: between
``<!-- begin builds -->`` and ``<!-- end builds -->`` the history, between
``<!-- begin latest builds -->`` and ``<!-- end latest builds -->`` the latest build of each
configuration; ``--check`` only says whether they are current (a test runs it).
"""

import argparse
import json
import sys
from pathlib import Path

from .resource_model import BOARD_BUILDS_PATH as RECORDS_PATH
from .resource_model import build_key

__all__ = ["RECORDS_PATH", "add_record", "record_from_report", "render_latest", "render_table",
           "update_doc"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC_PATHS = (DOCS / "boards.md", DOCS / "build.md")
#: The resources a record keeps (ECP5 names: the boards recorded are the ULX3S's).
RESOURCES = ("LUT4", "TRELLIS_FF", "MULT18X18D", "DP16KD")


def _path_text(report):
    """nextpnr's critical path of the design clock, in one line."""
    paths = report.get("critical_path") or {}
    if not paths:
        return None
    clock = report.get("clock_net")
    path = paths.get(clock) or next(iter(paths.values()))
    return (f"{path['total_ns']:.2f} ns ({path['logic_ns']:.2f} logic, "
            f"{path['routing_ns']:.2f} routing): {path['start']} -> {path['end']}")


def record_from_report(report, *, label, date, critical_path=None, note=None):
    """A record of the build ``report`` (a ``report.json`` of ``tessera bitstream``)."""
    if report.get("kind") != "accelerator":
        raise ValueError(f"{label}: only whole-accelerator builds are recorded, this report "
                         f"is of kind {report.get('kind')!r}")
    config = dict(report["config"])
    config["clock_mhz"] = None
    missing = [name for name in RESOURCES if name not in report.get("resources", {})]
    if missing:
        raise ValueError(f"{label}: the report has no {', '.join(missing)} count "
                         f"(an ECP5 build is expected)")
    record = {
        "label": label,
        "board": report["board"], "family": report["family"], "device": report["device"],
        "config": config, "commit": report["source"]["commit"][:7], "date": date,
        "seed": report["seed"], "pll_clock_mhz": report["clock_mhz"],
        "fmax_mhz": report["fmax_mhz"], "timing_met": report["timing_met"],
        "resources": {name: {"used": report["resources"][name]["used"]}
                      for name in RESOURCES},
        "place_and_route_min": round(report["wall_time_s"]["place_and_route_s"] / 60, 1),
        "critical_path": critical_path or _path_text(report),
    }
    if config["array"].get("pump", 1) != 1:  # the array's own clock, and its fmax
        record["array_clock_mhz"] = report["array_clock_mhz"]
        record["array_fmax_mhz"] = report["array_fmax_mhz"]
    if report.get("router", "router1") != "router1":
        record["router"] = report["router"]
    if note:
        record["note"] = note
    return record


def add_record(data, record, *, history_only=False):
    """``data`` (the records file's content) with ``record`` added to ``history`` and, unless
    ``history_only``, in place of its configuration's earlier build in ``builds``. The
    model fits builds asked for the configuration's default clock (its preset's
    ``clock_mhz``, else the board's: the tools work harder on a higher one, and LUT counts
    move with it): a build at another clock, or one that was stopped, goes to the history
    only."""
    builds = data["builds"]
    if not history_only:
        # The same board and configuration, whatever clock: the later build replaces it.
        key = build_key(record)
        builds = [b for b in builds if build_key(b) != key] + [record]
    return {**data, "builds": builds, "history": data.get("history", []) + [record]}


def _fmax_text(record):
    if record.get("fmax_mhz") is None:
        return "not routed"
    verdict = "met" if record.get("timing_met") else "missed"
    if record.get("array_fmax_mhz") is not None:
        return (f"**{record['fmax_mhz']:.2f} MHz**, array **{record['array_fmax_mhz']:.2f} "
                f"MHz** at {record['array_clock_mhz']:g}, {verdict}")
    return f"**{record['fmax_mhz']:.2f} MHz**, {verdict}"


def _design_text(record):
    config = record["config"]
    array = config["array"]
    text = f"{array['rows']}×{array['cols']}"
    if array.get("pump", 1) != 1:
        text += f" pumped ({array['rows'] // array['pump']}×{array['cols']} multipliers)"
    if config.get("resident_words"):
        text += " resident"
    return text


def _count(value):
    return "—" if value is None else f"{value:,}".replace(",", " ")


def render_table(data):
    """The markdown table of every recorded build, oldest first."""
    lines = ["| date | board | design | commit | router, seed | clock asked | fmax | LUT4 | "
             "FF | MULT18X18D | DP16KD | P&R min | critical path; what the build tried |",
             "|---|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for record in data.get("history", []):
        resources = record.get("resources", {})
        used = [resources.get(name, {}).get("used") for name in RESOURCES]
        minutes = record.get("place_and_route_min")
        words = "; ".join(text for text in (record.get("critical_path"), record.get("note"))
                          if text)
        lines.append(
            f"| {record['date']} | {record['board']} | {_design_text(record)} | "
            f"{record['commit']} | {record.get('router', 'router1')}, {record['seed']} | "
            f"{record['pll_clock_mhz']:g} MHz | {_fmax_text(record)} | "
            f"{' | '.join(_count(v) for v in used)} | "
            f"{'—' if minutes is None else f'{minutes:g}'} | {words} |")
    return "\n".join(lines)


def render_latest(data):
    """The markdown table of the latest build of each configuration (what the resource
    model fits), largest die first."""
    lines = ["| board | design | clock asked | fmax | LUT4 | FF | MULT18X18D | DP16KD | "
             "P&R min | commit, date |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    order = {"ulx3s-85f": 0, "ulx3s-45f": 1, "ulx3s-25f": 2}
    records = sorted(data["builds"], key=lambda r: (order.get(r["board"], 9),
                                                    bool(r["config"].get("resident_words")),
                                                    r["config"]["array"]["rows"]))
    for record in records:
        used = [record["resources"].get(name, {}).get("used") for name in RESOURCES]
        minutes = record.get("place_and_route_min")
        lines.append(
            f"| {record['board']} | {_design_text(record)} | {record['pll_clock_mhz']:g} MHz | "
            f"{_fmax_text(record)} | {' | '.join(_count(v) for v in used)} | "
            f"{'—' if minutes is None else f'{minutes:g}'} | "
            f"{record['commit']}, {record['date']} |")
    return "\n".join(lines)


BLOCKS = {"builds": render_table, "latest builds": render_latest}


def update_doc(data, doc_paths=DOC_PATHS, check=False):
    """Rewrite (or with ``check`` only compare) every generated block (:data:`BLOCKS`) in
    ``doc_paths``; returns whether all were already current."""
    current = True
    for doc_path in doc_paths:
        text = Path(doc_path).read_text()
        new = text
        for name, render in BLOCKS.items():
            begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
            if begin not in new:
                continue
            if end not in new:
                raise ValueError(f"{doc_path}: '{begin}' has no '{end}' after it")
            head, rest = new.split(begin, 1)
            _, tail = rest.split(end, 1)
            new = f"{head}{begin}\n{render(data)}\n{end}{tail}"
        if new != text:
            current = False
            if not check:
                Path(doc_path).write_text(new)
    return current


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tessera.explore.build_records",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="record a build from its report.json")
    add.add_argument("report", type=Path)
    add.add_argument("--label", required=True)
    add.add_argument("--date", required=True, help="the day the build ran (YYYY-MM-DD)")
    add.add_argument("--critical-path", help="the critical path in words (default: "
                     "nextpnr's start and end)")
    add.add_argument("--note", help="what the build tried")
    add.add_argument("--history-only", action="store_true",
                     help="keep it out of the builds the resource model fits (a clock "
                     "other than the board's default)")
    table = commands.add_parser("table", help="regenerate docs/boards.md's build table")
    table.add_argument("--check", action="store_true",
                       help="only say whether the table is current")
    args = parser.parse_args(argv)
    data = json.loads(RECORDS_PATH.read_text())
    if args.command == "add":
        if not args.report.is_file():
            print(f"no report at {args.report}", file=sys.stderr)
            return 2
        record = record_from_report(json.loads(args.report.read_text()), label=args.label,
                                    date=args.date, critical_path=args.critical_path,
                                    note=args.note)
        data = add_record(data, record, history_only=args.history_only)
        RECORDS_PATH.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        update_doc(data)
        print(json.dumps(record, indent=1, ensure_ascii=False))
        return 0
    current = update_doc(data, check=args.check)
    if args.check and not current:
        print("docs/boards.md or docs/build.md: a build table is stale; run python -m "
              "tessera.explore.build_records table", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
