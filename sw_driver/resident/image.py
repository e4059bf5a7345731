"""A compiled resident image: program words, constant words, where the tensors lie, and how
the host packs inputs into the words ``RECV`` takes and unpacks the words ``SEND`` gives."""

from dataclasses import dataclass, field

import numpy as np

from contract.resident import BootImage, image_checksum

from ..cycle_model import (
    RESIDENT,
    resident_pass_cycles,
    resident_run_cycles,
    resident_stream_cycles,
)

__all__ = ["DeviceImage", "PassInfo", "Port"]


@dataclass(frozen=True)
class Port:
    """A tensor that crosses the host link: a segment input (``RECV``) or output (``SEND``).

    Attributes
    ----------
    name : str
    shape : tuple of int
        One image's shape, batch dimension first (1).
    address, words : int
        Its block in the data memory (``address`` None: an input that goes straight from
        the host into the pass that reads it, a host segment, with no block).
    positions : numpy.ndarray of int64
        Byte of the block holding each element, in the tensor's C order.
    """

    name: str
    shape: tuple
    address: int | None
    words: int
    positions: np.ndarray = field(repr=False)

    def pack(self, x):
        """One image's words: its elements where the block holds them, zero padding."""
        block = np.zeros(4 * self.words, np.uint8)
        block[self.positions] = np.asarray(x, np.int8).reshape(-1).view(np.uint8)
        return block.view("<u4")

    def unpack(self, words):
        """One image's tensor from its block's words."""
        raw = np.asarray(words, "<u4").view(np.uint8)
        return raw[self.positions].view(np.int8).reshape(self.shape).copy()


@dataclass(frozen=True)
class PassInfo:
    """One engine pass of the program, for profiles and fault reports.

    ``core_cycles`` is the cycle model's figure for the pass as layer at a time runs it
    (:func:`sw_driver.cycle_model.pass_cycles`); :attr:`expected_cycles` adds what the
    player costs around it (its record, register writes, stream start, ``STATUS`` polls).
    """

    layer: str
    name: str
    record: int  # program word address of its PASS record
    core_cycles: int
    h2c_words: int
    c2h_words: int
    csr_writes: int
    read_segments: int = 1
    write_segments: int = 1
    #: The register writes of the pass layer at a time (``csr_writes`` leaves out those
    #: whose value the registers already hold); None: the same.
    host_csr_writes: int | None = None
    #: The record before it is a PASS: the player's look-ahead starts its reader early.
    ahead: bool = False

    @property
    def expected_cycles(self):
        return resident_pass_cycles(self.core_cycles, csr_writes=self.csr_writes,
                                    read_segments=self.read_segments,
                                    host_csr_writes=self.host_csr_writes, ahead=self.ahead)


