"""Providers built from onnxruntime's ``(name, options)`` pairs, with the environment as a
fallback read in one place (``sw_driver/providers/options.py``). No twin, board or GPU: the
constructors are replaced by recorders where a real one would open a device."""

import ast
import os
import pathlib

import pytest

from models.zoo import DIGITS_QDQ
from sw_driver import InferenceSession
from sw_driver import providers as providers_module
from sw_driver.errors import ProviderUnavailableError, UnknownProviderError
from sw_driver.providers import ENVIRONMENT, CPUProvider, UnknownProviderOptionError
from sw_driver.providers.options import (
    format_providers,
    make_provider,
    option_names,
    parse_providers,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


class _Recorder(CPUProvider):
    """A CPU provider that records the options it was built with (stands in for a device)."""

    built = []

    def __init__(self, port=None, *, baudrate=3_000_000, timeout=0.05, retries=8):
        super().__init__()
        self.name = "uart"
        self.options = {"port": port, "baudrate": baudrate, "timeout": timeout,
                        "retries": retries}
        _Recorder.built.append(self.options)


@pytest.fixture
def recorder(monkeypatch):
    _Recorder.built = []
    monkeypatch.setitem(providers_module.PROVIDERS, "uart", _Recorder)
    monkeypatch.delenv("TESSERA_UART_PORT", raising=False)
    return _Recorder.built


def test_a_pair_passes_its_options_to_the_constructor(recorder):
    session = InferenceSession(DIGITS_QDQ, providers=[
        ("uart", {"port": "loop://", "baudrate": 115200}), "cpu"])
    assert recorder == [{"port": "loop://", "baudrate": 115200, "timeout": 0.05,
                         "retries": 8}]
    assert session.get_providers() == ["uart", "cpu"]


def test_a_plain_name_still_builds_with_defaults(recorder):
    InferenceSession(DIGITS_QDQ, providers=["uart", "CPUExecutionProvider"])
    assert recorder[0]["port"] is None


def test_an_unknown_option_names_the_provider_and_the_options_it_takes(recorder):
    with pytest.raises(UnknownProviderOptionError,
                       match=r"provider 'uart' has no option 'speed'; it takes: port, "
                             r"baudrate, timeout, retries") as info:
        InferenceSession(DIGITS_QDQ, providers=[("uart", {"speed": 9600})])
    assert isinstance(info.value, UnknownProviderError)
    assert recorder == []


def test_options_must_be_a_dict():
    with pytest.raises(UnknownProviderOptionError, match=r"provider 'cpu': options must be a "
                                                         r"dict .* not list"):
        InferenceSession(DIGITS_QDQ, providers=[("cpu", ["fast"])])


def test_an_unknown_name_in_a_pair_is_refused():
    with pytest.raises(UnknownProviderError, match=r"unknown provider \('tpu', \{\}\)"):
        InferenceSession(DIGITS_QDQ, providers=[("tpu", {})])


def test_real_constructors_take_the_documented_options():
    assert option_names(providers_module.UartProvider) == ["port", "baudrate", "timeout",
                                                           "retries", "resident"]
    assert "prefix" in option_names(providers_module.PCIeProvider)
    assert option_names(providers_module.OpenCLProvider) == ["device"]
    for name, options in ENVIRONMENT.items():
        assert set(options) <= set(option_names(providers_module.PROVIDERS[name])), name


def test_the_real_uart_provider_gets_its_port_from_the_pair(monkeypatch):
    monkeypatch.delenv("TESSERA_UART_PORT", raising=False)
    with pytest.raises(ProviderUnavailableError, match="provider 'uart': /dev/ttyTESSERA_NO"):
        InferenceSession(DIGITS_QDQ, providers=[("uart", {"port": "/dev/ttyTESSERA_NO"})])


def test_the_environment_is_the_fallback_and_an_option_wins(recorder, monkeypatch):
    monkeypatch.setenv("TESSERA_UART_PORT", "socket://from-env:1")
    InferenceSession(DIGITS_QDQ, providers=["uart"])
    InferenceSession(DIGITS_QDQ, providers=[("uart", {"port": "loop://"})])
    assert [b["port"] for b in recorder] == ["socket://from-env:1", "loop://"]


def test_an_option_from_the_environment_is_named_when_it_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_XDMA", str(tmp_path / "xdma7"))
    with pytest.raises(ProviderUnavailableError,
                       match=r"no XDMA device at .*xdma7 .*\(prefix='.*xdma7' from "
                             r"\$TESSERA_XDMA\)"):
        make_provider("pcie", providers_module.PCIeProvider)
    with pytest.raises(ProviderUnavailableError, match="xdma9"):
        make_provider("pcie", providers_module.PCIeProvider,
                      {"prefix": str(tmp_path / "xdma9")})


def test_opencl_device_gpu_is_the_gpu_providers_opencl_path(monkeypatch):
    """("opencl", {"device": "gpu"}) asks for OpenCL on a GPU: the "gpu" provider's OpenCL
    path, even where "gpu" alone would be PyTorch on CUDA."""
    import sw_driver.session as session_module

    built = []

    class Gpu(CPUProvider):
        def __init__(self, device=None):
            super().__init__()
            built.append(device)

    monkeypatch.setattr(session_module, "OpenCLGPUProvider", Gpu)
    monkeypatch.delenv("TESSERA_OPENCL_DEVICE", raising=False)
    InferenceSession(DIGITS_QDQ, providers=[("opencl", {"device": "gpu"})])
    assert built == [None]


def test_no_provider_reads_the_environment_itself():
    """The variables are read in options.py; a provider reading os.environ would bring back
    the second place the fallback lives."""
    for path in sorted([*(ROOT / "sw_driver" / "providers").glob("*.py"),
                        *(ROOT / "sw_driver" / "opencl").glob("*.py")]):
        if path.name == "options.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} reads the environment; "
                            f"add the option to ENVIRONMENT in providers/options.py instead")


