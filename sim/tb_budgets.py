"""How long a testbench waits for a pass before it reports a hang (testbench support: it
reads the driver's cycle model, as the testbenches may; hence the ``tb_`` name).

Each budget is a multiple of the cycle model's figure for the configuration under test
(``sw_driver.cycle_model.pass_cycles`` for engine passes, the planner's device work for
pools and adds), so it follows whatever that configuration costs: the lean engine's serial
requantizer (34-47 cycles a result) as much as the pipelined bank's one a cycle. A beat
count alone cannot see that, and timed out on large random layers of the lean engine.
"""

from sw_driver.cycle_model import pass_cycles
from sw_driver.providers.costs import add_work, pool_work

__all__ = ["BUDGET_FIXED_CYCLES", "BUDGET_MARGIN", "add_budget", "pass_budget",
           "pool_budget", "stretched"]

#: How many times the modelled cycles a pass may take. The model is within 10 % of the
#: twin's PERF_CYCLES; the rest covers what a testbench adds and the model does not count:
#: loads sent before ``start`` instead of during the pass (``sim/tb_conv.py``), AXI and
#: CSR handshakes, and the reads of results. tests/test_budgets.py measures the worst layer
#: the random generator can draw against it.
BUDGET_MARGIN = 4
#: Cycles added to every budget: reset, register writes, the first words' latency.
BUDGET_FIXED_CYCLES = 2000


def stretched(cycles, stall):
    """``cycles`` when a fraction ``stall`` of the cycles moves nothing (random
    backpressure or idle gaps on a stream)."""
    if not 0 <= stall < 1:
        raise ValueError(f"stall must be in [0, 1), not {stall!r}")
    return int(cycles / (1.0 - stall))


def _budget(modelled, stall):
    return stretched(BUDGET_MARGIN * modelled + BUDGET_FIXED_CYCLES, stall)


def pass_budget(engine_pass, config, *, stall=0.0):
    """Cycles to wait for one engine pass on ``config`` (a ``ConvEngineConfig``) with a
    fraction ``stall`` of the cycles stalled."""
    return _budget(pass_cycles(engine_pass, config), stall)


def pool_budget(shape, config, *, stall=0.0):
    """Cycles to wait for a 2x2 max pool of an NCHW ``shape``."""
    return _budget(pool_work(tuple(shape), config).cycles, stall)


def add_budget(size, config, *, stall=0.0):
    """Cycles to wait for a residual add of ``size`` elements."""
    return _budget(add_work(size, config).cycles, stall)
