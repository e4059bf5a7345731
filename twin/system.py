"""Build description of the whole accelerator top for the cocotb runner (twin/runner.py)."""

from dataclasses import asdict, dataclass, field

from contract.config import ConvEngineConfig


@dataclass(frozen=True)
class TopBuild:
    """``hw.top.AcceleratorTop`` for ``engine``, named for its own build folder."""

    engine: ConvEngineConfig = field(default_factory=ConvEngineConfig)

    top_name = "tessera_top"

    @property
    def rows(self):
        return self.engine.rows

    @property
    def cols(self):
        return self.engine.cols

    @property
    def acc_width(self):
        return self.engine.acc_width

    @property
    def name(self):
        return self.engine.name.replace(self.engine.top_name, self.top_name, 1)

    def make_top(self):
        from hw.top import AcceleratorTop

        return AcceleratorTop(self.engine)

    def env(self):
        return self.engine.env()

    def as_dict(self):
        return asdict(self)
