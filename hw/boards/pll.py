"""PLLs of the board tops: divider settings computed in Python, and the primitives.

:func:`ecp5_pll_settings` and :func:`ice40_pll_settings` search the dividers of an ECP5
``EHXPLLL`` and an iCE40 ``SB_PLL40_*`` for the output frequency closest to the one asked
for, inside the ranges of the Lattice data sheets (ECP5 family data sheet FPGA-DS-02012,
"sysCLOCK PLL timing"; iCE40 sysCLOCK PLL design guide FPGA-TN-02052). A frequency no
setting reaches within ``tolerance`` is refused with a :class:`PllError` that names the
reachable range and the nearest frequency found, so a build never runs at a clock other
than the one its report states.

nextpnr derives the constraint of the PLL's output net from the input pin's constraint and
these dividers, so the timing it reports is at the frequency computed here.
"""

from dataclasses import dataclass

from amaranth import Instance, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

# ECP5 EHXPLLL (data sheet, table "sysCLOCK PLL timing"): PFD (input after CLKI_DIV),
# VCO and output ranges, and the divider widths of the primitive.
ECP5_PFD_MHZ = (3.125, 400.0)
ECP5_VCO_MHZ = (400.0, 800.0)
ECP5_OUT_MHZ = (3.125, 400.0)
ECP5_CLKI_DIV = range(1, 129)
ECP5_CLKFB_DIV = range(1, 81)
ECP5_CLKOP_DIV = range(1, 129)

# iCE40 SB_PLL40 in SIMPLE feedback: DIVR 4 bits, DIVF 7 bits, DIVQ 3 bits (1..6).
ICE40_PFD_MHZ = (10.0, 133.0)
ICE40_VCO_MHZ = (533.0, 1066.0)
ICE40_OUT_MHZ = (16.0, 275.0)
ICE40_DIVR = range(16)
ICE40_DIVF = range(128)
ICE40_DIVQ = range(1, 7)

#: Largest relative error between the asked and the achieved frequency that a build takes.
DEFAULT_TOLERANCE = 0.005


class PllError(ValueError):
    """No PLL setting reaches the frequency asked for; the message names the range."""


