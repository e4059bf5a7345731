"""The model zoo: the shipped digits CNN and the random-weight ResNet-8 / depthwise models.

Contract checked (figures printed, run with ``-s`` to see them): the float digits CNN reaches
95 % on the test split; Tessera's int8 run of its onnxruntime-QDQ model is within 1 point of
float; Tessera and onnxruntime on the same QDQ model agree on top-1 for >= 99.5 % of samples
and on >= 99 % of output elements within 1 LSB -- on the digits test split and on seeded
random inputs for the random models. Everything is seeded, so the figures are fixed.
"""

import numpy as np
import pytest
import qdq_models
from zoo_helpers import accuracy, assert_agree, compare

from models.zoo import DIGITS_FLOAT, DIGITS_QDQ, digits, random_models
from sw_driver import InferenceSession

RANDOM_SAMPLES = 256
RANDOM_INPUT_SEED = 5


@pytest.fixture(scope="module")
def split():
    return digits.load_digits_split()


@pytest.fixture(scope="module")
def random_zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    return {name: random_models.build(name, out) for name in random_models.MODELS}


def test_digits_split_shapes(split):
    x_train, y_train, x_test, y_test = split
    assert x_train.dtype == x_test.dtype == np.float32
    assert x_train.shape[1:] == x_test.shape[1:] == (1, 8, 8)
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == 450
    assert 0 <= x_train.min() and x_train.max() <= 1
    assert set(np.unique(y_test)) == set(range(10))


def test_built_reuses_a_model_already_there(random_zoo, tmp_path):
    """``random_models.built`` returns the zoo's file untouched when it exists, and builds
    the same model (same bytes: everything is seeded) into an empty folder."""
    _, qdq = random_zoo["resnet8"]
    before = qdq.stat().st_mtime_ns
    assert random_models.built("resnet8", qdq.parent) == qdq
    assert qdq.stat().st_mtime_ns == before
    fresh = random_models.built("resnet8", tmp_path)
    assert fresh == tmp_path / "resnet8_qdq.onnx"
    assert fresh.read_bytes() == qdq.read_bytes()

def test_shipped_files_are_small():
    for path in (DIGITS_FLOAT, DIGITS_QDQ):
        assert path.stat().st_size < 64 * 1024, path


def test_digits_float_int8_and_onnxruntime(split):
    _, _, x_test, y_test = split
    (logits,) = qdq_models.ort_session(str(DIGITS_FLOAT)).run(None, {"input": x_test})
    float_acc = accuracy(logits, y_test)
    figures = compare(str(DIGITS_QDQ), x_test, what="digits (onnxruntime QDQ)")
    ours, theirs = accuracy(figures["ours"], y_test), accuracy(figures["theirs"], y_test)
    print(f"digits test accuracy: float {float_acc:.2%}, Tessera int8 {ours:.2%}, "
          f"onnxruntime int8 {theirs:.2%}")
    assert float_acc >= 0.95
    assert abs(ours - float_acc) <= 0.01, f"int8 {ours:.2%} vs float {float_acc:.2%}"
    assert_agree(figures, "digits")


@pytest.mark.parametrize("name", list(random_models.MODELS))
def test_random_models_agree_with_onnxruntime(random_zoo, name):
    float_path, qdq_path = random_zoo[name]
    x = random_models.random_inputs(np.random.default_rng(RANDOM_INPUT_SEED), RANDOM_SAMPLES)
    figures = compare(str(qdq_path), x, what=f"{name} input_seed={RANDOM_INPUT_SEED}")
    assert figures["ours"].shape == (RANDOM_SAMPLES, 10)
    # The inputs must exercise more than one class, or top-1 agreement proves nothing.
    assert len(np.unique(figures["theirs"].argmax(axis=1))) >= 5
    assert_agree(figures, f"{name} input_seed={RANDOM_INPUT_SEED}")
    ops = {layer.op for layer in InferenceSession(str(qdq_path)).graph.layers}
    assert {"Conv", "Dense", "GlobalAveragePool"} <= ops
    if name == "resnet8":
        assert "Add" in ops
    else:
        assert any(getattr(layer, "groups", 1) > 1
                   for layer in InferenceSession(str(qdq_path)).graph.layers)


def test_random_models_are_deterministic():
    first = random_models.float_model("dwsep").SerializeToString()
    assert random_models.float_model("dwsep").SerializeToString() == first


@pytest.mark.slow
def test_training_reproduces_the_shipped_model(split):
    """Retrains (a few seconds): same accuracy bar, nearly the same predictions.

    Bit-identical weights are not promised across machines (BLAS summation order differs),
    so the check is on behaviour."""
    _, _, x_test, y_test = split
    params = digits.train()
    retrained = digits.forward(params, x_test)
    (shipped,) = qdq_models.ort_session(str(DIGITS_FLOAT)).run(None, {"input": x_test})
    agreement = float((retrained.argmax(axis=1) == shipped.argmax(axis=1)).mean())
    print(f"retrained digits CNN: accuracy {accuracy(retrained, y_test):.2%}, top-1 agreement "
          f"with the shipped model {agreement:.2%}")
    assert accuracy(retrained, y_test) >= 0.95
    assert agreement >= 0.97
