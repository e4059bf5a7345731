"""`tessera loadtest` and the load generator behind it (tessera/serve/loadgen.py): parsing, the
loopback rule, the per-tenant figures, and a short bounded load against a live server."""

import json

import pytest

from tessera.cli import main
from tessera.serve import load_config
from tessera.serve.app import create_app
from tessera.serve.loadgen import TenantLoad, _Record, check_loopback, server_counts, summarize
from tessera.serve.loadtest import parse_load, run_loadtest
from tests.serve_helpers import running, write_config


def test_parse_load():
    assert parse_load("a=12.5") == ("a", 12.5, None)
    assert parse_load("b=c4") == ("b", None, 4)
    for bad in ("a", "=3", "a=0", "a=-1", "a=c0", "a=cx", "a=fast"):
        with pytest.raises(ValueError, match="expected NAME=RATE"):
            parse_load(bad)


def test_load_goes_to_loopback_only():
    assert check_loopback("http://127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert check_loopback("http://localhost:9") == ("localhost", 9)
    for url in ("http://10.0.0.1:8000", "http://example.com", "https://127.0.0.1:1"):
        with pytest.raises(ValueError, match="loopback addresses only"):
            check_loopback(url)


def test_summarize_counts_and_quantiles():
    load = TenantLoad("a", "t", "m", [None], slo_ms=10.0)
    # 100 answers of 1..100 ms, two 503s, one lost.
    load.records = [_Record(i, 200, (i + 1) / 1e3, correct=True) for i in range(100)]
    load.records += [_Record(100, 503, 0.001), _Record(101, 503, 0.001),
                     _Record(102, None, 5.0)]
    s = summarize(load, seconds=2.0)
    assert s["sent"] == 103 and s["answered"] == 100 and s["lost"] == 1
    assert s["by_status"] == {"200": 100, "503": 2, "lost": 1}
    assert s["latency_p50_ms"] == pytest.approx(50) and s["latency_p99_ms"] == pytest.approx(99)
    assert s["latency_p999_ms"] == pytest.approx(100)
    assert s["slo_attainment"] == pytest.approx(10 / 103)  # refusals count as misses
    assert s["slo_attainment_answered"] == pytest.approx(0.1)
    assert s["throughput"] == 50 and s["goodput"] == 5
    assert s["checked"] == 100 and s["wrong"] == 0 and s["answered_twice"] == 0


def test_loadtest_against_a_live_server(tmp_path):
    config = load_config(write_config(tmp_path))
    with running(create_app(config)) as url:
        # Bounded by the request count: 10 s leaves room on a loaded machine (with 1 s, the
        # three clients sometimes sent fewer than 30 while other jobs held the cores).
        result = run_loadtest(config, [parse_load("a=c3"), parse_load("b=40")], url=url,
                              duration=10.0, max_requests=30, seed=3)
        a, b = result["tenants"]
        assert a["sent"] == 30  # three clients share the 30 requests
        assert 0 < b["sent"] <= 30  # Poisson at 40/s for 1 s (seeded), capped at 30
        for t in (a, b):
            assert t["by_status"] == {"200": t["sent"]}, t
            assert t["checked"] == t["sent"] and t["wrong"] == 0 and t["lost"] == 0
        assert a["slo_ms"] == 2000 and a["slo_attainment"] == 1.0
        assert result["predictors"]["digits"]["runs_measured"] > 0
        assert server_counts(url, "a") == {"answered": 30, "slo_violations": 0,
                                           "slo_attainment_answered": 1.0}
        out = tmp_path / "load.json"
        code = main(["loadtest", "--config", str(tmp_path / "serve.toml"), "--url", url,
                     "--tenant", "a=c2", "--duration", "1", "--max-requests", "8",
                     "--out", str(out), "--plot", str(tmp_path / "load.png")])
        assert code == 0
        (only,) = json.loads(out.read_text())["tenants"]
        assert only["tenant"] == "a" and only["by_status"] == {"200": 8}
        assert (tmp_path / "load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loadtest_refuses_unknown_tenant_and_remote_url(tmp_path, capsys):
    path = str(write_config(tmp_path))
    assert main(["loadtest", "--config", path, "--tenant", "zed=5"]) == 2
    assert "--tenant 'zed' is not a tenant; tenants: ['a', 'b']" in capsys.readouterr().out
    assert main(["loadtest", "--config", path, "--tenant", "a=5", "--url",
                 "http://192.168.1.1:80"]) == 2
    assert "loopback addresses only" in capsys.readouterr().out
