"""Which layers of a session run resident: the runs of consecutive layers placed on one
device, each compiled into an image its runner loads once and starts once per batch.

A run is a maximal sequence of layers, in graph order, that the planner placed on the
device, with the views (Flatten, Reshape) of their tensors that sit between them whatever
runs those (a view costs nothing where the tensor lies). Only the run's inputs and the
tensors read after it (or returned by the model) cross the host link.
"""

from dataclasses import dataclass, field

from .. import graph as g
from .compiler import segment_outputs
from .runner import RUN_CSR_ACCESSES

__all__ = ["ResidentSegment", "placed_runs"]

_VIEWS = (g.Flatten, g.Reshape)


@dataclass(eq=False)
class ResidentSegment:
    """One compiled run of layers and how to start it.

    Attributes
    ----------
    provider : Provider
        The device provider that runs it (``run_resident``).
    layers : list of sw_driver.graph.Layer
        In graph order; views included.
    image : sw_driver.resident.image.DeviceImage
    runner : sw_driver.resident.runner.ResidentRunner
    index : int
        Its number among the session's segments, for profiles.
    """

    provider: object
    layers: list
    image: object
    runner: object
    index: int = 0
    names: set = field(init=False, repr=False)

    def __post_init__(self):
        self.names = {layer.name for layer in self.layers}

    @property
    def inputs(self):
        return [port.name for port in self.image.inputs]

    @property
    def outputs(self):
        return [port.name for port in self.image.outputs]

    def profile(self):
        """What ``session.profile()`` shows of the segment, on its first layer's row."""
        link = self.image.link_bytes()
        return {"index": self.index, "layers": [layer.name for layer in self.layers],
                "passes": len(self.image.passes),
                "expected_cycles": self.image.expected_cycles,
                "link_bytes_per_inference": link["resident"],
                "link_bytes_layer_at_a_time": link["layer_at_a_time"],
                "loads": self.runner.loads, **self.link_time()}

    def link_time(self):
        """Per inference (a batch of one, image loaded): the link's seconds on the
        provider's link model (None where it has none) against the compute's seconds at
        its clock."""
        link = self.image.link_bytes()["resident"]
        seconds, model = self.provider.link_seconds(
            link, transfers=2, csr_accesses=RUN_CSR_ACCESSES)
        clock = self.provider.compute_clock_hz()
        return {"link_seconds": seconds, "link_model": model,
                "compute_seconds": self.image.run_cycles(1) / clock, "clock_hz": clock}

    def describe(self):
        """The segment in one line, for profiles."""
        link = self.image.link_bytes()
        return (f"resident segment {self.index} ({len(self.layers)} layers, "
                f"{len(self.image.passes)} passes, ~{self.image.expected_cycles:,} cycles; "
                f"{link['resident']:,} bytes over the link per inference against "
                f"{link['layer_at_a_time']:,} layer at a time)")


def placed_runs(graph, placement, provider):
    """``[(layers, outputs)]``: each maximal run of ``graph``'s layers placed on
    ``provider`` (with the views between them), and the run's tensors read after it."""
    runs, current, produced = [], [], set()
    for layer, where in placement:
        if where is provider:
            current.append(layer)
            produced.add(layer.output)
        elif isinstance(layer, _VIEWS) and current and layer.inputs[0] in produced:
            current.append(layer)
            produced.add(layer.output)
        elif current:
            runs.append(current)
            current, produced = [], set()
    if current:
        runs.append(current)
    # A run that ends in views keeps them out: nothing on the device reads them.
    runs = [run[:max(i for i, layer in enumerate(run) if not isinstance(layer, _VIEWS)) + 1]
            for run in runs if any(not isinstance(layer, _VIEWS) for layer in run)]
    return [(run, segment_outputs(graph, run)) for run in runs]
