"""iCEBreaker (1BitSquared): iCE40 UP5K with a 12 MHz oscillator.

The UP5K has eight SB_MAC16 and 5,280 LUTs: room for a 2x2 array, not an 8x8 one.
Yosys maps the behavioural multiplier onto SB_MAC16 only with ``synth_ice40 -dsp``.
"""

from amaranth_boards.icebreaker import ICEBreakerPlatform

from contract.config import ArrayConfig

PLATFORMS = {"icebreaker": ICEBreakerPlatform}
MULTIPLIERS = {"iCE40UP5K": 8}
DEFAULT_CONFIG = ArrayConfig(rows=2, cols=2)
SYNTH_OPTS = "-dsp"
