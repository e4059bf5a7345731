"""The contract between the hardware and everything that talks to it, in plain Python.

Nothing here imports Amaranth or ``hw``: the RTL generators, the twin's C header, the
driver and ``docs/register-map.md`` all read these facts from here, so a user who only runs
models never loads the hardware generator.

- :mod:`contract.config` — build parameters (array size, buffer depths);
- :mod:`contract.requant` — requantization widths and ranges;
- :mod:`contract.descriptor` — the convolution descriptor and residual-add parameters;
- :mod:`contract.streams` — word counts and packing of the host link's stream beats;
- :mod:`contract.regmap` — registers, opcodes, error codes and the CONFIG packing, with the
  generators of the files that restate them (``python -m contract.regmap``).
"""
