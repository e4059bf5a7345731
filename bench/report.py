"""The measured tables of ``docs/performance.md``, generated from ``bench/results/*.json``.

``python -m bench.report`` rewrites every block of the page that sits between a pair of
markers::

    <!-- results: NAME -->
    ...
    <!-- end results: NAME -->

with the figures of ``bench/results/NAME.json`` and how they were measured (the command, the
machine, the date, all read from the file). A block whose file is absent is left as it
is, so a partial ``make bench`` updates only what it measured. ``--check`` changes nothing
and exits 1 naming each block that differs from its file (``tests/test_performance_doc.py``
runs the same check).
"""

import argparse
import json
import re
import sys
from pathlib import Path

from tessera.results import RESULTS

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"

BLOCK = re.compile(r"(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end results: "
                   r"(?P=name) -->)", re.S)

# Results files not named after the command that writes them (`tessera bench NAME`).
COMMANDS = {"intonly_error": "tessera bench intonly", "uart_link": "tessera bench uart",
            "soak": "tessera soak",
            "soak_seeds": "tessera soak --seeds", "sweep": "make sweep"}


def _cell(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = str(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = f"{value:,.6g}"
    return text.replace("|", "\\|").replace("\n", " ")


def _how(document):
    """One sentence: the command, the machine and the date of a results document."""
    name = document.get("benchmark", "?")
    command = document.get("command") or COMMANDS.get(name, f"tessera bench {name}")
    machine = document.get("machine", {})
    where = [f"{machine['cpus']} CPUs" if machine.get("cpus") else None,
             f"load {machine['load']:.1f}" if machine.get("load") is not None else None,
             f"Python {machine['python']}" if machine.get("python") else None]
    date = str(document.get("date", "?")).replace("T", " ").replace("+00:00", " UTC")
    return (f"Measured {date} by `{command}` on {', '.join(w for w in where if w)}; "
            f"`bench/results/{name}.json`.")


def _context(document):
    """The document's scalar context (seed, board, label ...), as ``key: value`` items."""
    skip = {"benchmark", "date", "machine", "metrics", "command"}
    return [f"{key}: {_cell(value)}" for key, value in document.items()
            if key not in skip and isinstance(value, (str, int, float, bool))]


def render(document):
    """The Markdown of one results document: how it was measured, then its metrics."""
    metrics = document.get("metrics", [])
    extra = [key for key in ("peer", "target", "note")
             if any(key in entry for entry in metrics)]
    lines = [_how(document)]
    context = _context(document)
    if context:
        lines.append("Context: " + "; ".join(context) + ".")
    lines += ["", "| metric | value | unit |" + "".join(f" {key} |" for key in extra),
              "|---|---:|---|" + "---|" * len(extra)]
    for entry in metrics:
        row = [entry["name"], _cell(entry["value"]), entry.get("unit", "")]
        for key in extra:
            if key not in entry:
                row.append("")
            elif key == "peer":  # the peer measured in the same run, and its figure
                row.append(f"{_cell(entry['peer'])}: {_cell(entry.get('peer_value'))}")
            else:
                row.append(_cell(entry[key]))
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def generate(text, results=RESULTS):
    """``text`` with each block whose results file exists rewritten; also the names of the
    blocks that changed."""
    changed = []

    def replace(match):
        path = Path(results) / f"{match['name']}.json"
        if not path.exists():
            return match.group(0)
        try:
            document = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not a results file ({error})") from error
        body = render(document)
        if body != match["body"]:
            changed.append(match["name"])
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text), changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a block differs from its results file")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    updated, changed = generate(text, args.results)
    if args.check:
        for name in changed:
            print(f"{args.doc}: the block '{name}' is stale against "
                  f"{args.results / (name + '.json')}; run `python -m bench.report`")
        return 1 if changed else 0
    if changed:
        args.doc.write_text(updated)
    print(f"{args.doc}: {len(changed)} block(s) rewritten"
          + (f" ({', '.join(changed)})" if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
