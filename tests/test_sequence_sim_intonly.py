"""Integer-only mode on the Verilator twin: one seeded encoder block on
["sim", "cpu"] with ``sequence_mode="integer"``. Its weight GEMMs (Dense) run on the twin,
the integer Softmax/LayerNorm/GELU on the host, and the outputs equal the integer-only
golden model (the CPU provider in integer mode) bit for bit. Same 4x4 twin configuration as
tests/test_sequence_sim.py, so the cached build is shared; few samples, one block."""

import numpy as np
import pytest
import qdq_models
import sequence_models

from contract.config import ArrayConfig, ConvEngineConfig
from sw_driver import InferenceSession
from sw_driver.providers import SimProvider

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
SEED = 1616


@pytest.mark.slow
def test_encoder_block_integer_mode_on_the_twin_is_bit_exact(tmp_path):
    model, shape = sequence_models.encoder_block(np.random.default_rng(SEED))
    model.graph.name = "intonly_twin_block"
    path = str(qdq_models.quantize(model, shape, SEED + 1, tmp_path))
    x = np.random.default_rng(SEED + 2).standard_normal((4, *shape)).astype(np.float32)
    print(f"seed {SEED}, 4 samples of {list(shape)}")
    want = InferenceSession(path, providers=["cpu"], sequence_mode="integer") \
        .run(None, {"x": x})[0]
    sim = SimProvider(CONFIG, log=lambda message: None)
    try:
        session = InferenceSession(path, providers=[sim, "cpu"], sequence_mode="integer")
        got = session.run(None, {"x": x})[0]
    finally:
        sim.close()
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    dense = [r for r in rows if r["op"] == "Dense"]
    assert len(dense) == 6 and all(r["provider"] == "sim" and r["cycles"] > 0 for r in dense)
    integer = [r for r in rows if r["op"] in ("IntSoftmax", "IntLayerNorm", "IntGelu")]
    assert sorted(r["op"] for r in integer) == ["IntGelu", "IntLayerNorm", "IntLayerNorm",
                                                "IntSoftmax"]
    for row in integer:
        assert row["provider"] == "cpu" and row["semantics"] == "integer-only"
        assert row["fell_back_from"][0]["provider"] == "sim"
        assert row["op"] in row["fell_back_from"][0]["why"]
    # The integer mode changed the numbers: the ORT-compatible mode gives others.
    ort = InferenceSession(path, providers=["cpu"]).run(None, {"x": x})[0]
    assert not np.array_equal(got, ort)


@pytest.mark.slow
def test_zoo_vit_integer_mode_on_the_twin_is_bit_exact():
    """The whole zoo ViT, 4 digits: its 14 Dense on the twin, 9 integer nonlinearities on
    the host."""
    from models.zoo.digits import load_digits_split

    path = "models/zoo/vit_qdq.onnx"
    _, _, x, _ = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)[:4]
    want = InferenceSession(path, providers=["cpu"], sequence_mode="integer") \
        .run(None, {"input": x})[0]
    sim = SimProvider(CONFIG, log=lambda message: None)
    try:
        session = InferenceSession(path, providers=[sim, "cpu"], sequence_mode="integer")
        got = session.run(None, {"input": x})[0]
    finally:
        sim.close()
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    assert [r["provider"] for r in rows if r["op"] == "Dense"] == ["sim"] * 14
    placed = {r["op"]: r["provider"] for r in rows if r["op"].startswith("Int")}
    assert placed == {"IntSoftmax": "cpu", "IntLayerNorm": "cpu", "IntGelu": "cpu"}
