"""Spatial sharing: N accelerator instances on one FPGA, tenants pinned to them."""

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from fastapi.testclient import TestClient

from contract.config_file import PRESETS
from contract.regmap import ID_VALUE, REGISTERS
from hw.multi_top import INSTANCE_WINDOW, MultiTop, instance_base
from sw_driver import InferenceSession
from tessera.serve import ServeConfigError, load_config
from tessera.serve.app import create_app
from tessera.serve.config import parse_config
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    DIGITS,
    TOKEN_A,
    TOKEN_B,
    digits_input,
    json_request,
    output_array,
    write_config,
)

TINY = PRESETS["tiny"]
OFFSET = {r.name: r.offset for r in REGISTERS}


def test_multi_top_windows_are_distinct():
    """Each instance answers its own window; a write to one leaves the other unchanged."""
    dut = MultiTop(TINY, instances=2)
    seen = {}

    async def read(ctx, addr):
        ctx.set(dut.csr.addr, addr)
        ctx.set(dut.csr.r_en, 1)
        await ctx.tick()
        ctx.set(dut.csr.r_en, 0)
        await ctx.tick()  # r_data holds the answer after the read's cycle
        return ctx.get(dut.csr.r_data)

    async def write(ctx, addr, value):
        ctx.set(dut.csr.addr, addr)
        ctx.set(dut.csr.w_data, value)
        ctx.set(dut.csr.w_en, 1)
        await ctx.tick()
        ctx.set(dut.csr.w_en, 0)

    async def bench(ctx):
        opcode = OFFSET["OPCODE"]
        seen["id"] = [await read(ctx, instance_base(i) + OFFSET["ID"]) for i in range(2)]
        await write(ctx, instance_base(1) + opcode, 0x3)
        await write(ctx, instance_base(0) + opcode, 0x1)
        seen["opcode"] = [await read(ctx, instance_base(i) + opcode) for i in range(2)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert INSTANCE_WINDOW == 0x400
    assert seen["id"] == [ID_VALUE, ID_VALUE]
    assert seen["opcode"] == [0x1, 0x3]


def test_multi_top_verilog_has_every_instance_and_its_streams():
    text = verilog.convert(MultiTop(TINY, instances=3), name="multi_top", emit_src=False)
    for i in range(3):
        assert f"h2c_{i}__valid" in text and f"c2h_{i}__payload" in text
        assert f"\\inst{i}" in text or f"inst{i} " in text
    assert "inst3" not in text
    assert "input [11:0] csr__addr" in text  # 10 bits per window, 2 to select of 3


@pytest.mark.parametrize("bad", [0, 17, True, 2.0])
def test_multi_top_refuses_bad_instance_counts(bad):
    with pytest.raises(ValueError, match=f"instances must be an integer from 1 to 16, not "
                                         f"{bad!r}"):
        MultiTop(TINY, instances=bad)


# ---------------------------------------------------------------- serving: instances

SPATIAL_CONFIG = """
[devices.fpga]
instances = 3
config = "tiny"
providers = ["cpu"]   # the tests' stand-in for each instance's twin

[models.digits]
path = "{digits}"
devices = ["fpga"]

[tenants.a]
token = "{token_a}"
models = ["digits"]
instances = {{ fpga = [0] }}

[tenants.b]
token = "{token_b}"
models = ["digits"]
{b_line}
"""


def spatial_config(tmp_path, b_line="instances = { fpga = [1, 2] }", extra=""):
    text = SPATIAL_CONFIG.format(digits=DIGITS.as_posix(), token_a=TOKEN_A, token_b=TOKEN_B,
                                 b_line=b_line) + extra
    return write_config(tmp_path, text=text)


def test_instances_expand_into_devices_given_to_tenants(tmp_path):
    config = load_config(spatial_config(tmp_path))
    assert [(d.name, d.group, d.index, d.workers, d.engine.rows) for d in
            config.devices.values() if d.group] == [
        ("fpga/0", "fpga", 0, 1, 2), ("fpga/1", "fpga", 1, 1, 2), ("fpga/2", "fpga", 2, 1, 2)]
    assert config.models["digits"].devices == ("fpga/0", "fpga/1", "fpga/2")
    assert config.tenants["a"].instances == ("fpga/0",)
    assert config.devices_for("a", "digits") == ("fpga/0",)
    assert config.devices_for("b", "digits") == ("fpga/1", "fpga/2")
    assert config.owner("fpga/2") == "b"
    # A tenant without instances shares those nobody was given.
    shared = load_config(spatial_config(tmp_path, b_line=""))
    assert shared.devices_for("b", "digits") == ("fpga/1", "fpga/2")
    assert shared.owner("fpga/1") is None


@pytest.mark.parametrize("b_line, extra, message", [
    ("instances = { fpga = [0] }", "",
     r"\[tenants.b\] instances.fpga: instance 0 is already given to \[tenants.a\]"),
    ("instances = { fpga = [3] }", "",
     r"\[tenants.b\] instances.fpga: 'fpga' has instances 0 to 2, not 3"),
    ("instances = { gpu = [0] }", "",
     r"\[tenants.b\] instances.gpu: no device 'gpu' with instances is declared"),
    ("instances = { fpga = [1, 1] }", "",
     r"\[tenants.b\] instances.fpga must be a non-empty list of distinct instance numbers"),
    ("instances = { fpga = [] }", "",
     r"\[tenants.b\] instances.fpga must be a non-empty list"),
    ("instances = { fpga = [1, 2] }",
     '\n[tenants.c]\ntoken = "tenant-c-token-5555555555"\nmodels = ["digits"]\n'
     'instances = {}\n[tenants.d]\ntoken = "tenant-d-token-5555555555"\nmodels = ["digits"]\n',
     r"\[tenants.c\] model 'digits' runs only on instances given to other tenants"),
])
def test_bad_instance_assignments_are_refused(tmp_path, b_line, extra, message):
    with pytest.raises(ServeConfigError, match=message):
        load_config(spatial_config(tmp_path, b_line=b_line, extra=extra))


@pytest.mark.parametrize("device, message", [
    ({"instances": 0, "config": "tiny"}, r"\[devices.fpga\] instances must be an integer "
                                         r"from 1 to 16"),
    ({"instances": 2}, r"\[devices.fpga\] config must name each instance's engine"),
    ({"instances": 2, "config": "huge"}, r"\[devices.fpga\] config: .*huge"),
    ({"instances": 2, "config": "tiny", "workers": 2}, r"\[devices.fpga\] has instances; "
                                                        r"workers does not apply"),
])
def test_bad_instance_devices_are_refused(device, message):
    data = {"devices": {"fpga": device},
            "models": {"m": {"path": DIGITS.as_posix(), "devices": ["fpga"]}},
            "tenants": {"a": {"token": TOKEN_A, "models": ["m"]}}}
    with pytest.raises(ServeConfigError, match=message):
        parse_config(data, source="s.toml")


def test_each_tenant_runs_only_on_its_instances(tmp_path, rng):
    app = create_app(load_config(spatial_config(tmp_path)))
    model = app.state.models["digits"]
    ran = []
    for device, session in model.sessions.items():
        def run(names, feeds, _device=device, _run=session.run):
            ran.append(_device)
            return _run(names, feeds)
        session.run = run
    reference = InferenceSession(str(DIGITS), providers=["cpu"])
    client = TestClient(app)
    who = []
    for i in range(6):
        auth, tenant = (AUTH_A, "a") if i % 2 == 0 else (AUTH_B, "b")
        x = digits_input(rng, 1)
        answer = client.post("/v2/models/digits/infer", headers=auth, json=json_request(x))
        assert answer.status_code == 200
        assert output_array(answer.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()
        who.append(tenant)
    assert len(ran) == 6
    assert all((d == "fpga/0") == (t == "a") for d, t in zip(ran, who, strict=True)), ran
    stats = client.get("/v2/models/digits/stats", headers=AUTH_A).json()["balancing"]
    assert {d: (v["tenant"], v["batches"]) for d, v in stats["devices"].items()} == {
        "fpga/0": ("a", 3), "fpga/1": ("b", ran.count("fpga/1")),
        "fpga/2": ("b", ran.count("fpga/2"))}


# ---------------------------------------------------------------- the bench

def test_queue_models_on_known_arrivals():
    from bench.bench_spatial import serve_fcfs, serve_fcfs_pool, serve_priority

    # One engine, 2 s a run: the second waits for the first, the third finds it idle.
    assert serve_fcfs(np.array([0.0, 1.0, 10.0]), 2.0).tolist() == [2.0, 3.0, 2.0]
    # Two engines: the third request waits for the first engine to free at 2.
    assert serve_fcfs_pool(np.array([0.0, 0.5, 1.0]), 2.0, 2).tolist() == [2.0, 2.0, 3.0]
    # B arrives first and runs (no preemption); A, arriving during it, overtakes the
    # B that waits.
    high, low = serve_priority(np.array([0.5]), np.array([0.0, 0.1]), 1.0)
    assert high.tolist() == [1.5] and low.tolist() == [1.0, 2.9]


def test_bench_record_shape(tmp_path, monkeypatch):
    import json

    from bench import bench_spatial
    from tessera import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    path = bench_spatial.main(["--no-synth", "--requests", "300"])
    record = json.loads(path.read_text())
    assert record["benchmark"] == "spatial" and path.name == "spatial.json"
    assert record["temporal"]["preset"] == "ulx3s-85f" and record["spatial"]["instances"] == 2
    # The digits CNN's five accelerator layers, counted by the planner for each engine.
    assert set(record["spatial"]["layers"]) == {"conv1", "pool1", "conv2", "gap", "fc"}
    assert record["spatial"]["cycles_per_image"] == sum(record["spatial"]["layers"].values())
    names = {m["name"]: m for m in record["metrics"]}
    t, s = names["temporal throughput"]["value"], names["spatial throughput"]["value"]
    assert names["spatial throughput"]["peer_value"] == t
    assert names["spatial / temporal throughput"]["value"] == pytest.approx(s / t, abs=2e-3)
    for scenario, tenants in record["latency"].items():
        for tenant, modes in tenants.items():
            for mode, q in modes.items():
                assert 0 < q["p50"] <= q["p99"], (scenario, tenant, mode)


def test_verilog_build_option_writes_the_multi_top(tmp_path, capsys):
    from tessera.cli import main

    assert main(["verilog", "--target", "multi", "--instances", "2", "--config", "tiny",
                 "--build", str(tmp_path)]) == 0
    path = tmp_path / f"{TINY.name}-x2" / "multi_top.v"
    text = path.read_text()
    assert "module multi_top" in text and "h2c_1__valid" in text and "h2c_2" not in text
    assert main(["verilog", "--target", "multi", "--instances", "0", "--config", "tiny",
                 "--build", str(tmp_path)]) != 0
    assert "instances must be an integer from 1 to 16, not 0" in capsys.readouterr().out
