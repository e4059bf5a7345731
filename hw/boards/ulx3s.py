"""ULX3S (Radiona): ECP5 LFE5U boards with a 25 MHz oscillator and eight LEDs.

The 8x8 array needs 64 MULT18X18D, so it fits the 45F and 85F; the 25F (28 DSPs) takes a
5x5 array at most.
"""

from amaranth_boards.ulx3s import (
    ULX3S_25F_Platform,
    ULX3S_45F_Platform,
    ULX3S_85F_Platform,
)

PLATFORMS = {
    "ulx3s-25f": ULX3S_25F_Platform,
    "ulx3s-45f": ULX3S_45F_Platform,
    "ulx3s-85f": ULX3S_85F_Platform,
}

# MULT18X18D per device (Lattice ECP5 family data sheet; see docs/measured figures).
MULTIPLIERS = {
    "LFE5U-25F": 28,
    "LFE5U-45F": 72,
    "LFE5U-85F": 156,
}