def test_the_cli_passes_the_port_as_an_option(monkeypatch):
    from tessera import cli

    seen = []

    def session(model, providers, **kwargs):
        seen.append(providers)
        raise ProviderUnavailableError("stop here")

    monkeypatch.delenv("TESSERA_UART_PORT", raising=False)
    monkeypatch.setattr("sw_driver.InferenceSession", session)
    code = cli.main(["run", str(DIGITS_QDQ), "--providers", "uart,cpu", "--port", "loop://",
                     "--samples", "2"])
    assert code != 0
    assert seen == [[("uart", {"port": "loop://"}), "cpu"]]
    assert "TESSERA_UART_PORT" not in os.environ
    assert "environ" not in (ROOT / "tessera" / "cli.py").read_text()


def test_the_command_line_spelling_of_provider_options():
    assert parse_providers("sim, cpu") == ["sim", "cpu"]
    assert parse_providers("uart:port=socket://localhost:5000;baudrate=115200,cpu") == [
        ("uart", {"port": "socket://localhost:5000", "baudrate": 115200}), "cpu"]
    assert parse_providers('[["opencl", {"device": "gpu"}], "cpu"]') == [
        ("opencl", {"device": "gpu"}), "cpu"]
    entries = [("uart", {"port": "/dev/ttyUSB0", "timeout": 0.1}), "cpu"]
    assert format_providers(entries) == "uart:port=/dev/ttyUSB0;timeout=0.1,cpu"
    assert parse_providers(format_providers(entries)) == entries
    assert format_providers(["sim", "cpu"]) == "sim,cpu"  # the shard keys of plain lists
    with pytest.raises(UnknownProviderOptionError, match="key=value separated by ';'"):
        parse_providers("uart:port")
    with pytest.raises(UnknownProviderOptionError, match="an entry has no name"):
        parse_providers(":port=x")
    with pytest.raises(UnknownProviderOptionError, match=r"must be a name or \[name"):
        parse_providers('[["uart"]]')


def test_the_cli_takes_options_in_providers(monkeypatch):
    from tessera import cli

    seen = []

    def session(model, providers, **kwargs):
        seen.append(providers)
        raise ProviderUnavailableError("stop here")

    monkeypatch.setattr("sw_driver.InferenceSession", session)
    code = cli.main(["run", str(DIGITS_QDQ), "--providers", "uart:port=loop://;retries=2,cpu",
                     "--samples", "2"])
    assert code != 0
    assert seen == [[("uart", {"port": "loop://", "retries": 2}), "cpu"]]
    # --port fills in the port of a "uart" entry that has other options.
    code = cli.main(["run", str(DIGITS_QDQ), "--providers", "uart:retries=2", "--port",
                     "loop://", "--samples", "2"])
    assert seen[-1] == [("uart", {"port": "loop://", "retries": 2})]


def test_the_soak_takes_options_in_backends():
    from tessera.soak.backends import parse_backends

    assert parse_backends("cpu,opencl:device=0:0") == ["cpu", ("opencl", {"device": "0:0"})]
    with pytest.raises(ValueError, match="--backends"):
        parse_backends("cpu,nosuch:x=1")
