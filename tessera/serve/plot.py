"""The load test's picture: per tenant and phase, latency p50 / p99 / p99.9 against its SLO,
and goodput beside throughput (``bench/bench_serve.py`` and ``tessera loadtest --plot``).

Input is what :func:`tessera.serve.loadgen.summarize` returns, grouped by phase; matplotlib
is imported only when a plot is drawn (the optional ``plot`` extra, not a runtime dependency).
"""

__all__ = ["plot_tenants", "series"]

#: The latency quantiles drawn, as (label, summary key).
QUANTILES = (("p50", "latency_p50_ms"), ("p99", "latency_p99_ms"),
             ("p99.9", "latency_p999_ms"))


def series(groups):
    """The bars of :func:`plot_tenants`: one dict per tenant and phase, in order, with its
    label, latency quantiles (ms; None where nothing was answered), SLO, attainment of the
    requests sent, throughput and goodput (requests/s).

    ``groups`` is ``[(phase label, [tenant summary, ...]), ...]``."""
    bars = []
    for phase, summaries in groups:
        for s in summaries:
            bars.append({"label": f"{phase}: {s['tenant']}",
                         **{name: s.get(key) for name, key in QUANTILES},
                         "slo_ms": s.get("slo_ms"), "attainment": s.get("slo_attainment"),
                         "throughput": s.get("throughput") or 0.0,
                         "goodput": s.get("goodput") or 0.0})
    return bars


def plot_tenants(groups, path, title):
    """Draw ``groups`` (see :func:`series`) into the PNG ``path``; returns the bars drawn."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on build machines
    import matplotlib.pyplot as plt

    bars = series(groups)
    if not bars:
        raise ValueError("nothing to plot: no tenant summaries")
    x = range(len(bars))
    width = 0.8 / len(QUANTILES)
    figure, (latency, rates) = plt.subplots(2, 1, figsize=(min(20, max(8, 1.2 * len(bars))),
                                                           9), sharex=True)
    for i, (name, _) in enumerate(QUANTILES):
        # Nothing answered: no bar (0 cannot sit on a log axis).
        heights = [b[name] if b[name] else float("nan") for b in bars]
        latency.bar([k + (i - 1) * width for k in x], heights, width, label=name)
    for k, b in enumerate(bars):
        if b["slo_ms"] is not None:
            latency.hlines(b["slo_ms"], k - 0.45, k + 0.45, colors="black", linestyles="--")
            if b["attainment"] is not None:
                latency.annotate(f"SLO {b['slo_ms']:.3g} ms\n{b['attainment']:.1%} met",
                                 (k, b["slo_ms"]), textcoords="offset points",
                                 xytext=(0, 4), ha="center", fontsize=7)
    latency.set_yscale("log")
    latency.set_ylabel("latency (ms, log)")
    latency.legend(fontsize=8)
    latency.set_title("latency per tenant (dashed: SLO)", fontsize=9)
    rates.bar([k - 0.2 for k in x], [b["throughput"] for b in bars], 0.4, label="answered")
    rates.bar([k + 0.2 for k in x], [b["goodput"] for b in bars], 0.4, label="within SLO")
    rates.set_ylabel("requests/s")
    rates.set_xticks(list(x), [b["label"] for b in bars], fontsize=7, rotation=30,
                     ha="right")
    rates.legend(fontsize=8)
    rates.set_title("throughput and goodput", fontsize=9)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return bars
