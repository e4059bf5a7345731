"""What a new user reads: the profile and load-test tables in an 80-column terminal or a log,
the status `tessera serve` exits with after a clean drain, and the rates a load test
reports for a tenant stopped at its request cap."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tessera import cli
from tessera.commands import demo as demo_commands
from tessera.commands import run as run_commands
from tessera.commands import serve as serve_commands
from tessera.serve.loadgen import TenantLoad, _Record, run_load, summarize
from tessera.tables import WIDTH, loadtest_notes, loadtest_table, short_reason
from tests.serve_helpers import write_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tessera" / "serve" / "example.toml"

#: Placement reasons as the planner words them for the digits CNN on ["sim", "cpu"].
DECLINED = ("sim declined: the device runs Conv, Dense, MatMul, 2x2 MaxPool, "
            "GlobalAveragePool and Add, not {op}; then cpu: the CPU provider runs every layer "
            "kind (golden model)")
ON_SIM = ("sim: {op} on the 8x8 engine (Verilator twin) (~2,120 cycles in 1 pass(es); "
          "placed by order: no time model)")
DIGITS_LAYERS = [("input_QuantizeLinear", "Quantize", "cpu", None),
                 ("conv1", "Conv", "sim", 211_950), ("pool1", "MaxPool", "sim", 0),
                 ("conv2", "Conv", "sim", 965_250), ("gap", "GlobalAveragePool", "cpu", None),
                 ("flatten", "Flatten", "cpu", None), ("fc", "Dense", "sim", 43_537),
                 ("logits_DequantizeLinear", "Dequantize", "cpu", None)]


def _totals():
    totals = {}
    for i, (name, op, provider, cycles) in enumerate(DIGITS_LAYERS):
        reason = (ON_SIM if provider == "sim" else DECLINED).format(op=op)
        totals[name] = {"layer": name, "op": op, "provider": provider, "reason": reason,
                        "seconds": 1.5 * (i + 1), "bytes": 2_548_800 * (provider == "sim")}
        if cycles is not None:
            totals[name]["cycles"] = cycles
    return totals


def _render(*renderables):
    console = Console(width=WIDTH, record=True, file=open(os.devnull, "w"))
    for renderable in renderables:
        console.print(renderable)
    console.file.close()
    return console.export_text()


def _assert_fits(text, headers):
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, f"lines over {WIDTH} columns:\n" + "\n".join(too_wide)
    # The header line: the one holding most of the headers (titles hold "layer", "load").
    header = max(lines, key=lambda line: sum(name in line for name in headers))
    for name in headers:
        assert name in header, f"header {name!r} not whole in {header!r}:\n{text}"


def _assert_rows_short(text, rows):
    """Each row takes at most two lines (a long layer name folds once): a cell wrapped one
    word a line made the demo's profile about 100 lines long."""
    table_lines = [line for line in text.splitlines() if line.strip()]
    assert len(table_lines) <= 3 + 2 * rows, text


def test_demo_profile_fits_80_columns():
    totals = _totals()
    text = _render(demo_commands._demo_profile_table(totals, 450))
    _assert_rows_short(text, len(totals))
    _assert_fits(text, ["layer", "op", "provider", "cycles", "time ms", "bytes", "why there"])
    row = next(line for line in text.splitlines() if line.startswith("gap"))
    assert "sim declined" in row and "842" not in row, row


@pytest.mark.parametrize("full", [False, True])
def test_run_profile_fits_80_columns_and_keeps_the_whole_reason(full):
    totals = _totals()
    text = _render(run_commands._profile_table(totals, 9, full))
    table, _, below = text.partition("why there, in full:")
    _assert_rows_short(table, len(totals))
    headers = ["layer", "op", "provider", "time ms", "share", "bytes"]
    _assert_fits(text, headers + (["ms/batch"] if full else ["why there"]))
    if full:  # every reason whole below the table, wrapped at spaces only
        flat = " ".join(below.split())
        for entry in totals.values():
            assert " ".join(entry["reason"].split()) in flat, entry["reason"]
    else:
        assert not below


def test_run_profile_command_prints_for_80_columns(monkeypatch, capsys):
    monkeypatch.setattr(run_commands, "console", Console(width=WIDTH))
    digits = str(ROOT / "models" / "zoo" / "digits_qdq.onnx")
    assert cli.main(["run", digits, "--samples", "4", "--profile"]) == 0
    text = capsys.readouterr().out
    _assert_fits(text, ["layer", "op", "provider", "time ms", "share", "bytes", "ms/batch"])
    assert "why there, in full:" in text
    flat = " ".join(text.split())
    assert "conv1 cpu: the CPU provider runs every layer kind (golden model)" in flat
    assert cli.build_parser().parse_args(["demo", "--verbose"]).verbose  # the same, in demo


