"""Spatial sharing: N independent accelerator instances on one FPGA.

Instead of one large engine time-sliced between tenants, :class:`MultiTop` places
``instances`` copies of :class:`~hw.top.AcceleratorTop` of a smaller configuration on the
device. They share the clock, the reset and one CSR port, nothing else:

- **CSR windows**: instance ``i`` answers at byte addresses
  ``i * INSTANCE_WINDOW + offset``, where ``offset`` is the single accelerator's register
  map (``contract/regmap.py``); the decode uses the address bits above the single top's
  ``ADDR_WIDTH``, so each window is that top's register map unchanged and a driver talks to
  instance ``i`` by adding its base to every register offset.
- **DMA**: each instance has its own host-to-device and device-to-host streams
  (``h2c_<i>``, ``c2h_<i>``): a DMA engine with one channel per instance (XDMA has up to
  four of each direction) serves them, so one tenant's transfer never waits behind
  another's. No arbiter is needed, which keeps the instances isolated in time as well as
  in logic.
- **Interrupts and fault injection**: one bit per instance (``irq``, ``dbg_force_error``).

Each instance is exactly the single-instance top, so the twin of the small configuration
(``twin/dma.py``) is a cycle-exact model of one instance; the serving layer models the
device as N such twins (``tessera/serve/config.py``, ``instances``).
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig
from contract.spatial import INSTANCE_WINDOW, MAX_INSTANCES, instance_base

from .csr import ADDR_WIDTH, word_layout
from .top import AcceleratorTop

__all__ = ["INSTANCE_WINDOW", "MultiTop", "instance_base", "multi_csr_signature"]

# The window is the single top's whole map, so the select is the address bits above it.
assert INSTANCE_WINDOW == 1 << ADDR_WIDTH, "contract.spatial disagrees with hw/csr.py"


def _select_width(instances):
    return max(1, (instances - 1).bit_length())


def multi_csr_signature(instances):
    """The single top's 32-bit register port with the instance select above its address
    bits (see :func:`hw.csr.csr_bus_signature`)."""
    return wiring.Signature({
        "addr": Out(ADDR_WIDTH + _select_width(instances)),
        "w_data": Out(32),
        "w_en": Out(1),
        "r_en": Out(1),
        "r_data": In(32),
    })


class MultiTop(wiring.Component):
    """``instances`` accelerator tops of ``config`` behind one CSR port, each with its own
    DMA streams.

    Parameters
    ----------
    config : ConvEngineConfig
        Every instance's configuration (the small one).
    instances : int
        How many instances, 1 to :data:`MAX_INSTANCES`.
    """

    def __init__(self, config=None, *, instances):
        self.config = config or ConvEngineConfig()
        if not isinstance(self.config, ConvEngineConfig) or isinstance(instances, bool) \
                or not isinstance(instances, int) or not 1 <= instances <= MAX_INSTANCES:
            # A refused top is not a forgotten one: no "created but never used" warning.
            self._MustUse__silence = True
            if not isinstance(self.config, ConvEngineConfig):
                raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
            raise ValueError(f"instances must be an integer from 1 to {MAX_INSTANCES}, "
                             f"not {instances!r}")
        self.instances = instances
        ports = {"csr": In(multi_csr_signature(instances)),
                 "irq": Out(instances), "dbg_force_error": In(instances)}
        for i in range(instances):
            ports[f"h2c_{i}"] = In(stream.Signature(word_layout()))
            ports[f"c2h_{i}"] = Out(stream.Signature(word_layout()))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        select = self.csr.addr[ADDR_WIDTH:]
        # A read answers the cycle after r_en (hw/csr.py): remember whose answer to pass on.
        read_from = Signal.like(select)
        with m.If(self.csr.r_en):
            m.d.sync += read_from.eq(select)
        for i in range(self.instances):
            top = AcceleratorTop(self.config)
            m.submodules[f"inst{i}"] = top
            chosen = select == i
            m.d.comb += [
                top.csr.addr.eq(self.csr.addr[:ADDR_WIDTH]),
                top.csr.w_data.eq(self.csr.w_data),
                top.csr.w_en.eq(self.csr.w_en & chosen),
                top.csr.r_en.eq(self.csr.r_en & chosen),
                self.irq[i].eq(top.irq),
                top.dbg_force_error.eq(self.dbg_force_error[i]),
            ]
            with m.If(read_from == i):
                m.d.comb += self.csr.r_data.eq(top.csr.r_data)
            wiring.connect(m, wiring.flipped(getattr(self, f"h2c_{i}")), top.h2c)
            wiring.connect(m, top.c2h, wiring.flipped(getattr(self, f"c2h_{i}")))
        return m


def write_multi_verilog(config, instances, build_root="build"):
    """Write ``build/<config>-x<N>/multi_top.v`` (the build option ``tessera verilog
    --target multi --instances N``); leave it untouched when unchanged. Returns the path."""
    from pathlib import Path

    from amaranth.back import verilog

    text = verilog.convert(MultiTop(config, instances=instances), name="multi_top",
                           emit_src=False)
    path = Path(build_root) / f"{config.name}-x{instances}" / "multi_top.v"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path
