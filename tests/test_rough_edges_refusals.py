"""What a new user reads about where a layer runs and how fast the default build is.

- A device provider's refusal of a float layer (the float32 residual Add of an attention
  block, Softmax, Quantize, Dequantize, any ``FloatOp``) says that its operands are float,
  not int8, instead of "runs ... Add, not Add".
- The "opencl" provider accepts Softmax and runs it on the host with the CPU provider's
  code; the profile and ``docs/opencl.md`` say so, and the docs list the float operators it
  does refuse as the code does.
- The default ULX3S-85F build's fmax is recorded once (``tessera/explore/board_builds.json``); the
  resource model predicts it within 15 %, and the README and docs quote that figure.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from fake_device import Registers

from hw.bitstream import default_config
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.errors import ProviderUnavailableError
from sw_driver.importer import import_model
from sw_driver.providers import OpenCLProvider, PCIeProvider
from sw_driver.providers import opencl as opencl_module
from sw_driver.providers.device import engine_refusal
from sw_driver.providers.sim import DEFAULT_CONFIG
from tessera import build as tb
from tessera.explore import resource_model as rm

ROOT = Path(__file__).resolve().parents[1]
VIT_QDQ = ROOT / "models" / "zoo" / "vit_qdq.onnx"
#: Where the default build's fmax is quoted as the current figure.
QUOTING_DOCS = ("README.md", "docs/build.md", "docs/boards.md", "docs/performance.md")
#: How far the model's fmax may be from the measured default build.
FMAX_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def vit_layers():
    return import_model(str(VIT_QDQ)).layers


def _float_adds(layers):
    adds = [layer for layer in layers if isinstance(layer, g.FloatOp) and layer.op == "Add"]
    assert adds, "the zoo ViT has float residual Adds"
    return adds


# ------------------------------------------------------------------ device refusals

def test_device_refusal_of_a_float_add_says_its_operands_are_float(vit_layers):
    device = PCIeProvider(transport=Registers())
    for layer in _float_adds(vit_layers):
        why = str(device.supports(layer))
        assert "operands are float, not int8" in why, (layer.name, why)
        assert "not Add" not in why, (layer.name, why)
        assert why == engine_refusal(layer, DEFAULT_CONFIG)


@pytest.mark.parametrize("layer, says", [
    (g.Softmax("attn", ("x",), "y"), "Softmax computes in float32: its operand is float"),
    (g.Quantize("q", ("x",), "y"), "Quantize reads a float operand, not int8"),
    (g.Dequantize("dq", ("x",), "y"), "Dequantize writes a float result, not int8"),
    (g.FloatOp("mul", ("x",), "y", op_type="Mul"), "this Mul computes in float32"),
])
def test_device_refusals_of_float_layers_name_the_float(layer, says):
    why = str(PCIeProvider(transport=Registers()).supports(layer))
    assert why.startswith(says), why
    assert why.endswith("the device runs int8 Conv, Dense, MatMul, 2x2 MaxPool, "
                        "GlobalAveragePool and Add only")


def test_int8_layers_the_device_lacks_keep_the_list():
    why = engine_refusal(g.AveragePool("pool", ("x",), "y"), DEFAULT_CONFIG)
    assert why == ("the device runs Conv, Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and "
                   "Add, not AveragePool")


def test_build_search_gives_the_same_reason_for_a_float_add(vit_layers):
    """``tessera build`` lists the layers left to the CPU with the device's reason."""
    for layer in _float_adds(vit_layers):
        why, work = tb._device_refusal(layer, (1, 17, 16), tb.PROBE)
        assert work is None
        assert "operands are float, not int8" in why and "not Add" not in why, why


# ------------------------------------------------------------------ opencl and Softmax

def test_opencl_accepts_softmax_and_says_it_runs_on_the_host():
    # Neither answer needs an OpenCL device: both read the layer only.
    opencl = OpenCLProvider.__new__(OpenCLProvider)
    softmax = g.Softmax("attn", ("x",), "y")
    assert opencl.supports(softmax) is None
    assert "run on the host with the CPU provider's code" in opencl.describe(softmax)
    norm = g.FloatOp("ln", ("x",), "y", op_type="LayerNormalization")
    assert str(opencl.supports(norm)).startswith(
        "LayerNormalization is float32 math of the ORT-compatible mode")