@dataclass
class DeviceImage:
    """Everything a resident run needs, as the compiler laid it out.

    Attributes
    ----------
    config : contract.config.ConvEngineConfig
        The engine it was compiled for.
    program : numpy.ndarray of uint32
        Program memory words from address 0.
    data : numpy.ndarray of uint32
        Constant words (parameters and weights of every pass, in stream order), loaded at
        data-memory address 0; the arena follows them.
    data_words : int
        Data-memory words the image needs: constants plus the arena's peak.
    arena : dict
        Tensor name -> ``(address, words, stride)`` of every tensor the arena holds.
    inputs, outputs : list of Port
    passes : list of PassInfo
    layers : list of str
        The device layers compiled, in order.
    dont_care : list of numpy.ndarray of bool
        Per pass, per host-to-device byte: padding the pass never uses (what may differ
        from the layer-at-a-time stream).
    recv_segments, send_segments : int
        Segments of the ``RECV`` and ``SEND`` records (for the cycle model); 0: no
        ``RECV`` record (the input is a host segment of its pass).
    """

    config: object
    program: np.ndarray
    data: np.ndarray
    data_words: int
    arena: dict
    inputs: list
    outputs: list
    passes: list
    layers: list
    dont_care: list = field(default_factory=list, repr=False)
    recv_segments: int = 1
    send_segments: int = 1

    @property
    def const_words(self):
        return len(self.data)

    @property
    def arena_words(self):
        return self.data_words - self.const_words

    @property
    def load_order(self):
        """``[(kind, address, words)]``: what the host loads, program first, then data; the
        checksum is over the words in this order."""
        return [("program", 0, self.program), ("data", 0, self.data)]

    @property
    def checksum(self):
        """``(RES_CHECKSUM_A, RES_CHECKSUM_B)`` after loading :attr:`load_order` from a
        cleared checksum."""
        state = (0, 0)
        for _, _, words in self.load_order:
            state = image_checksum(words, state)
        return state

    def boot_image(self):
        """The :class:`~contract.resident.BootImage` of a build with this image built in
        (program and constants at word 0 of their memories, as :attr:`load_order` loads
        them; its checksum is :attr:`checksum`)."""
        if any(address for _, address, _ in self.load_order):
            raise ValueError("a boot image holds words loaded at address 0 only")
        return BootImage(program=tuple(int(w) for w in self.program),
                         data=tuple(int(w) for w in self.data))

    @property
    def expected_cycles(self):
        """The cycle model's figure for one iteration of the program on the device, without
        link time: ``RECV``, every ``PASS`` with the player's overheads, ``SEND`` and
        ``END`` (:mod:`sw_driver.cycle_model`'s resident part)."""
        recv = (resident_stream_cycles("RECV", self.recv_words, self.recv_segments)
                if self.recv_segments else 0)
        return (recv + sum(p.expected_cycles for p in self.passes)
                + resident_stream_cycles("SEND", self.output_words, self.send_segments)
                + RESIDENT.RECORD)

    def run_cycles(self, loops=1):
        """Modelled cycles of one run of ``loops`` iterations (``RES_LOOPS``), start to
        ``done``, on a link that keeps up with the device (the twin's host stream)."""
        return resident_run_cycles(self.expected_cycles, loops)

    @property
    def core_cycles(self):
        """The passes' cycles as layer at a time would count them (for comparison)."""
        return sum(p.core_cycles for p in self.passes)

    def pack_inputs(self, feeds):
        """Host-to-device words of ``len`` iterations: ``feeds`` maps each input's name to
        int8 of shape (N, ...) (N iterations); words in RECV order, iteration by
        iteration. Returns ``(words, N)``."""
        arrays = []
        for port in self.inputs:
            if port.name not in feeds:
                raise KeyError(f"resident image: no feed for input {port.name!r}")
            x = np.asarray(feeds[port.name])
            if x.dtype != np.int8 or tuple(x.shape[1:]) != tuple(port.shape[1:]):
                raise ValueError(f"resident image: input {port.name!r} must be int8 of shape "
                                 f"(N, {', '.join(map(str, port.shape[1:]))}), not "
                                 f"{x.dtype} {x.shape}")
            arrays.append(x)
        count = len(arrays[0])
        if any(len(x) != count for x in arrays):
            raise ValueError("resident image: every input needs the same batch size")
        words = [port.pack(x[n]) for n in range(count)
                 for port, x in zip(self.inputs, arrays, strict=True)]
        return (np.concatenate(words) if words else np.zeros(0, "<u4")), count

    @property
    def output_words(self):
        """Device-to-host words of one iteration (every SEND)."""
        return sum(port.words for port in self.outputs)

    @property
    def input_words(self):
        return sum(port.words for port in self.inputs)

    @property
    def recv_words(self):
        """Input words a ``RECV`` copies into the data memory (an input streamed straight
        into its pass, a host segment, has no block there)."""
        return sum(port.words for port in self.inputs if port.address is not None)

    def unpack_outputs(self, words, count):
        """``{name: int8 (count, ...)}`` from ``count`` iterations' SEND words."""
        words = np.asarray(words, "<u4").reshape(count, self.output_words)
        out = {}
        offset = 0
        for port in self.outputs:
            block = words[:, offset:offset + port.words]
            out[port.name] = np.concatenate([port.unpack(row) for row in block])
            offset += port.words
        return out

    def link_bytes(self):
        """Payload bytes the host link carries per inference: resident (``input`` and
        ``output`` words) and, for comparison, layer at a time as these same passes
        (every pass's host-to-device and device-to-host words)."""
        return {"resident": 4 * (self.input_words + self.output_words),
                "layer_at_a_time": 4 * sum(p.h2c_words + p.c2h_words for p in self.passes)}

    def summary(self):
        """Figures of the image, for reports."""
        return {"layers": len(self.layers), "passes": len(self.passes),
                "program_words": len(self.program), "const_words": self.const_words,
                "arena_words": self.arena_words, "data_words": self.data_words,
                "expected_cycles": self.expected_cycles, **{
                    f"link_bytes_{k}": v for k, v in self.link_bytes().items()}}
