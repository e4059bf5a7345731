"""A high fan-out net on one of the FPGA's global networks.

A reset that reaches every register of a block spans the die: in general routing it is a
tree of hundreds of wires that crowds the routing around the block (on the 85F the address
generator's reset was the most congested net of a 16-row build). An ECP5 ``DCCA`` puts it
on a clock network instead, which reaches any flip-flop's reset with little skew and
leaves the general routing to the data.
"""

from amaranth import Const, Instance, Signal


def global_net(m, platform, signal, name):
    """``signal`` on a global network of the FPGA where one can carry a high fan-out net
    with little skew (an ECP5 ``DCCA``, submodule ``{name}_dcca``); ``signal`` itself
    elsewhere (the twin, the Verilog for other tools, iCE40)."""
    if getattr(platform, "family", None) != "ecp5":
        return signal
    out = Signal(name=f"{name}_global")
    m.submodules[f"{name}_dcca"] = Instance("DCCA", i_CLKI=signal, i_CE=Const(1, 1),
                                            o_CLKO=out)
    return out
