"""The zoo's sequence models on ["sim", "cpu"]: every Dense and MatMul on the Verilator
twin, the other sequence layers (refused by the device with a reason) on the CPU provider;
outputs equal bit for bit with "cpu" alone. Same 4x4 twin configuration as
tests/test_providers_sim.py, so the cached build is shared."""

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo.digits import load_digits_split
from sw_driver import InferenceSession
from sw_driver.providers import SimProvider

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)


@pytest.fixture(scope="module")
def sim():
    provider = SimProvider(CONFIG, log=lambda message: None)
    yield provider
    provider.close()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["models/zoo/vit_qdq.onnx", "models/zoo/rowgru_qdq.onnx"])
def test_sequence_models_on_the_twin(sim, path):
    _, _, x, _ = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)[:16]
    want = InferenceSession(path, providers=["cpu"]).run(None, {"input": x})[0]
    session = InferenceSession(path, providers=[sim, "cpu"])
    got = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    dense = [r for r in rows if r["op"] == "Dense"]
    assert dense and all(r["provider"] == "sim" for r in dense)
    # Activation x activation MatMuls (the ViT's attention) run as Dense passes too.
    assert all(r["provider"] == "sim" for r in rows if r["op"] == "MatMul")
    for row in rows:
        if row["op"] in ("LayerNormalization", "Softmax", "GRU", "Erf"):
            assert row["provider"] == "cpu"
            assert row["fell_back_from"][0]["provider"] == "sim"
            assert row["op"] in row["fell_back_from"][0]["why"]
