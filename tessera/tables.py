"""The tables the commands print, laid out for an 80-column terminal or a log.

Rich wraps a column it has to shrink at every space, so a long cell in a wide table comes
out one word a line, and it cuts headers to fit. The tables here hold short cells only: a
placement reason is a label of a few words in the table, and its whole text goes below the
table (``tessera run --profile``, ``tessera demo --verbose``); a load test's answers by
status, and a tenant stopped at its request cap, are lines below the table. The JSON a
command writes keeps every figure and text in full.
"""

import re

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

__all__ = ["WIDTH", "loadtest_notes", "loadtest_table", "profile_table", "reasons_grid",
           "segment_lines", "short_reason"]

#: The narrowest console the tables are laid out for: a terminal's default, and what rich
#: assumes when the output is not a terminal (a pipe, a log).
WIDTH = 80

#: The widest short reason, in characters.
SHORT_REASON = 20


def _table(title):
    # No vertical rules and one space of padding between columns: a box with rules costs
    # three columns a cell, which 80 columns cannot spare for seven or more columns.
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 collapse_padding=True)


def short_reason(reason):
    """The placement ``reason`` of a profile entry as a label of a few words: who declined
    the layer before the provider that ran it, whether it fell back or ran again after a
    fault, or why the chosen provider was chosen."""
    if "; fell back to " in reason:
        return "fell back"
    if "after a reset, following a device fault" in reason:
        return "rerun after fault"
    declined = list(dict.fromkeys(re.findall(r"(?:^|; )([\w.-]+) declined: ", reason)))
    if declined:
        label = f"{'+'.join(declined)} declined"
    elif " beats " in reason:
        label = "fastest estimate"
    else:
        label = "first choice"
    return label if len(label) <= SHORT_REASON else label[:SHORT_REASON - 1] + "…"


def profile_table(totals, title, *, cycles=False, share=False, per_batch=None, why=True):
    """A per-layer profile (``totals``: layer name -> entry of
    ``InferenceSession.profile()``, summed) as a table that fits :data:`WIDTH` columns.

    Parameters
    ----------
    totals : dict of str -> dict
        The summed profile entries, in layer order.
    title : str
        The table's title.
    cycles : bool
        Add the device cycles column (blank for layers that ran on the host).
    share : bool
        Add each layer's share of the total time.
    per_batch : int or None
        Add milliseconds per batch, over this many batches.
    why : bool
        Add each layer's placement reason as a short label (:func:`short_reason`); leave it
        out where :func:`reasons_grid` follows with the whole text.
    """
    table = _table(title)
    # Layer and op names are single words: folded (not cut) when the table must shrink.
    table.add_column("layer", overflow="fold", min_width=8)
    table.add_column("op", overflow="fold", min_width=7)
    table.add_column("provider", no_wrap=True)
    numbers = (("cycles",) if cycles else ()) + ("time ms",) + (("share",) if share else ())
    numbers += ("bytes",) + (("ms/batch",) if per_batch else ())
    for column in numbers:
        table.add_column(column, justify="right", no_wrap=True)
    if why:
        table.add_column("why there", no_wrap=True, overflow="ellipsis")
    grand = sum(entry["seconds"] for entry in totals.values()) or 1.0
    for name, entry in totals.items():
        row = [name, entry["op"], entry["provider"]]
        if cycles:
            value = entry.get("cycles")
            row.append("" if value is None else f"{value:,}")
        row.append(f"{entry['seconds'] * 1e3:.1f}")
        if share:
            row.append(f"{entry['seconds'] / grand:.0%}")
        row.append(f"{entry['bytes']:,}")
        if per_batch:
            row.append(f"{entry['seconds'] * 1e3 / per_batch:.3f}")
        if why:
            row.append(short_reason(entry["reason"]))
        table.add_row(*row)
    return table


def _duration(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def segment_lines(totals):
    """Two lines of at most :data:`WIDTH` columns per resident segment of a profile (the
    entries carrying ``segment``): passes, bytes over the link per inference against layer
    at a time; then the link's time against the compute's, per inference."""
    lines = []
    for entry in totals.values():
        seg = entry.get("segment")
        if seg is None:
            continue
        line = (f"resident segment {seg['index']}: {seg['passes']} passes, "
                f"{seg['link_bytes_per_inference']:,} B/inference "
                f"({seg['link_bytes_layer_at_a_time']:,} layer at a time)")
        lines.append(line)
        compute = seg.get("compute_seconds")
        if compute is not None:
            link = seg.get("link_seconds")
            linked = ("link: no model (twin)" if link is None
                      else f"link {_duration(link)}")
            lines.append(f"  per inference: {linked}, compute {_duration(compute)} at "
                         f"{seg['clock_hz'] / 1e6:g} MHz")
    return lines


def reasons_grid(totals):
    """Each layer's whole placement reason, below a :func:`profile_table`: the layer's
    name, then the reason wrapped at spaces in the rest of the line."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for name, entry in totals.items():
        grid.add_row(name, Text(entry["reason"]))
    return Group(Text("why there, in full:"), grid)


def _ms(value):
    return "-" if value is None else f"{value:.2f}"


def loadtest_table(result):
    """The per-tenant figures of a load test (``tessera.serve.loadtest.run_loadtest``'s
    result) as a table that fits :data:`WIDTH` columns; :func:`loadtest_notes` says the
    rest."""
    table = _table(f"load test of {result['url']} ({result['seconds']:.1f} s)")
    table.add_column("tenant", overflow="fold", min_width=6)
    for column in ("load", "sent", "answered", "req/s", "p50 ms", "p99 ms", "p99.9 ms",
                   "SLO met"):
        table.add_column(column, justify="right", no_wrap=True)
    for t in result["tenants"]:
        load = f"c{t['concurrency']}" if t.get("concurrency") else \
            f"{t['offered_rate']:g}/s" if t.get("offered_rate") else "-"
        table.add_row(t["tenant"], load, str(t["sent"]), str(t["answered"]),
                      f"{t['throughput']:.1f}", _ms(t["latency_p50_ms"]),
                      _ms(t["latency_p99_ms"]), _ms(t["latency_p999_ms"]),
                      "-" if t["slo_attainment"] is None else f"{t['slo_attainment']:.2%}")
    return table


def loadtest_notes(result):
    """Lines below :func:`loadtest_table`: the bounds of the load, then per tenant its
    answers by status, those lost and wrong, and the seconds its rates are over (its own
    traffic's: shorter than the load's when it stopped at the request cap)."""
    lines = [f"Each tenant sent for {result['duration']:g} s or {result['max_requests']:,} "
             f"requests (--duration, --max-requests), whichever came first."]
    for t in result["tenants"]:
        statuses = ", ".join(f"{status}: {count}" for status, count in t["by_status"].items())
        line = (f"{t['tenant']}: by status {statuses or 'none sent'}; {t['lost']} lost, "
                f"{t['wrong']} wrong of {t['checked']} checked; ")
        if t["capped"]:
            line += (f"stopped at the cap of {t['max_requests']:,} requests, its last answer "
                     f"after {t['seconds']:.1f} s: its rates are over those {t['seconds']:.1f} s")
        else:
            line += f"rates over {t['seconds']:.1f} s, to its last answer"
        lines.append(line + ".")
    return lines
