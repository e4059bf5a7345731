"""iCEBreaker (1BitSquared): iCE40 UP5K with a 12 MHz oscillator on pin 35 (the UP5K's PLL
input pad) and an FTDI FT2232H whose second channel is the ``uart`` (rx pin 6, tx pin 9).

The UP5K has eight SB_MAC16 and 5,280 logic cells: the whole accelerator fits as the lean
1x1 engine (``pipelined = false``, docs/boards.md). Yosys maps the behavioural multiplier
onto SB_MAC16 only with ``synth_ice40 -dsp``.
"""

from amaranth_boards.icebreaker import ICEBreakerPlatform

from contract.config import ArrayConfig
from contract.config_file import PRESETS

PLATFORMS = {"icebreaker": ICEBreakerPlatform}
MULTIPLIERS = {"iCE40UP5K": 8}
SYNTH_OPTS = "-dsp"

#: The bare-array build's default (``hw.bitstream.build_array_bitstream``).
ARRAY_CONFIG = ArrayConfig(rows=2, cols=2)

#: The whole accelerator as the lean 1x1 engine (1 KiB activation buffer, no residual add,
#: no performance counters, no readback, no timing registers): the ``icebreaker`` preset
#: of contract/config_file.py; 4 976 of the UP5K's 5 280 logic cells (docs/boards.md).
DEFAULT_CONFIGS = {"icebreaker": PRESETS["icebreaker"]}

#: 18 MHz = 12 MHz x 48 / 32 from the SB_PLL40_PAD; 3 Mbaud is a divisor of exactly 6.
#: The 1x1 lean engine reached 23.3-24.8 MHz (docs/boards.md): 24 MHz met timing with one
#: placement seed of two, 18 leaves a quarter of the period spare.
DEFAULT_CLOCK_MHZ = {"icebreaker": 18.0}

#: Yosys commands run after the design is read (none yet).
SCRIPT_AFTER_READ = ""
