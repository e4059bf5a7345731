"""``run_options`` of ``InferenceSession.run``: onnxruntime's ``terminate``,
``only_execute_path_to_fetches`` and ``logid`` honoured (with Tessera's own
``RunOptions`` or onnxruntime's), anything else refused with the accepted types named."""

import subprocess
import sys

import onnx
import pytest
from assertions import assert_exact
from onnx import TensorProto, helper

from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession, RunOptions
from sw_driver.errors import InputError, RunTerminatedError
from sw_driver.providers import CPUProvider

GAP = "gap_DequantizeLinear_Output"  # the digits CNN's pooled features, as a float tensor


@pytest.fixture(scope="module")
def feed():
    _, _, x, _ = load_digits_split()
    return {"input": x[:4]}


@pytest.fixture(scope="module")
def two_outputs():
    """The digits CNN with its pooled features as a second output."""
    model = onnx.load(DIGITS_QDQ)
    model.graph.output.append(
        helper.make_tensor_value_info(GAP, TensorProto.FLOAT, ["N", 32, 1, 1]))
    return model.SerializeToString()


def _ort_run_options():
    ort = pytest.importorskip("onnxruntime")
    return ort.RunOptions()


@pytest.mark.parametrize("make", [lambda: None, RunOptions, _ort_run_options],
                         ids=["none", "tessera", "onnxruntime"])
def test_default_options_change_nothing(feed, make):
    session = InferenceSession(DIGITS_QDQ)
    (want,) = session.run(None, feed)
    (got,) = session.run(None, feed, run_options=make())
    assert_exact(got, want, "logits with default run_options")
    assert len(session.profile()) == len(session.graph.layers)


@pytest.mark.parametrize("value, kind", [
    ({"terminate": True}, "builtins.dict"),
    ("fast", "builtins.str"),
    (RunOptions.__dataclass_fields__, "builtins.dict"),
])
def test_other_run_options_are_refused_naming_what_is_accepted(feed, value, kind):
    session = InferenceSession(DIGITS_QDQ)
    with pytest.raises(InputError, match=rf"run_options must be None, sw_driver.RunOptions "
                       rf"or onnxruntime.RunOptions, not {kind}"):
        session.run(None, feed, run_options=value)


@pytest.mark.parametrize("make", [RunOptions, _ort_run_options],
                         ids=["tessera", "onnxruntime"])
def test_terminate_before_the_run(feed, make):
    options = make()
    options.terminate = True
    options.logid = "batch-7"
    with pytest.raises(RunTerminatedError, match=r"run 'batch-7' terminated by "
                       r"run_options.terminate before layer 'input_QuantizeLinear' "
                       r"\(0 of 8 layers done\)"):
        InferenceSession(DIGITS_QDQ).run(None, feed, run_options=options)


class _Terminating(CPUProvider):
    """The CPU provider that, running ``layer`` the first time, sets ``options.terminate``
    (as another thread would)."""

    def __init__(self, options, layer):
        super().__init__()
        self.options, self.layer, self.fired = options, layer, False

    def run(self, layer, inputs):
        if layer.name == self.layer and not self.fired:
            self.options.terminate = self.fired = True
        return super().run(layer, inputs)


@pytest.mark.parametrize("make", [RunOptions, _ort_run_options],
                         ids=["tessera", "onnxruntime"])
def test_terminate_during_the_run_stops_at_the_next_layer(feed, make):
    options = make()
    session = InferenceSession(DIGITS_QDQ, providers=[_Terminating(options, "conv2")])
    with pytest.raises(RunTerminatedError, match=r"before layer 'gap' \(4 of 8 layers "
                       r"done\)"):
        session.run(None, feed, run_options=options)
    # The options are read live, not copied: cleared, the same object runs to the end.
    options.terminate = False
    session.run(None, feed, run_options=options)
    assert len(session.profile()) == 8


@pytest.mark.parametrize("make", [RunOptions, _ort_run_options],
                         ids=["tessera", "onnxruntime"])
def test_only_the_path_to_the_fetches_runs(feed, two_outputs, make):
    session = InferenceSession(two_outputs)
    logits, features = session.run(None, feed)
    options = make()
    options.only_execute_path_to_fetches = True
    (got,) = session.run([GAP], feed, run_options=options)
    assert_exact(got, features, "pooled features, only the path to them")
    assert [e["layer"] for e in session.profile()] == [
        "input_QuantizeLinear", "conv1", "pool1", "conv2", "gap", "gap_DequantizeLinear"]
    # Without the option every layer runs (onnxruntime's default), outputs unchanged.
    (got,) = session.run([GAP], feed)
    assert_exact(got, features, "pooled features, every layer run")
    assert len(session.profile()) == len(session.graph.layers)


def test_the_runtime_does_not_import_onnxruntime():
    """Recognising onnxruntime's RunOptions must not cost every user its import."""
    code = ("import sys, sw_driver; from sw_driver import run_options, session; "
            "sys.exit('onnxruntime' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
