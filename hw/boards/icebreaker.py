"""iCEBreaker (1BitSquared): iCE40 UP5K with a 12 MHz oscillator on pin 35 (the UP5K's PLL
input pad) and an FTDI FT2232H whose second channel is the ``uart`` (rx pin 6, tx pin 9).

The UP5K has eight SB_MAC16 and 5,280 LUTs: room for a bare 2x2 array, not an 8x8 one.
Yosys maps the behavioural multiplier onto SB_MAC16 only with ``synth_ice40 -dsp``.
"""

from amaranth_boards.icebreaker import ICEBreakerPlatform

from contract.config import ArrayConfig
from contract.config_file import PRESETS

PLATFORMS = {"icebreaker": ICEBreakerPlatform}
MULTIPLIERS = {"iCE40UP5K": 8}
SYNTH_OPTS = "-dsp"

#: The bare-array build's default (``hw.bitstream.build_array_bitstream``).
ARRAY_CONFIG = ArrayConfig(rows=2, cols=2)

#: The smallest whole accelerator that still runs the digits CNN (2x2 array, 1 KiB
#: activation buffers), without the residual add: the ``icebreaker`` preset of
#: contract/config_file.py. Its 8 SB_MAC16 fit; its logic does NOT fit the UP5K
#: (docs/boards.md: 11 140 logic cells of 5 280).
DEFAULT_CONFIGS = {"icebreaker": PRESETS["icebreaker"]}

#: 24 MHz = 12 MHz x 64 / 32 from the SB_PLL40_PAD; 3 Mbaud is a divisor of exactly 8.
DEFAULT_CLOCK_MHZ = {"icebreaker": 24.0}

#: Yosys commands run after the design is read (none yet).
SCRIPT_AFTER_READ = ""