def test_short_reason_labels():
    assert short_reason(DECLINED.format(op="Flatten")) == "sim declined"
    assert short_reason(ON_SIM.format(op="Conv")) == "first choice"
    assert short_reason("opencl declined: x; sim declined: y; then cpu: z") == \
        "opencl+sim declined"
    assert short_reason("cpu: a; est. 1 ms (model) beats opencl est. 2 ms") == \
        "fastest estimate"
    assert short_reason("sim: Conv; fell back to cpu: sim met device faults") == "fell back"
    assert short_reason("sim: Conv; ran again on sim after a reset, following a device "
                        "fault (timeout)") == "rerun after fault"
    assert len(short_reason("a-long-name declined: x; another-long-one declined: y")) <= 20


def _tenant(name, n, seconds, *, rate=None, concurrency=None, cap=10_000, capped=False):
    load = TenantLoad(name, "t", "digits", [None], rate=rate, concurrency=concurrency,
                      slo_ms=50)
    load.records = [_Record(i, 200, 0.003, correct=True) for i in range(n)]
    load.records.append(_Record(n, 503, 0.001))
    load.seconds, load.max_requests, load.capped = seconds, cap, capped
    return load


def _loadtest_result():
    alice = _tenant("alice", 480, 10.02, rate=50.0)
    bob = _tenant("bob-the-tenant", 9_999, 4.0, concurrency=16, capped=True)
    return {"url": "http://127.0.0.1:8000", "duration": 10.0, "max_requests": 10_000,
            "seconds": 10.1, "seed": 0, "images_per_request": 1,
            "tenants": [summarize(alice), summarize(bob)], "predictors": {}}


def test_loadtest_table_fits_80_columns_and_states_the_cap():
    result = _loadtest_result()
    text = _render(loadtest_table(result), *loadtest_notes(result))
    _assert_fits(text, ["tenant", "load", "sent", "answered", "req/s", "p50 ms", "p99 ms",
                        "p99.9 ms", "SLO met"])
    flat = " ".join(text.split())
    assert "or 10,000 requests (--duration, --max-requests)" in flat
    assert ("bob-the-tenant: by status 200: 9999, 503: 1; 0 lost, 0 wrong of 9999 checked; "
            "stopped at the cap of 10,000 requests, its last answer after 4.0 s") in flat
    assert "alice: by status 200: 480, 503: 1" in flat and "rates over 10.0 s" in flat
    bob = next(line for line in text.splitlines() if line.startswith("bob"))
    assert "2499.8" in bob, bob  # 9,999 answers over its 4.0 s, not over the 10 s


def test_loadtest_command_prints_for_80_columns(tmp_path, monkeypatch, capsys):
    import tessera.serve.loadtest as loadtest

    monkeypatch.setattr(serve_commands, "console", Console(width=WIDTH))
    monkeypatch.setattr(loadtest, "run_loadtest", lambda *a, **k: _loadtest_result())
    out = tmp_path / "load.json"
    assert cli.main(["loadtest", "--config", str(write_config(tmp_path)), "--tenant", "a=5",
                     "--out", str(out)]) == 0
    text = capsys.readouterr().out
    _assert_fits(text, ["tenant", "load", "sent", "answered", "req/s", "p99.9 ms", "SLO met"])
    written = json.loads(out.read_text())  # the JSON keeps every figure
    assert written["max_requests"] == 10_000 and written["tenants"][1]["capped"] is True
    assert written["tenants"][1]["by_status"] == {"200": 9_999, "503": 1}


class _AnswerEverything(threading.Thread):
    """A loopback HTTP/1.1 server that answers every request at once with 200 and an empty
    JSON body, on keep-alive connections: load without a model behind it."""

    def __init__(self):
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def run(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def serve(conn):
        with conn, conn.makefile("rb") as reader:
            while True:
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if not line:
                    return
                reader.read(length)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")


def test_a_capped_tenant_rates_over_its_own_time():
    server = _AnswerEverything()
    server.start()
    try:
        capped = TenantLoad("capped", "t", "m", [np.zeros(1, "f4")],
                            concurrency=2)
        steady = TenantLoad("steady", "t", "m", capped.inputs, rate=20.0)
        seconds = run_load(server.url, [capped, steady], duration=1.0, max_requests=20,
                           seed=5)
    finally:
        server.listener.close()
    a, b = summarize(capped, seconds), summarize(steady, seconds)
    assert a["answered"] == 20 and a["capped"] and a["max_requests"] == 20
    assert not b["capped"] and 0 < b["sent"] < 20
    # The capped tenant's 20 answers came in well before the 1 s the other tenant ran.
    assert a["seconds"] < 0.5 * b["seconds"] and b["seconds"] >= 0.9, (a, b)
    assert a["throughput"] == pytest.approx(20 / a["seconds"])
    assert b["throughput"] == pytest.approx(b["answered"] / b["seconds"])


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_exits_0_after_a_clean_drain(stop):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "tessera.cli", "serve", "--config", str(EXAMPLE), "--port",
         str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "tessera serve did not become ready"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready",
                                            timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        process.send_signal(stop)
        output = process.communicate(timeout=15)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "Traceback" not in output and "Finished server process" in output, output
