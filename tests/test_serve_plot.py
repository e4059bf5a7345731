"""The load test's plot (tessera/serve/plot.py): the bars come from the summaries, and the
PNG is written."""

import pytest

from tessera.serve.plot import plot_tenants, series


def _summary(tenant, p50, slo_ms=None, attainment=None, answered=10.0, goodput=None):
    return {"tenant": tenant, "latency_p50_ms": p50, "latency_p99_ms": 2 * p50,
            "latency_p999_ms": 3 * p50, "slo_ms": slo_ms, "slo_attainment": attainment,
            "throughput": answered, "goodput": answered if goodput is None else goodput}


def test_series_follows_the_summaries():
    groups = [("mixed", [_summary("a", 4.0, 10.0, 0.75, 100.0, 75.0), _summary("b", 50.0)]),
              ("b alone", [_summary("b", 20.0, answered=300.0)])]
    bars = series(groups)
    assert [b["label"] for b in bars] == ["mixed: a", "mixed: b", "b alone: b"]
    assert [(b["p50"], b["p99"], b["p99.9"]) for b in bars] == [
        (4.0, 8.0, 12.0), (50.0, 100.0, 150.0), (20.0, 40.0, 60.0)]
    assert (bars[0]["slo_ms"], bars[0]["attainment"], bars[0]["goodput"]) == (10.0, 0.75, 75.0)
    assert bars[1]["slo_ms"] is None and bars[2]["throughput"] == 300.0


def test_plot_writes_a_png(tmp_path):
    # A tenant with nothing answered (no latencies) is drawn without bars, not refused.
    nothing = {**_summary("a", 1.0), "latency_p50_ms": None, "latency_p99_ms": None,
               "latency_p999_ms": None, "throughput": 0.0, "goodput": 0.0}
    path = tmp_path / "serve.png"
    bars = plot_tenants([("mixed", [_summary("a", 4.0, 10.0, 0.5), nothing])], path, "t")
    assert len(bars) == 2 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_tenants([], tmp_path / "empty.png", "t")