def test_docs_describe_what_opencl_does_with_float_layers():
    text = " ".join((ROOT / "docs" / "opencl.md").read_text().split())
    softmax = OpenCLProvider.__new__(OpenCLProvider).describe(g.Softmax("a", ("x",), "y"))
    assert softmax in text  # the reason the profile gives, quoted
    listed = re.search(r"\(`FLOAT_MATH_OPS`: ([^)]*?) as `FloatOp`s\)", text)
    assert listed, "docs/opencl.md lists FLOAT_MATH_OPS"
    assert set(re.split(r",\s*", listed.group(1))) == opencl_module.FLOAT_MATH_OPS
    runtime = " ".join((ROOT / "docs" / "runtime.md").read_text().split())
    assert "`opencl` and `gpu` accept it and run it on the host" in runtime


def test_vit_profile_places_softmax_on_opencl_with_the_reason():
    try:
        opencl = OpenCLProvider()
    except ProviderUnavailableError as exc:
        pytest.skip(f"no OpenCL device here: {exc}")
    session = InferenceSession(str(VIT_QDQ), providers=[opencl, "cpu"])
    seed = 2911
    x = np.random.default_rng(seed).standard_normal((1, 1, 8, 8)).astype(np.float32)
    session.run(None, {session.get_inputs()[0].name: x})
    rows = session.profile()
    softmax = [r for r in rows if r["op"] == "Softmax"]
    assert softmax, f"seed {seed}: the ViT's attention has a Softmax"
    for row in softmax:
        assert row["provider"] == "opencl", row
        assert "run on the host with the CPU provider's code" in row["reason"], row
    norms = [r for r in rows if r["op"] == "LayerNormalization"]
    assert norms and all(r["provider"] == "cpu" and r["fell_back_from"][0]["provider"]
                         == "opencl" for r in norms), norms


# ------------------------------------------------------------------ the default build's fmax

def test_default_build_is_recorded_once():
    build = rm.measured_build("ulx3s-85f")
    assert rm._config_of(build) == default_config("ulx3s-85f")
    assert build["fmax_mhz"] and build["timing_met"] and build["pll_clock_mhz"] == 62.5


def test_resource_model_predicts_the_default_build():
    board = "ulx3s-85f"
    measured = rm.measured_build(board)["fmax_mhz"]
    predicted = rm.ResourceModel().predict(default_config(board), "ecp5",
                                           rm.board_limits(board)["device"])["fmax_mhz"]
    assert abs(predicted - measured) <= FMAX_TOLERANCE * measured, (
        f"{board} default 8x8: predicted {predicted} MHz, measured {measured} MHz "
        f"(tessera/explore/board_builds.json); tolerance {FMAX_TOLERANCE:.0%}")


@pytest.mark.parametrize("doc", QUOTING_DOCS)
def test_docs_quote_the_recorded_default_fmax(doc):
    fmax = rm.measured_build("ulx3s-85f")["fmax_mhz"]
    text = " ".join((ROOT / doc).read_text().split())
    assert f"{fmax:g} MHz" in text, f"{doc} does not quote the default build's {fmax:g} MHz"


def test_a_recorded_build_replaces_the_sweeps_build_of_its_configuration():
    def sweep_record(board, rows, cols, fmax):
        config = default_config(board).as_dict()
        config["array"].update(rows=rows, cols=cols)
        return {"label": f"{board} {rows}x{cols} sweep", "board": board, "family": "ecp5",
                "config": config, "fmax_mhz": fmax, "resources": {}}

    old = sweep_record("ulx3s-85f", 8, 8, 47.47)
    other = sweep_record("ulx3s-85f", 2, 2, 55.4)
    records = rm.fit_records([old, other])
    labels = [r["label"] for r in records]
    assert old["label"] not in labels and other["label"] in labels
    assert rm.measured_build("ulx3s-85f")["label"] in labels


def test_an_unrecorded_configuration_says_how_to_record_it():
    config = default_config("ulx3s-85f")
    smaller = type(config)(array=type(config.array)(rows=2, cols=3))
    with pytest.raises(rm.ModelError, match=r"board_builds\.json records no build of .*"
                                            r"make bitstream BOARD=ulx3s-85f"):
        rm.measured_build("ulx3s-85f", smaller)
