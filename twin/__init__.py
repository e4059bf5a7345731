"""The Verilator twins and the simulation builds of the hardware: a layer between ``hw``
(what they compile) and ``sw_driver`` (what drives them).

- :mod:`twin.dma`: the accelerator top on its CSR port and DMA streams, compiled by
  Verilator with ``twin/harness/harness.cpp`` behind a C ABI (the "sim" provider's device).
- :mod:`twin.serial`: the same top behind its UART host bridge, a pyserial-like port (the
  "uart-twin" provider's device).
- :mod:`twin.energy`: the twin with toggle counting, for the energy estimate.
- :mod:`twin.top`, :mod:`twin.netlist`: the twin's top and its flattened netlist.
- :mod:`twin.runner` with :mod:`twin.system`, :mod:`twin.blocks`, :mod:`twin.outcomes` and
  :mod:`twin.testbenches`: a design built by Verilator for a cocotb testbench, run by
  ``tessera sim``; the testbenches themselves (``sim/tb_*.py``) are tests, named here only as
  module strings.

The driver never imports this package: the providers "sim" and "uart-twin" find
:class:`twin.dma.Twin` and :class:`twin.serial.TwinSerial` through the ``tessera.twins``
entry points in ``pyproject.toml`` (``sw_driver/providers/simulated.py``).
"""
