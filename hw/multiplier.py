"""Signed 8x8 -> 16 bit multiplier with a fixed three-stage pipeline.

On ECP5 it is one MULT18X18D with its own input and output registers plus one fabric
register; elsewhere (simulation, other families) it is behavioural with the same latency,
so simulated cycle counts are the hardware's."""

from amaranth import Cat, ClockSignal, Const, Instance, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from contract.config import MULTIPLIER_LATENCY


def mult18x18d(a, b, p, *, en):
    """An ECP5 MULT18X18D computing ``p = a * b`` (signed 18 x 18 -> 36 bits) with its input
    and output registers enabled by ``en``: two cycles of latency inside the DSP block."""
    ports = {f"i_A{i}": a[i] for i in range(18)}
    ports.update({f"i_B{i}": b[i] for i in range(18)})
    ports.update({f"o_P{i}": p[i] for i in range(36)})
    # Unused inputs stay unconnected (the C port, the SRIA/SRIB cascade inputs and
    # clock/CE/reset sets 1-3): tied to a constant, nextpnr must route GND to pins that
    # general routing cannot reach, e.g. JSRIB8_MULT18, and fails with "Failed to find a
    # route for arc ... of net $PACKER_GND_NET".
    return Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
        p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
        p_REG_OUTPUT_CLK="CLK0", p_REG_OUTPUT_CE="CE0", p_REG_OUTPUT_RST="RST0",
        p_REG_PIPELINE_CLK="NONE", p_REG_INPUTC_CLK="NONE",
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_SOURCEB_MODE="B_SHIFT",
        p_MULT_BYPASS="DISABLED", p_CAS_MATCH_REG="FALSE",
        i_SIGNEDA=Const(1, 1), i_SIGNEDB=Const(1, 1),
        i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
        i_CLK0=ClockSignal(), i_CE0=en, i_RST0=Const(0, 1),
        **ports,
    )


class Int8Multiplier(wiring.Component):
    """``p`` is ``a * b`` from ``MULTIPLIER_LATENCY`` enabled cycles earlier.

    Every register advances only while ``en`` is high (a global stall).
    """

    a: In(signed(8))
    b: In(signed(8))
    en: In(1)
    p: Out(signed(16))

    latency = MULTIPLIER_LATENCY

    def elaborate(self, platform):
        m = Module()
        if getattr(platform, "family", None) == "ecp5":
            self._elaborate_ecp5(m)
        else:
            self._elaborate_generic(m)
        return m

    def _elaborate_generic(self, m):
        a_reg = Signal(signed(8))
        b_reg = Signal(signed(8))
        product = Signal(signed(16))
        with m.If(self.en):
            m.d.sync += [a_reg.eq(self.a), b_reg.eq(self.b), product.eq(a_reg * b_reg),
                         self.p.eq(product)]

    def _elaborate_ecp5(self, m):
        # Yosys infers MULT18X18D from `*` but keeps the registers in the fabric, which
        # costs ~70 MHz; instantiating the primitive puts them inside the DSP block.
        dsp_p = Signal(36)
        a18 = Cat(self.a, self.a[7].replicate(10))
        b18 = Cat(self.b, self.b[7].replicate(10))
        m.submodules.dsp = mult18x18d(a18, b18, dsp_p, en=self.en)
        with m.If(self.en):
            m.d.sync += self.p.eq(dsp_p[:16])
