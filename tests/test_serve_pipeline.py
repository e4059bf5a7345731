"""Pipeline parallelism: a model's layers split in two stages over two devices
when the planner predicts more images a second than data parallelism."""

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sw_driver import InferenceSession
from sw_driver.importer import import_model
from tessera.serve import ServeConfigError, load_config
from tessera.serve.app import create_app
from tessera.serve.pipeline import cut_points, plan, split_model
from tests.serve_helpers import (
    AUTH_A,
    DIGITS,
    TOKEN_A,
    digits_input,
    json_request,
    output_array,
    write_config,
)

LAYERS = ["input_QuantizeLinear", "conv1", "pool1", "conv2", "gap", "flatten", "fc",
          "logits_DequantizeLinear"]


@pytest.fixture(scope="module")
def graph():
    return import_model(str(DIGITS))


def test_cut_points_are_the_single_tensor_boundaries(graph):
    assert [layer.name for layer in graph.layers] == LAYERS
    assert [k for k, _ in cut_points(graph)] == list(range(7))
    assert cut_points(graph)[2] == (2, "p1_QuantizeLinear_Output")


def test_plan_picks_a_pipeline_only_where_devices_differ(graph):
    # "conv" is fast at the convolutions, "host" at the rest: split after pool1.
    conv = dict.fromkeys(LAYERS, 10e-6) | {"conv1": 20e-6, "pool1": 5e-6, "conv2": 40e-6}
    host = dict.fromkeys(LAYERS, 1e-6) | {"conv1": 400e-6, "pool1": 20e-6, "conv2": 900e-6}
    conv.update(gap=300e-6, fc=300e-6)
    chosen = plan(graph, {"conv": conv, "host": host}, ("conv", "host"))
    assert chosen.choice == "pipeline" and chosen.stages[0][1][-1] == "conv2"
    s0 = sum(conv[n] for n in LAYERS[:4])
    s1 = sum(host[n] for n in LAYERS[4:])
    assert chosen.pipeline_images_per_second == pytest.approx(1 / max(s0, s1))
    assert chosen.data_images_per_second == pytest.approx(
        1 / sum(conv.values()) + 1 / sum(host.values()))
    assert chosen.pipeline_images_per_second > chosen.data_images_per_second
    # Equal devices: data parallelism always gives more, unless forced.
    same = {"a": conv, "b": conv}
    assert plan(graph, same, ("a", "b")).choice == "data"
    forced = plan(graph, same, ("a", "b"), force=True)
    assert forced.choice == "pipeline"
    assert forced.pipeline_images_per_second < forced.data_images_per_second


def test_split_model_is_bit_exact(rng):
    first, out_name, second, in_name = split_model(DIGITS, "p1_QuantizeLinear_Output")
    assert (out_name, in_name) == ("p1_DequantizeLinear_Output", "p1")
    s0 = InferenceSession(first, providers=["cpu"])
    s1 = InferenceSession(second, providers=["cpu"])
    assert [layer.name for layer in s1.graph.layers][:2] == ["p1_QuantizeLinear", "conv2"]
    x = digits_input(rng, 7)
    whole = InferenceSession(str(DIGITS), providers=["cpu"]).run(None, {"input": x})[0]
    staged = s1.run(None, {in_name: s0.run(None, {"input": x})[0]})[0]
    assert staged.tobytes() == whole.tobytes()


def pipeline_text(parallelism='"pipeline"', devices='["near", "far"]'):
    return f"""
[devices.near]
workers = 1
[devices.far]
workers = 1

[models.digits]
path = "{DIGITS.as_posix()}"
devices = {devices}
parallelism = {parallelism}
max_batch = 4

[tenants.a]
token = "{TOKEN_A}"
models = ["digits"]
slo_ms = 5000
"""


def test_pipeline_serves_bit_exact_through_both_stages(tmp_path, rng):
    app = create_app(load_config(write_config(tmp_path, text=pipeline_text())))
    model = app.state.models["digits"]
    first, second = model.stages
    assert (first.config.device, second.config.device) == ("near", "far")
    reference = InferenceSession(str(DIGITS), providers=["cpu"])
    client = TestClient(app)
    for n in (1, 3):
        x = digits_input(rng, n)
        answer = client.post("/v2/models/digits/infer", headers=AUTH_A, json=json_request(x))
        assert answer.status_code == 200, answer.text
        assert output_array(answer.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()
    stats = client.get("/v2/models/digits/stats", headers=AUTH_A).json()
    assert stats["parallelism"]["setting"] == "pipeline"
    assert stats["parallelism"]["choice"] == "pipeline"
    split = stats["parallelism"]["split_after"]
    assert [s["device"] for s in stats["parallelism"]["stages"]] == ["near", "far"]
    assert stats["parallelism"]["stages"][0]["layers"][-1] == split
    assert stats["balancing"]["policy"].startswith("pipeline: pipeline near -> far")
    assert {d: v["batches"] for d, v in stats["balancing"]["devices"].items()} == \
        {"near": 2, "far": 2}


def test_auto_keeps_data_parallelism_on_equal_devices(tmp_path):
    app = create_app(load_config(write_config(tmp_path, text=pipeline_text('"auto"'))))
    stats = TestClient(app).get("/v2/models/digits/stats", headers=AUTH_A).json()
    chosen = stats["parallelism"]
    assert chosen["setting"] == "auto" and chosen["choice"] == "data"
    rates = chosen["predicted_images_per_second"]
    assert rates["data"] > rates["pipeline"] > 0
    assert app.state.models["digits"].stages == ()


@pytest.mark.parametrize("parallelism, devices, message", [
    ('"sideways"', '["near", "far"]', r"parallelism must be one of \['data', 'pipeline', "
                                      r"'auto'\], not 'sideways'"),
    ('"pipeline"', '["near"]', r"parallelism = 'pipeline' needs devices = \[first stage, "
                               r"second stage\]"),
])
def test_pipeline_config_errors(tmp_path, parallelism, devices, message):
    with pytest.raises(ServeConfigError, match=r"\[models.digits\] " + message):
        load_config(write_config(tmp_path, text=pipeline_text(parallelism, devices)))


def test_plan_describes_itself(graph):
    times = {d: dict.fromkeys(LAYERS, 1e-5) for d in ("a", "b")}
    line = plan(graph, times, ("a", "b"), force=True).describe()
    assert line.startswith("pipeline a -> b, split after layer 'conv2'")
    assert np.isfinite(plan(graph, times, ("a", "b")).data_images_per_second)
