"""Parameters of the residual-add unit (plain Python: the register map and the driver read
it without Amaranth). ``(name, width, signed, meaning)``, as ``models.eltwise`` defines
them (``add_multipliers`` gives the multipliers and shifts)."""

ADD_PARAM_FIELDS = (
    ("a_zero_point", 8, True, "zero point of input a"),
    ("b_zero_point", 8, True, "zero point of input b"),
    ("y_zero_point", 8, True, "zero point of the output"),
    ("lo", 8, True, "clamp low (fused ReLU)"),
    ("hi", 8, True, "clamp high"),
    ("a_multiplier", 31, False, "M_a in [2^30, 2^31)"),
    ("a_shift", 6, False, "n_a in [1, 62]"),
    ("b_multiplier", 31, False, "M_b"),
    ("b_shift", 6, False, "n_b"),
    ("y_multiplier", 31, False, "M_y"),
    ("y_shift", 6, False, "n_y"),
)
