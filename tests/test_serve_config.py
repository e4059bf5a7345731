"""`tessera serve` configuration: a good file loads, each mistake is named at startup."""

import subprocess
import sys
from pathlib import Path

import pytest

from tessera.cli import main
from tessera.serve.config import ServeConfigError, load_config, parse_config
from tests.serve_helpers import CONFIG, DIGITS, TOKEN_A, write_config


def test_config_loads(tmp_path):
    config = load_config(write_config(tmp_path, burst_a=3))
    assert config.host == "127.0.0.1" and config.port == 0
    assert config.devices["cpu"].workers == 2
    assert config.models["digits"].path == DIGITS and config.models["digits"].device == "cpu"
    a, b = config.tenants["a"], config.tenants["b"]
    assert (a.token, a.models, a.priority, a.slo_ms, a.rate, a.burst) == (
        TOKEN_A, ("digits",), "high", 2000.0, 10.0, 3)
    assert (b.priority, b.slo_ms) == ("low", None)


def _base():
    return {"models": {"m": {"path": str(DIGITS)}},
            "tenants": {"t": {"token": TOKEN_A, "models": ["m"]}}}


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(extra=1), r"unknown key\(s\) \['extra'\] in the top level"),
    (lambda c: c["models"]["m"].update(batch=4), r"unknown key\(s\) \['batch'\] in \[models.m\]"),
    (lambda c: c["tenants"]["t"].update(rate_limit=4),
     r"unknown key\(s\) \['rate_limit'\] in \[tenants.t\]; allowed: \['burst'"),
    (lambda c: c["models"]["m"].update(path="nowhere.onnx"),
     r"\[models.m\] path: no such file '.*nowhere.onnx'"),
    (lambda c: c["models"]["m"].update(device="fpga0"),
     r"\[models.m\] device 'fpga0' is not declared; devices: \['cpu'\]"),
    (lambda c: c["tenants"]["t"].update(token="short"),
     r"\[tenants.t\] token must be a string of at least 16"),
    (lambda c: c["tenants"]["t"].update(token_env="X"), r"\[tenants.t\] needs exactly one of"),
    (lambda c: c["tenants"].update(u={"token": TOKEN_A, "models": ["m"]}),
     r"\[tenants.u\] has the same token as \[tenants.t\]"),
    (lambda c: c["tenants"]["t"].update(models=["n"]),
     r"\[tenants.t\] models \['n'\] are not declared; models: \['m'\]"),
    (lambda c: c["tenants"]["t"].update(priority="urgent"),
     r"priority must be one of \['high', 'normal', 'low'\], not 'urgent'"),
    (lambda c: c["tenants"]["t"].update(rate=0), r"\[tenants.t\] rate must be a positive number"),
    (lambda c: c["tenants"]["t"].update(burst=1.5),
     r"\[tenants.t\] burst must be a positive integer, not 1.5"),
    (lambda c: c["tenants"]["t"].update(slo_ms=-1), r"slo_ms must be a positive number"),
    (lambda c: c.update(server={"host": "0.0.0.0"}),
     r"\[server\] host must be a loopback address such as '127.0.0.1', not '0.0.0.0'"),
    (lambda c: c.update(server={"port": 70000}), r"\[server\] port must be an integer"),
    (lambda c: c.update(devices={"cpu": {"max_queue": 0}}),
     r"\[devices.cpu\] max_queue must be a positive integer, not 0"),
    (lambda c: c.update(devices={"cpu": {"workers": 1, "queue": 3}}),
     r"unknown key\(s\) \['queue'\] in \[devices.cpu\]; allowed: "
     r"\['config', 'instances', 'max_queue', 'probe_s', 'process', 'providers', "
     r"'timeout_s', 'workers'\]"),
    (lambda c: c["models"]["m"].update(max_batch=0),
     r"\[models.m\] max_batch must be a positive integer, not 0"),
    (lambda c: c["models"]["m"].update(max_batch=8, max_queue_delay_ms=-1),
     r"\[models.m\] max_queue_delay_ms must be a number of milliseconds from 0 to 1000, "
     r"not -1"),
    (lambda c: c["models"]["m"].update(max_batch=8, preferred_batch_sizes=[4, 16]),
     r"\[models.m\] preferred_batch_sizes must be increasing integers from 1 to max_batch "
     r"\(8\), not \[4, 16\]"),
    (lambda c: c["models"]["m"].update(max_batch=8, preferred_batch_sizes=[4, 2]),
     r"preferred_batch_sizes must be increasing"),
    (lambda c: c["models"]["m"].update(max_queue_delay_ms=5),
     r"\[models.m\] max_queue_delay_ms and preferred_batch_sizes shape dynamic batches, "
     r"which need max_batch > 1 \(it is 1\)"),
    (lambda c: c.update(devices={"cpu": {"probe_s": 0}}),
     r"\[devices.cpu\] probe_s must be a positive number, not 0"),
    (lambda c: c.update(devices={"cpu": {"probe_s": 7200}}),
     r"\[devices.cpu\] probe_s must be at most 3600 seconds"),
    (lambda c: c.update(tenants={}), r"no tenants"),
    (lambda c: c.update(models={}), r"no models"),
])
def test_config_errors_name_the_key(change, message):
    data = _base()
    change(data)
    with pytest.raises(ServeConfigError, match=message):
        parse_config(data, source="serve.toml")


def test_batch_shaping_loads():
    data = _base()
    data["models"]["m"].update(max_batch=8, max_queue_delay_ms=2.5, preferred_batch_sizes=[4, 8])
    model = parse_config(data, source="serve.toml").models["m"]
    assert (model.max_queue_delay_ms, model.preferred_batch_sizes) == (2.5, (4, 8))
    assert parse_config(_base(), source="serve.toml").models["m"].max_queue_delay_ms == 0.0


def test_token_from_environment():
    data = _base()
    del data["tenants"]["t"]["token"]
    data["tenants"]["t"]["token_env"] = "TESSERA_TOKEN_T"
    config = parse_config(data, environ={"TESSERA_TOKEN_T": TOKEN_A})
    assert config.tenants["t"].token == TOKEN_A
    with pytest.raises(ServeConfigError, match="'TESSERA_TOKEN_T' is not set"):
        parse_config(data, environ={})


def test_unreadable_files(tmp_path):
    with pytest.raises(ServeConfigError, match="cannot read serve config '.*missing.toml'"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ServeConfigError, match="serve.toml: not valid TOML"):
        load_config(write_config(tmp_path, text="[models\n"))


def test_cli_reports_config_error(tmp_path, capsys):
    path = write_config(tmp_path, text=CONFIG.format(burst_a=1, burst_b=1).replace(
        'priority = "high"', 'priority = "urgent"'))
    assert main(["serve", "--config", str(path)]) == 2
    out = capsys.readouterr().out
    assert "error:" in out and "[tenants.a] priority" in out


def test_runtime_does_not_import_the_web_stack():
    code = ("import sys, sw_driver, tessera.cli, tessera.serve, tessera.serve.config\n"
            "loaded = {'fastapi', 'uvicorn', 'starlette', 'prometheus_client'} & set(sys.modules)\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_shipped_example_loads():
    example = Path(__file__).resolve().parent.parent / "tessera" / "serve" / "example.toml"
    config = load_config(example)
    assert config.host == "127.0.0.1" and config.models["digits"].path.resolve() == DIGITS
    assert sorted(config.tenants) == ["alice", "bob"]
