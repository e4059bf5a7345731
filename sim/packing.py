"""Pack and unpack stream payloads as the flat bit vectors of the generated Verilog.

Offsets come from the Amaranth layouts themselves, so the testbench can never disagree
with the hardware about where a field lives."""

from amaranth import Shape
from amaranth.lib import data

from hw.systolic import operand_layout, result_layout


def _field_bits(layout, name):
    field = layout[name]
    return field.offset, field.shape


def _pack_array(values, shape):
    elem = shape.elem_shape.width
    mask = (1 << elem) - 1
    word = 0
    for index, value in enumerate(values):
        word |= (int(value) & mask) << (index * elem)
    return word


def _unpack_array(word, shape):
    elem = shape.elem_shape.width
    mask = (1 << elem) - 1
    values = []
    for index in range(shape.length):
        raw = (word >> (index * elem)) & mask
        values.append(raw - (1 << elem) if raw >> (elem - 1) else raw)
    return values


class OperandPacker:
    """int8 A column + B row + last -> the ``operands__payload`` integer."""

    def __init__(self, rows, cols):
        self.layout = operand_layout(rows, cols)
        self.rows, self.cols = rows, cols

    def pack(self, a_column, b_row, last):
        if len(a_column) != self.rows or len(b_row) != self.cols:
            raise ValueError(f"beat needs {self.rows} A values and {self.cols} B values, "
                             f"got {len(a_column)} and {len(b_row)}")
        a_off, a_shape = _field_bits(self.layout, "a")
        b_off, b_shape = _field_bits(self.layout, "b")
        last_off, _ = _field_bits(self.layout, "last")
        return (_pack_array(a_column, a_shape) << a_off
                | _pack_array(b_row, b_shape) << b_off
                | int(bool(last)) << last_off)


class ResultUnpacker:
    """The ``results__payload`` integer -> (list of C signed values, last)."""

    def __init__(self, cols, acc_width):
        self.layout = result_layout(cols, acc_width)

    def unpack(self, word):
        c_off, c_shape = _field_bits(self.layout, "c")
        last_off, _ = _field_bits(self.layout, "last")
        width = c_shape.elem_shape.width * c_shape.length
        return _unpack_array((word >> c_off) & ((1 << width) - 1), c_shape), \
            bool((word >> last_off) & 1)


def pack_struct(layout, value):
    """A payload value (nested dicts / sequences of ints; missing struct fields are zero) as
    the flat integer of the port, with offsets taken from the Amaranth layout itself."""
    if isinstance(layout, type):  # a data.Struct class
        layout = data.Layout.cast(layout)
    if isinstance(layout, data.StructLayout):
        word = 0
        for name, field in layout:
            if name in value:
                word |= pack_struct(field.shape, value[name]) << field.offset
        return word
    if isinstance(layout, data.ArrayLayout):
        width = Shape.cast(layout.elem_shape).width
        word = 0
        for index, item in enumerate(value):
            word |= pack_struct(layout.elem_shape, item) << (index * width)
        return word
    return int(value) & ((1 << Shape.cast(layout).width) - 1)


def unpack_struct(layout, word):
    """``{field: value}`` from the flat integer of a ``data.StructLayout`` payload (signed
    fields and array elements sign-extended)."""
    layout = data.Layout.cast(layout)
    values = {}
    for name, field in layout:
        shape = field.shape
        if isinstance(shape, data.ArrayLayout):
            size = shape.elem_shape.width * shape.length
            values[name] = _unpack_array((word >> field.offset) & ((1 << size) - 1), shape)
        else:
            shape = Shape.cast(shape)
            width = shape.width
            raw = (word >> field.offset) & ((1 << width) - 1)
            values[name] = raw - (1 << width) if shape.signed and raw >> (width - 1) else raw
    return values
