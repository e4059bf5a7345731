"""The twin's own netlist as a build for the cocotb runner (``twin/runner.py``), so that
cocotb and the twin simulate the same Verilog: ``twin.top.TwinTop`` (the accelerator
top with registered inputs) flattened by Yosys with the twin's script
(:func:`twin.dma.flatten_netlist`). ``bench/bench_twin.py`` times the two on it."""

from dataclasses import dataclass

from .dma import TOP_NAME, config_folder_name, flatten_netlist
from .system import TopBuild


@dataclass(frozen=True)
class TwinNetlist(TopBuild):
    """The twin's flattened netlist of ``engine``, in ``build/twin-netlist-<config>/``.

    Its ports are the twin's: ``clock``, ``reset`` and ``flush`` beside the top's CSR port
    and streams, every input registered (one cycle later at the core; ``twin/top.py``).
    """

    top_name = TOP_NAME

    @property
    def name(self):
        return f"twin-netlist-{config_folder_name(self.engine)}"

    def make_top(self):
        from .top import TwinTop

        return TwinTop(self.engine)

    def write_verilog(self, folder):
        """Flatten the netlist into ``folder`` (only when the design changed); its path."""
        return flatten_netlist(folder, self.make_top, what=f"twin netlist {self.name}")