def _check_mhz(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PllError(f"{name} must be a positive frequency in MHz, not {value!r}")
    return float(value)


def _refuse(family, f_in, f_out, best, span, tolerance):
    near = "none" if best is None else f"{best:.4g} MHz"
    raise PllError(
        f"{family} PLL cannot make {f_out:g} MHz from {f_in:g} MHz within "
        f"{100 * tolerance:g}%: outputs span {span[0]:g}-{span[1]:g} MHz (nearest setting: "
        f"{near})")


@dataclass(frozen=True)
class Ecp5PllSettings:
    """Dividers of an ECP5 ``EHXPLLL`` with ``CLKOP`` fed back (``FEEDBK_PATH="CLKOP"``):
    ``f_out = f_in * clkfb_div / clki_div`` and ``f_vco = f_out * clkop_div``."""

    f_in_mhz: float
    clki_div: int
    clkfb_div: int
    clkop_div: int
    #: ``CLKOS = f_vco / clkos_div``: the array's clock when it has its own
    #: (``hw.double_pumped``); 0: no second output.
    clkos_div: int = 0

    @property
    def f_out_mhz(self):
        return self.f_in_mhz * self.clkfb_div / self.clki_div

    @property
    def f_array_mhz(self):
        """The second output's frequency (the array's clock), its rising edges aligned
        with ``f_out_mhz``'s whenever both have one."""
        return self.f_vco_mhz / self.clkos_div

    @property
    def f_pfd_mhz(self):
        return self.f_in_mhz / self.clki_div

    @property
    def f_vco_mhz(self):
        return self.f_out_mhz * self.clkop_div

    def as_dict(self):
        return {"primitive": "EHXPLLL", "f_in_mhz": self.f_in_mhz,
                "f_out_mhz": round(self.f_out_mhz, 6), "f_vco_mhz": round(self.f_vco_mhz, 3),
                "CLKI_DIV": self.clki_div, "CLKFB_DIV": self.clkfb_div,
                "CLKOP_DIV": self.clkop_div,
                **({"CLKOS_DIV": self.clkos_div, "f_array_mhz": round(self.f_array_mhz, 6)}
                   if self.clkos_div else {})}


def ecp5_pll_settings(f_in_mhz, f_out_mhz, *, tolerance=DEFAULT_TOLERANCE, array_mhz=None):
    """The EHXPLLL dividers whose output is closest to ``f_out_mhz``.

    Ties go to the highest VCO frequency (lowest jitter). Raises :class:`PllError` when the
    best setting is more than ``tolerance`` (relative) away. ``array_mhz`` also asks for
    ``CLKOS`` (the array's clock) from the same VCO: among the settings that make the
    output, the one whose second output is closest to it, within ``tolerance`` too.
    """
    f_in = _check_mhz("f_in_mhz", f_in_mhz)
    f_out = _check_mhz("f_out_mhz", f_out_mhz)
    f_array = None if array_mhz is None else _check_mhz("array_mhz", array_mhz)
    best, best_key = None, None
    if ECP5_OUT_MHZ[0] <= f_out <= ECP5_OUT_MHZ[1]:
        for clki_div in ECP5_CLKI_DIV:
            pfd = f_in / clki_div
            if pfd < ECP5_PFD_MHZ[0]:
                break
            if pfd > ECP5_PFD_MHZ[1]:
                continue
            for clkfb_div in ECP5_CLKFB_DIV:
                out = pfd * clkfb_div
                if out > ECP5_OUT_MHZ[1]:
                    break
                if out < ECP5_OUT_MHZ[0]:
                    continue
                for clkop_div in ECP5_CLKOP_DIV:
                    vco = out * clkop_div
                    if vco > ECP5_VCO_MHZ[1]:
                        break
                    if vco < ECP5_VCO_MHZ[0]:
                        continue
                    clkos_div, array_error = 0, 0.0
                    if f_array is not None:
                        clkos_div = _nearest_divider(vco, f_array)
                        if clkos_div is None:
                            continue
                        array_error = abs(vco / clkos_div - f_array)
                    key = (abs(out - f_out), array_error, -vco, clki_div)
                    if best_key is None or key < best_key:
                        best_key = key
                        best = Ecp5PllSettings(f_in, clki_div, clkfb_div, clkop_div,
                                               clkos_div)
    if best is None or abs(best.f_out_mhz - f_out) > tolerance * f_out:
        _refuse("ECP5", f_in, f_out, None if best is None else best.f_out_mhz,
                ECP5_OUT_MHZ, tolerance)
    if f_array is not None and abs(best.f_array_mhz - f_array) > tolerance * f_array:
        raise PllError(
            f"ECP5 PLL cannot make {f_array:g} MHz for the array beside {f_out:g} MHz from "
            f"{f_in:g} MHz within {100 * tolerance:g}%: the second output divides the "
            f"VCO ({ECP5_VCO_MHZ[0]:g}-{ECP5_VCO_MHZ[1]:g} MHz) that makes the first "
            f"(nearest setting: {best.f_array_mhz:.4g} MHz)")
    return best


def _nearest_divider(vco, f_array):
    """The CLKOS divider putting ``vco`` nearest ``f_array`` inside the output range, or
    None where none does."""
    candidates = [div for div in (int(vco // f_array), int(vco // f_array) + 1)
                  if div in ECP5_CLKOP_DIV
                  and ECP5_OUT_MHZ[0] <= vco / div <= ECP5_OUT_MHZ[1]]
    return min(candidates, key=lambda div: abs(vco / div - f_array), default=None)


@dataclass(frozen=True)
class Ice40PllSettings:
    """Dividers of an iCE40 ``SB_PLL40_*`` in SIMPLE feedback:
    ``f_vco = f_in / (divr + 1) * (divf + 1)`` and ``f_out = f_vco / 2**divq``."""

    f_in_mhz: float
    divr: int
    divf: int
    divq: int

    @property
    def f_pfd_mhz(self):
        return self.f_in_mhz / (self.divr + 1)

    @property
    def f_vco_mhz(self):
        return self.f_pfd_mhz * (self.divf + 1)

    @property
    def f_out_mhz(self):
        return self.f_vco_mhz / 2 ** self.divq

    @property
    def filter_range(self):
        """Loop filter setting for the PFD frequency (the table of Lattice's ``icepll``
        equivalent in the PLL design guide)."""
        pfd = self.f_pfd_mhz
        for limit, value in ((17, 1), (26, 2), (44, 3), (66, 4), (101, 5)):
            if pfd < limit:
                return value
        return 6

    def as_dict(self):
        return {"primitive": "SB_PLL40", "f_in_mhz": self.f_in_mhz,
                "f_out_mhz": round(self.f_out_mhz, 6), "f_vco_mhz": round(self.f_vco_mhz, 3),
                "DIVR": self.divr, "DIVF": self.divf, "DIVQ": self.divq,
                "FILTER_RANGE": self.filter_range}


def ice40_pll_settings(f_in_mhz, f_out_mhz, *, tolerance=DEFAULT_TOLERANCE):
    """The SB_PLL40 dividers whose output is closest to ``f_out_mhz`` (ties: lowest
    DIVR). Raises :class:`PllError` when the best is more than ``tolerance`` away."""
    f_in = _check_mhz("f_in_mhz", f_in_mhz)
    f_out = _check_mhz("f_out_mhz", f_out_mhz)
    best, best_key = None, None
    if ICE40_OUT_MHZ[0] <= f_out <= ICE40_OUT_MHZ[1]:
        for divr in ICE40_DIVR:
            pfd = f_in / (divr + 1)
            if not ICE40_PFD_MHZ[0] <= pfd <= ICE40_PFD_MHZ[1]:
                continue
            for divf in ICE40_DIVF:
                vco = pfd * (divf + 1)
                if not ICE40_VCO_MHZ[0] <= vco <= ICE40_VCO_MHZ[1]:
                    continue
                for divq in ICE40_DIVQ:
                    out = vco / 2 ** divq
                    if not ICE40_OUT_MHZ[0] <= out <= ICE40_OUT_MHZ[1]:
                        continue
                    key = (abs(out - f_out), divr)
                    if best_key is None or key < best_key:
                        best_key = key
                        best = Ice40PllSettings(f_in, divr, divf, divq)
    if best is None or abs(best.f_out_mhz - f_out) > tolerance * f_out:
        _refuse("iCE40", f_in, f_out, None if best is None else best.f_out_mhz,
                ICE40_OUT_MHZ, tolerance)
    return best


class Ecp5Pll(wiring.Component):
    """An ``EHXPLLL`` making ``clk_out`` from ``clk_in``; ``locked`` from its LOCK pin."""

    def __init__(self, settings):
        if not isinstance(settings, Ecp5PllSettings):
            raise TypeError(f"settings must be Ecp5PllSettings, not {settings!r}")
        self.settings = settings
        ports = {"clk_in": In(1), "clk_out": Out(1), "locked": Out(1)}
        if settings.clkos_div:
            ports["array_clk_out"] = Out(1)  # CLKOS: the array's clock
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        s = self.settings
        second = {}
        if s.clkos_div:
            # CLKOS from the same VCO, its edges aligned with CLKOP's (no phase shift).
            second = dict(a_FREQUENCY_PIN_CLKOS=f"{s.f_array_mhz:.6g}",
                          p_CLKOS_ENABLE="ENABLED", p_CLKOS_DIV=s.clkos_div,
                          p_CLKOS_CPHASE=s.clkos_div - 1, p_CLKOS_FPHASE=0,
                          p_OUTDIVIDER_MUXB="DIVB", i_ENCLKOS=0, o_CLKOS=self.array_clk_out)
        m.submodules.pll = Instance(
            "EHXPLLL",
            # Frequencies as attributes, the way Lattice's tools and ecppll annotate them;
            # nextpnr computes the output constraint from the dividers either way.
            a_FREQUENCY_PIN_CLKI=f"{s.f_in_mhz:g}",
            a_FREQUENCY_PIN_CLKOP=f"{s.f_out_mhz:.6g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8",
            a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA",
            p_CLKI_DIV=s.clki_div, p_CLKFB_DIV=s.clkfb_div,
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=s.clkop_div,
            # Coarse phase of CLKOP_DIV - 1 steps: output edges aligned with the VCO's
            # (no phase shift); nothing crosses from the oscillator's domain anyway.
            p_CLKOP_CPHASE=s.clkop_div - 1, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            i_CLKI=self.clk_in, i_CLKFB=self.clk_out, o_CLKOP=self.clk_out,
            i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=0,
            i_PHASESTEP=0, i_PHASELOADREG=0, i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_LOCK=self.locked,
            **second,
        )
        return m


class Ice40PllPad(wiring.Component):
    """An ``SB_PLL40_PAD`` fed straight from the clock pin ``pad`` (an ``io`` port of the
    platform). The iCEBreaker's 12 MHz oscillator is on pin 35, the UP5K's PLL input pad:
    the pad's input path then belongs to the PLL, so the PAD variant is the one that places
    (``SB_PLL40_CORE`` would need the same pin through the fabric)."""

    clk_out: Out(1)
    locked: Out(1)

    def __init__(self, settings, pad):
        if not isinstance(settings, Ice40PllSettings):
            raise TypeError(f"settings must be Ice40PllSettings, not {settings!r}")
        self.settings = settings
        self.pad = pad
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        s = self.settings
        m.submodules.pll = Instance(
            "SB_PLL40_PAD",
            p_FEEDBACK_PATH="SIMPLE", p_PLLOUT_SELECT="GENCLK",
            p_DIVR=s.divr, p_DIVF=s.divf, p_DIVQ=s.divq, p_FILTER_RANGE=s.filter_range,
            io_PACKAGEPIN=self.pad, i_RESETB=1, i_BYPASS=0,
            o_PLLOUTGLOBAL=self.clk_out, o_LOCK=self.locked,
        )
        return m


__all__ = [
    "DEFAULT_TOLERANCE", "Ecp5Pll", "Ecp5PllSettings", "Ice40PllPad", "Ice40PllSettings",
    "PllError", "ecp5_pll_settings", "ice40_pll_settings",
]
