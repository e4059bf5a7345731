"""The CSR decoder, generated from the register map in ``contract/regmap.py``."""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from contract.regmap import REGISTERS

ADDR_WIDTH = 10  # byte addresses 0x000-0x3ff


def csr_bus_signature():
    """A 32-bit register port as the host (bus master) sees it. Reads answer on
    ``r_data`` the cycle after ``r_en``; an AXI4-Lite bridge maps onto it directly."""
    return wiring.Signature({
        "addr": Out(ADDR_WIDTH),
        "w_data": Out(32),
        "w_en": Out(1),
        "r_en": Out(1),
        "r_data": In(32),
    })


def port_name(register):
    return register.name.lower()


class CsrBank(wiring.Component):
    """Registers of ``contract.regmap.REGISTERS`` behind one CSR bus.

    Ports per register, by access kind (``<name>`` is the register name in lower case):
    RO: ``<name>`` in, the value to read. RW: ``<name>`` out, the stored value.
    W1P: ``<name>`` out, the written bits for one cycle. W1C: ``<name>_set`` in (bits the
    hardware sets), ``<name>_live`` in (read-only bits ORed into reads), ``<name>`` out.
    """

    def __init__(self, registers=REGISTERS):
        self.registers = tuple(registers)
        ports = {"bus": In(csr_bus_signature())}
        for reg in self.registers:
            name = port_name(reg)
            if reg.access == "RO":
                ports[name] = In(32)
            elif reg.access in ("RW", "W1P"):
                ports[name] = Out(32)
            else:
                ports[name] = Out(32)
                ports[f"{name}_set"] = In(32)
                ports[f"{name}_live"] = In(32)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        for reg in self.registers:
            if reg.access == "W1P":
                m.d.sync += getattr(self, port_name(reg)).eq(0)
            elif reg.access == "W1C":
                state = getattr(self, port_name(reg))
                m.d.sync += state.eq(state | getattr(self, f"{port_name(reg)}_set"))

        with m.If(bus.w_en):
            with m.Switch(bus.addr):
                for reg in self.registers:
                    if reg.access == "RO":
                        continue
                    target = getattr(self, port_name(reg))
                    with m.Case(reg.offset):
                        if reg.access in ("RW", "W1P"):
                            m.d.sync += target.eq(bus.w_data)
                        else:
                            hw_set = getattr(self, f"{port_name(reg)}_set")
                            m.d.sync += target.eq((target & ~bus.w_data) | hw_set)

        read_value = Signal(32)
        with m.Switch(bus.addr):
            for reg in self.registers:
                with m.Case(reg.offset):
                    if reg.access == "W1P":
                        m.d.comb += read_value.eq(0)  # strobes read as zero
                    elif reg.access == "W1C":
                        name = port_name(reg)
                        m.d.comb += read_value.eq(getattr(self, name)
                                                  | getattr(self, f"{name}_live"))
                    else:
                        m.d.comb += read_value.eq(getattr(self, port_name(reg)))
        with m.If(bus.r_en):
            m.d.sync += bus.r_data.eq(read_value)
        return m
