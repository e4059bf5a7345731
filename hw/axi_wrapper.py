"""The accelerator behind the port names of a Xilinx XDMA core in AXI4-Stream mode.

This is the one thin wrapper of style rule 7: ``hw.top.AcceleratorTop`` keeps its Amaranth
ports (``csr__addr``, ``h2c__payload``, ...), and this component gives the Verilog top the
names Vivado's interface inference recognises:

* ``axi_aclk``, ``axi_aresetn`` -- XDMA's user clock and active-low reset (synchronous to
  ``axi_aclk``), which become the design's ``sync`` domain;
* ``s_axil_*`` -- an AXI4-Lite slave onto the CSR bus (XDMA's ``M_AXI_LITE`` user BAR);
* ``s_axis_h2c_*`` / ``m_axis_c2h_*`` -- 32-bit AXI4-Stream with ``tkeep`` and ``tlast``
  onto the host-to-card and card-to-host word streams (XDMA's ``M_AXIS_H2C_0`` and
  ``S_AXIS_C2H_0`` through a data width converter when XDMA's stream is wider);
* ``usr_irq_req`` -- the accelerator's level interrupt.

Amaranth names a top-level port after its signature member, so flat members named the AXI
way need no hand-written Verilog shim. See docs/xdma.md.
"""

from amaranth import Cat, ClockDomain, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig
from contract.streams import WORD_BITS

from .csr import ADDR_WIDTH

TOP_NAME = "tessera_xdma"
AXIL_ADDR_WIDTH = 32  # XDMA's AXI-Lite master is 32-bit; the CSRs decode the low ADDR_WIDTH
KEEP_WIDTH = WORD_BITS // 8
RESP_OKAY = 0b00
RESP_SLVERR = 0b10

# `verilator --lint-only -Wall` waivers for the whole netlist. Each is an idiom of Amaranth's
# Verilog back end rather than a defect of the design: registers declared with their reset
# value then assigned in `always` (PROCASSINIT); operands widened or sliced implicitly as
# Amaranth's value semantics define (WIDTH*); internal wires and the address bits above the
# CSR window that nothing reads (UNUSEDSIGNAL); `casez` with no default for If/Elif chains,
# whose overlaps are the priority those chains mean (CASEINCOMPLETE, CASEOVERLAP); every
# submodule in the one file, named after its hierarchy path (DECLFILENAME).
LINT_WAIVERS = ("PROCASSINIT", "WIDTHEXPAND", "WIDTHTRUNC", "UNUSEDSIGNAL", "CASEINCOMPLETE",
                "CASEOVERLAP", "DECLFILENAME")


