"""ULX3S (Radiona): ECP5 LFE5U boards with a 25 MHz oscillator, eight LEDs and an FTDI
FT231X serial port (``uart``: rx M1, tx L4).

The bare 8x8 array needs 64 MULT18X18D, so it fits the 45F and 85F; the 25F (28 DSPs) takes a
5x5 array at most.
"""

from amaranth_boards.ulx3s import (
    ULX3S_25F_Platform,
    ULX3S_45F_Platform,
    ULX3S_85F_Platform,
)

from contract.config_file import PRESETS

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

# DP16KD (18 Kbit block RAMs) per device (the same data sheet; nextpnr reports the same).
BLOCK_RAMS = {
    "LFE5U-25F": 56,
    "LFE5U-45F": 108,
    "LFE5U-85F": 208,
}

# The whole accelerator per board, chosen to fit: the presets of the same names in
# contract/config_file.py (one fact). Multipliers: one per PE plus 4 per rescaler of the
# post-processing bank (hw.bitstream.multipliers_needed): 8x8 -> 80 of 156, 6x8 -> 64 of
# 72, 4x4 -> 28 of 28.
DEFAULT_CONFIGS = {name: PRESETS[name] for name in PLATFORMS}

# Design clock per board (MHz): what the board's preset closes timing at, so a default
# build is a bitstream that works. The 85F's 8x8 routes and meets 62.5 MHz (its fmax is
# recorded in tessera/explore/board_builds.json); at 125 MHz (the first target) it misses
# and, since commit a0a95dd, does not route. 62.5 MHz is 25 MHz x 5 / 2 from the EHXPLLL; 3 Mbaud
# takes a divisor of 21 there (0.8% slow, well inside an 8N1 receiver's tolerance).
DEFAULT_CLOCK_MHZ = {"ulx3s-85f": 62.5, "ulx3s-45f": 62.5, "ulx3s-25f": 62.5}

# nextpnr's router for a build with the resident block where nextpnr's default (router1)
# does not route it: on the 85F router1 left 100 to 200 arcs unrouted after 17 and 33 min,
# router2 routes it in 10 to 15 min (tessera/explore/board_builds.json).
RESIDENT_ROUTER = {"ulx3s-85f": "router2"}

# nextpnr's router for a build whose array runs on its own clock (``array.pump`` 2): on the
# 85F's 16x8, router1 had 174 812 of 183 569 arcs left after 8 min, router2 routes it in
# 11 to 15 min (tessera/explore/board_builds.json).
PUMPED_ROUTER = {name: "router2" for name in PLATFORMS}
