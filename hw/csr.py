"""The host interface's shapes (the CSR port and the word of the two DMA streams) and the
CSR decoder, generated from the register map in ``contract/regmap.py``."""

from amaranth import C, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_bool
from contract.regmap import REGISTERS
from contract.streams import WORD_BITS

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


def word_layout():
    """The host link's word: ``contract.streams.WORD_BITS`` of data and ``last``, the beat of
    both DMA streams (``h2c`` into the device, ``c2h`` out of it)."""
    return data.StructLayout({"data": WORD_BITS, "last": 1})


def port_name(register):
    return register.name.lower()


class CsrBank(wiring.Component):
    """Registers of ``contract.regmap.REGISTERS`` behind one CSR bus.

    Ports per register, by access kind (``<name>`` is the register name in lower case):
    RO: ``<name>`` in, the value to read. RW: ``<name>`` out, the stored value, as wide as
    the register's highest field (``Register.stored_mask``: the bits no field declares are
    not stored and read 0).
    W1P: ``<name>`` out, the written bits for one cycle. W1C: ``<name>_set`` in (bits the
    hardware sets), ``<name>_live`` in (read-only bits ORed into reads), ``<name>`` out.

    Parameters
    ----------
    registers : iterable of contract.regmap.Register
        The registers the build implements (``contract.regmap.implemented_registers``).
    readback : bool
        Whether RW registers read back their stored value; without it they read 0 and
        their bits stay out of the read multiplexer (``ConvEngineConfig.csr_readback``).
    """

    def __init__(self, registers=REGISTERS, *, readback=True):
        self.registers = tuple(registers)
        self.readback = check_bool("readback", readback)
        ports = {"bus": In(csr_bus_signature())}
        for reg in self.registers:
            name = port_name(reg)
            if reg.access == "RO":
                ports[name] = In(32)
            elif reg.access == "RW":
                ports[name] = Out(reg.stored_mask.bit_length())
            elif reg.access == "W1P":
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
                        if reg.access == "RW":
                            m.d.sync += target.eq(bus.w_data & reg.stored_mask)
                        elif reg.access == "W1P":
                            m.d.sync += target.eq(bus.w_data)
                        else:
                            hw_set = getattr(self, f"{port_name(reg)}_set")
                            m.d.sync += target.eq((target & ~bus.w_data) | hw_set)

        # The read multiplexer is a tree of 2:1 multiplexers over the word address, not a
        # comparison of the address against every offset: that decode and the wide OR of
        # a parallel case were the bank's longest path (98 MHz out of context on ECP5).
        # Unmapped words are constant zero, so their subtrees fold away; a byte address
        # that is not word-aligned reads zero as before.
        values = {}
        for reg in self.registers:
            if reg.access == "W1P" or (reg.access == "RW" and not self.readback):
                continue  # strobes, and RW registers without readback, read as zero
            name = port_name(reg)
            value = getattr(self, name)
            if reg.access == "W1C":
                value = value | getattr(self, f"{name}_live")
            values[reg.offset >> 2] = value
        word = bus.addr[2:]

        def subtree(base, bit):
            if bit == len(word):
                return values.get(base, C(0, 32))
            low = subtree(base, bit + 1)
            high = subtree(base | (1 << (len(word) - 1 - bit)), bit + 1)
            return low if _zero(low) and _zero(high) else Mux(word[len(word) - 1 - bit],
                                                               high, low)

        read_value = Signal(32)
        m.d.comb += read_value.eq(Mux(bus.addr[:2] == 0, subtree(0, 0), 0))
        with m.If(bus.r_en):
            m.d.sync += bus.r_data.eq(read_value)
        return m


def _zero(value):
    return isinstance(value, Const) and value.value == 0
