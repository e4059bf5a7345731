"""Build descriptions of single blocks of the top (the post-processing bank, the max pool,
the loader, the output writer) for the cocotb runner."""

from dataclasses import asdict, dataclass

BLOCKS = ("postprocess", "maxpool", "host_loader", "result_writer")


@dataclass(frozen=True)
class BlockBuild:
    """One block of ``BLOCKS`` with ``lanes`` lanes (channels per beat) as a top."""

    block: str
    lanes: int = 4
    max_width: int = 16

    def __post_init__(self):
        if self.block not in BLOCKS:
            raise ValueError(f"block must be one of {BLOCKS}, not {self.block!r}")

    @property
    def top_name(self):
        return self.block

    @property
    def name(self):
        return f"{self.block}-l{self.lanes}-w{self.max_width}"

    # The runner passes these to every testbench; here they only describe the lanes.
    @property
    def rows(self):
        return 1

    @property
    def cols(self):
        return self.lanes

    @property
    def acc_width(self):
        return 32

    def make_top(self):
        if self.block == "host_loader":
            from hw.loader import HostLoader

            return HostLoader(self.lanes)
        if self.block == "result_writer":
            from hw.result_writer import ResultWriter

            return ResultWriter(self.lanes)
        if self.block == "postprocess":
            from hw.postprocess import PostProcessBank

            return PostProcessBank(lanes=self.lanes)
        from hw.maxpool import MaxPool2x2

        return MaxPool2x2(lanes=self.lanes, max_width=self.max_width)

    def env(self):
        return {"TESSERA_BLOCK": self.block, "TESSERA_LANES": str(self.lanes),
                "TESSERA_MAX_WIDTH": str(self.max_width)}

    def as_dict(self):
        return asdict(self)