class XdmaWrapper(wiring.Component):
    """``AcceleratorTop`` with AXI4-Lite, AXI4-Stream and XDMA clock/reset/irq ports.

    A write with a partial ``wstrb`` is not performed and answers ``SLVERR``: every register
    is a whole 32-bit word and the driver only writes words. ``s_axis_h2c_tkeep`` bytes that
    are clear reach the accelerator as zero (the driver pads to whole words, so they only
    occur when the host sends a ragged transfer). ``m_axis_c2h_tkeep`` is always all ones.

    Parameters
    ----------
    config : ConvEngineConfig
        The accelerator's configuration (one netlist per configuration).
    """

    axi_aclk: In(1)
    axi_aresetn: In(1)

    s_axil_awaddr: In(AXIL_ADDR_WIDTH)
    s_axil_awvalid: In(1)
    s_axil_awready: Out(1)
    s_axil_wdata: In(32)
    s_axil_wstrb: In(4)
    s_axil_wvalid: In(1)
    s_axil_wready: Out(1)
    s_axil_bresp: Out(2)
    s_axil_bvalid: Out(1)
    s_axil_bready: In(1)
    s_axil_araddr: In(AXIL_ADDR_WIDTH)
    s_axil_arvalid: In(1)
    s_axil_arready: Out(1)
    s_axil_rdata: Out(32)
    s_axil_rresp: Out(2)
    s_axil_rvalid: Out(1)
    s_axil_rready: In(1)

    s_axis_h2c_tdata: In(WORD_BITS)
    s_axis_h2c_tkeep: In(KEEP_WIDTH)
    s_axis_h2c_tlast: In(1)
    s_axis_h2c_tvalid: In(1)
    s_axis_h2c_tready: Out(1)

    m_axis_c2h_tdata: Out(WORD_BITS)
    m_axis_c2h_tkeep: Out(KEEP_WIDTH)
    m_axis_c2h_tlast: Out(1)
    m_axis_c2h_tvalid: Out(1)
    m_axis_c2h_tready: In(1)

    usr_irq_req: Out(1)

    def __init__(self, config=None):
        self.config = config or ConvEngineConfig()
        if not isinstance(self.config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        super().__init__()

    def elaborate(self, platform):
        from .resident import accelerator_top

        m = Module()
        # XDMA's user clock and reset drive everything; no clk/rst ports of our own.
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.axi_aclk), sync.rst.eq(~self.axi_aresetn)]

        m.submodules.top = top = accelerator_top(self.config)
        m.d.comb += [top.dbg_force_error.eq(0), self.usr_irq_req.eq(top.irq)]

        # --- AXI4-Stream: host to card ----------------------------------------------------
        keep_mask = Cat(*(bit.replicate(8) for bit in self.s_axis_h2c_tkeep))
        m.d.comb += [
            top.h2c.payload.data.eq(self.s_axis_h2c_tdata & keep_mask),
            top.h2c.payload.last.eq(self.s_axis_h2c_tlast),
            top.h2c.valid.eq(self.s_axis_h2c_tvalid),
            self.s_axis_h2c_tready.eq(top.h2c.ready),
        ]
        # --- AXI4-Stream: card to host ----------------------------------------------------
        m.d.comb += [
            self.m_axis_c2h_tdata.eq(top.c2h.payload.data),
            self.m_axis_c2h_tkeep.eq(2 ** KEEP_WIDTH - 1),
            self.m_axis_c2h_tlast.eq(top.c2h.payload.last),
            self.m_axis_c2h_tvalid.eq(top.c2h.valid),
            top.c2h.ready.eq(self.m_axis_c2h_tready),
        ]

        # --- AXI4-Lite slave onto the CSR bus ----------------------------------------------
        # One transaction at a time: the CSR bus has one address for reads and writes.
        # Address and data of a write may arrive in either order or together.
        aw_addr = Signal(ADDR_WIDTH)
        aw_have = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        w_have = Signal()
        ar_addr = Signal(ADDR_WIDTH)
        csr = top.csr
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [
                    self.s_axil_awready.eq(~aw_have),
                    self.s_axil_wready.eq(~w_have),
                    # A read waits while a write is half received, so the two never mix.
                    self.s_axil_arready.eq(~aw_have & ~w_have),
                ]
                with m.If(self.s_axil_awvalid & ~aw_have):
                    m.d.sync += [aw_addr.eq(self.s_axil_awaddr[:ADDR_WIDTH]), aw_have.eq(1)]
                with m.If(self.s_axil_wvalid & ~w_have):
                    m.d.sync += [w_data.eq(self.s_axil_wdata), w_strb.eq(self.s_axil_wstrb),
                                 w_have.eq(1)]
                with m.If(aw_have & w_have):
                    m.next = "WRITE"
                with m.Elif(self.s_axil_arvalid & ~aw_have & ~w_have):
                    m.d.sync += ar_addr.eq(self.s_axil_araddr[:ADDR_WIDTH])
                    m.next = "READ"
            with m.State("WRITE"):
                full = w_strb == 0b1111
                m.d.comb += [csr.addr.eq(aw_addr), csr.w_data.eq(w_data),
                             csr.w_en.eq(full)]
                m.d.sync += [aw_have.eq(0), w_have.eq(0),
                             self.s_axil_bresp.eq(Mux(full, RESP_OKAY, RESP_SLVERR))]
                m.next = "BRESP"
            with m.State("BRESP"):
                m.d.comb += self.s_axil_bvalid.eq(1)
                with m.If(self.s_axil_bready):
                    m.next = "IDLE"
            with m.State("READ"):
                m.d.comb += [csr.addr.eq(ar_addr), csr.r_en.eq(1)]
                m.next = "RRESP"
            with m.State("RRESP"):
                # The CSR bank answers the cycle after r_en and holds r_data until the next.
                m.d.comb += [self.s_axil_rvalid.eq(1), self.s_axil_rdata.eq(csr.r_data),
                             self.s_axil_rresp.eq(RESP_OKAY)]
                with m.If(self.s_axil_rready):
                    m.next = "IDLE"
        return m


def xdma_verilog(config=None):
    """Verilog text of :class:`XdmaWrapper` for ``config``, top module ``tessera_xdma``."""
    from amaranth.back import verilog

    return verilog.convert(XdmaWrapper(config), name=TOP_NAME, emit_src=False)


def write_xdma_verilog(config=None, build_root="build"):
    """Write ``build/<config>-xdma/tessera_xdma.v`` (left untouched when unchanged, so builds
    that depend on it stay cached). Returns the path."""
    from pathlib import Path

    config = config or ConvEngineConfig()
    path = Path(build_root) / f"{config.name}-xdma" / f"{TOP_NAME}.v"
    text = xdma_verilog(config)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def lint_command(verilator, path):
    """The lint this wrapper must pass: ``-Wall`` less :data:`LINT_WAIVERS`."""
    return [verilator, "--lint-only", "-Wall", *(f"-Wno-{w}" for w in LINT_WAIVERS),
            "--top-module", TOP_NAME, str(path)]
