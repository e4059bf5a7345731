"""NVIDIA's own client, ``tritonclient.http``, against ``tessera serve`` (existing
clients work unchanged): health, metadata, JSON and binary tensors bit for bit with a
direct session run, and the protocol's errors as the client's exception."""

import pytest
import tritonclient.http as httpclient  # installed by `make setup` (requirements.txt)
from tritonclient.utils import InferenceServerException

from sw_driver import InferenceSession
from tessera.serve import load_config
from tessera.serve.app import create_app
from tests.serve_helpers import AUTH_A, AUTH_B, DIGITS, digits_input, running, write_config


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    config = load_config(write_config(tmp_path_factory.mktemp("triton")))
    with running(create_app(config)) as url:
        yield httpclient.InferenceServerClient(url.removeprefix("http://"))


def _infer(client, x, *, binary, headers):
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("logits", binary_data=binary)
    # A fresh dict per call: the client writes its header-length entry into it.
    return client.infer("digits", [inp], outputs=[out], headers=dict(headers))


def test_health_and_metadata(served):
    assert served.is_server_live() and served.is_server_ready()
    metadata = served.get_model_metadata("digits", headers=dict(AUTH_A))
    assert metadata["name"] == "digits"
    assert [(i["name"], i["datatype"]) for i in metadata["inputs"]] == [("input", "FP32")]
    assert [o["name"] for o in metadata["outputs"]] == ["logits"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_is_bit_identical(served, rng, binary):
    reference = InferenceSession(str(DIGITS))
    for images in (1, 3):
        x = digits_input(rng, images)
        got = _infer(served, x, binary=binary, headers=AUTH_A).as_numpy("logits")
        want = reference.run(None, {"input": x})[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_errors_reach_the_client(served, rng):
    x = digits_input(rng, 1)
    with pytest.raises(InferenceServerException, match="invalid bearer token"):
        _infer(served, x, binary=True, headers={"Authorization": "Bearer not-a-token-at-all"})
    with pytest.raises(InferenceServerException, match="tenant 'b' may not use model 'digits'"):
        _infer(served, x, binary=True, headers=AUTH_B)
