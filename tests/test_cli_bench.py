"""`tessera bench` runs each benchmark's ``main()`` with the CLI's own words in sys.argv."""

import sys

import pytest

import bench.bench_fmax as bench_fmax


class Reached(Exception):
    """Raised by the stand-in for the board report: option parsing got through."""


def test_fmax_benchmark_ignores_the_cli_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tessera", "bench"])

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(bench_fmax, "fresh_report", stop)
    with pytest.raises(Reached):
        bench_fmax.main()


def test_fmax_benchmark_still_takes_its_own_options(monkeypatch):
    seen = {}

    def stop(board, config, build_root, **options):
        seen.update(board=board, rows=config.rows)
        raise Reached

    monkeypatch.setattr(bench_fmax, "fresh_report", stop)
    with pytest.raises(Reached):
        bench_fmax.main(["--board", "ulx3s-25f", "--rows", "4", "--cols", "4"])
    assert seen == {"board": "ulx3s-25f", "rows": 4}
