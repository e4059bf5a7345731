"""The resident block under Amaranth's simulator (``hw/resident.py``): loads and their
checksum, read-back, bad programs, the soft reset, and whole engine passes (a 3x3
convolution, an ADD, a POOL) replayed by the player from on-chip memory, bit-exact with the
engine's reference and the golden models."""

from collections import deque
from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator
from resident_images import pass_records, send_record, single_pass_image, words_of

from contract.config import ArrayConfig, ConvEngineConfig
from contract.regmap import ERROR_CODES, by_name
from contract.resident import (
    HOST_BASE,
    SEGMENT_WORDS,
    BootImage,
    ResidentFormatError,
    Segment,
    header,
    image_checksum,
)
from hw.resident import DataMemory, ResidentTop, accelerator_top
from hw.top import AcceleratorTop
from models.conv import conv2d
from models.eltwise import add, add_multipliers
from models.pool import max_pool2d
from models.requant import requantize
from sim.streams import csr_read, csr_write, run_bounded
from sw_driver import regs
from sw_driver.accelerator import add_program, pass_program, pool_program
from sw_driver.conv_lowering import assemble_output, engine_reference, lower_conv2d
from sw_driver.resident.player import add_words

#: A small engine with a small resident block: quick to simulate.
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=512, weight_depth=256,
                          max_col_tiles=4, resident_words=1024, program_words=256)
REG = by_name()
RES_CTRL = {f.name: 1 << f.lsb for f in REG["RES_CTRL"].fields}
DONE, ERROR = regs.STATUS_DONE_MASK, regs.STATUS_ERROR_MASK


class Host:
    """The host's side of the top in a testbench: registers by name, a host-to-device
    queue that a background process feeds in, and every device-to-host word collected."""

    def __init__(self, dut):
        self.dut = dut
        self.queue = deque()
        self.received = []  # (word, last)

    def bind(self, sim):
        dut = self.dut

        async def feeder(ctx):
            # One word offered at a time, held until taken (a loop of ticks rather than
            # ``stream_put``, so that the simulation may end while a word waits).
            offered = False
            async for _, _, ready in ctx.tick().sample(dut.h2c.ready):
                if offered and ready:
                    offered = False
                if not offered and self.queue:
                    word, last = self.queue.popleft()
                    ctx.set(dut.h2c.payload, {"data": int(word), "last": last})
                    offered = True
                ctx.set(dut.h2c.valid, offered)

        async def collector(ctx):
            ctx.set(dut.c2h.ready, 1)
            async for _, _, valid, data, last in ctx.tick().sample(
                    dut.c2h.valid, dut.c2h.payload.data, dut.c2h.payload.last):
                if valid:
                    self.received.append((int(data), int(last)))

        sim.add_testbench(feeder, background=True)
        sim.add_testbench(collector, background=True)

    def dma_write(self, words):
        words = [int(w) for w in words]
        self.queue.extend((w, int(i + 1 == len(words))) for i, w in enumerate(words))

    async def write(self, ctx, name, value):
        await csr_write(ctx, self.dut.csr, REG[name].offset, int(value))

    async def read(self, ctx, name):
        return await csr_read(ctx, self.dut.csr, REG[name].offset)

    async def finish(self, ctx, *, limit=200_000):
        """RES_STATUS once busy is clear (done or error set), polled."""
        for _ in range(limit):
            status = await self.read(ctx, "RES_STATUS")
            if not status & regs.RES_STATUS_BUSY_MASK:
                return status
            await ctx.tick().repeat(8)
        raise AssertionError(f"the player is still busy after {limit} polls")

    async def load(self, ctx, words, *, address=0, program=False, send=None):
        await self.write(ctx, "RES_ADDR", address)
        await self.write(ctx, "RES_COUNT", len(words))
        await self.write(ctx, "RES_STATUS", DONE | ERROR)
        await self.write(ctx, "RES_CTRL", RES_CTRL["load_program" if program else "load_data"])
        self.dma_write(words[:send])
        return await self.finish(ctx)

    async def run(self, ctx, *, loops=1):
        await self.write(ctx, "RES_STATUS", DONE | ERROR)
        await self.write(ctx, "RES_LOOPS", loops)
        await self.write(ctx, "RES_CTRL", RES_CTRL["run"])

    async def play(self, ctx, records, *, data=None, incoming=()):
        """Load ``data`` (when given) and the program ``records``, run it once with
        ``incoming`` on the host stream, and return RES_STATUS at its end."""
        if data is not None:
            await self.load(ctx, data)
        await self.load(ctx, records, program=True)
        await self.run(ctx)
        self.dma_write(incoming)
        return await self.finish(ctx)


def simulate(bench, *, cycles=400_000, image=None, config=CONFIG):
    dut = ResidentTop(config, image=image)
    host = Host(dut)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    host.bind(sim)

    async def main(ctx):
        await bench(ctx, host)

    sim.add_testbench(main)
    assert run_bounded(sim, cycles * 1e-8), f"the testbench hung for {cycles} cycles"
    return host


def test_only_a_resident_configuration_gets_the_resident_top():
    tops = [accelerator_top(CONFIG), accelerator_top(ConvEngineConfig())]
    for top in tops:  # looked at, never elaborated: tell Amaranth so
        top._MustUse__silence = True
        getattr(top, "core", top)._MustUse__silence = True
    assert isinstance(tops[0], ResidentTop) and type(tops[1]) is AcceleratorTop
    plain = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2))
    with pytest.raises(ValueError, match="resident_words > 0"):
        ResidentTop(plain)


def test_the_configuration_names_and_carries_the_resident_memories():
    assert CONFIG.name == "conv_engine-r2c2a32-x512-w256-t4-m1024p256"
    plain = replace(CONFIG, resident_words=0, program_words=0)
    assert plain.name == "conv_engine-r2c2a32-x512-w256-t4" and not plain.resident
    assert "TESSERA_RESIDENT_WORDS" not in plain.env()
    for config in (CONFIG, plain):
        environ = {**config.env(), "TESSERA_ROWS": "2", "TESSERA_COLS": "2"}
        assert ConvEngineConfig.from_env(environ) == config
    with pytest.raises(ValueError, match="program_words must be an integer from 0 to 65536"):
        replace(CONFIG, program_words=1 << 17)
    with pytest.raises(ValueError, match="not 1024 and 0"):
        replace(CONFIG, program_words=0)


def test_load_checksum_and_read_back(rng, seed):
    data = rng.integers(0, 1 << 32, 37, dtype=np.uint64).astype(np.uint32)
    program = rng.integers(0, 1 << 32, 11, dtype=np.uint64).astype(np.uint32)
    seen = {}

    async def bench(ctx, host):
        seen["discovery"] = (await host.read(ctx, "RES_DATA_WORDS"),
                             await host.read(ctx, "RES_PROGRAM_WORDS"))
        await host.write(ctx, "RES_CTRL", RES_CTRL["clear_checksum"])
        seen["data load"] = await host.load(ctx, data, address=CONFIG.resident_words - 37)
        seen["after data"] = (await host.read(ctx, "RES_CHECKSUM_A"),
                              await host.read(ctx, "RES_CHECKSUM_B"))
        seen["program load"] = await host.load(ctx, program, address=5, program=True)
        seen["after both"] = (await host.read(ctx, "RES_CHECKSUM_A"),
                              await host.read(ctx, "RES_CHECKSUM_B"))
        await host.write(ctx, "RES_ADDR", CONFIG.resident_words - 37)
        await host.write(ctx, "RES_COUNT", 37)
        await host.write(ctx, "RES_CTRL", RES_CTRL["read_data"])
        seen["read"] = await host.finish(ctx)
        await host.write(ctx, "RES_CTRL", RES_CTRL["clear_checksum"])
        await ctx.tick()
        seen["cleared"] = (await host.read(ctx, "RES_CHECKSUM_A"),
                           await host.read(ctx, "RES_CHECKSUM_B"))

    host = simulate(bench, cycles=20_000)
    label = f"seed={seed}"
    assert seen["discovery"] == (CONFIG.resident_words, CONFIG.program_words)
    assert seen["data load"] == seen["program load"] == seen["read"] == DONE, label
    assert seen["after data"] == image_checksum(data), label
    assert seen["after both"] == image_checksum(program, image_checksum(data)), label
    assert seen["cleared"] == (0, 0)
    assert [w for w, _ in host.received] == [int(w) for w in data], label
    assert [last for _, last in host.received] == [0] * 36 + [1], label


def random_segment(rng, *, words):
    """A segment of random shape (strides of either sign, gaps, empty counts sometimes)
    whose every address lies in [0, words)."""
    while True:
        segment = Segment(base=int(rng.integers(0, words)),
                          outer_count=int(rng.integers(0, 4)),
                          outer_stride=int(rng.integers(-40, 41)),
                          inner_count=int(rng.integers(0, 4)),
                          inner_stride=int(rng.integers(-9, 10)),
                          chunk_words=int(rng.integers(0, 6)),
                          gap_words=int(rng.choice([0, 0, 1, 2])),
                          fill=int(rng.integers(0, 1 << 32)))
        if all(0 <= a < words for a in segment.addresses()):
            return segment


def stream_of(segment, memory):
    """The words a reader sends for ``segment`` (``contract.resident``'s definition)."""
    out = []
    for o in range(segment.outer_count):
        for i in range(segment.inner_count):
            start = segment.base + o * segment.outer_stride + i * segment.inner_stride
            out += [int(memory[a]) for a in range(start, start + segment.chunk_words)]
            out += [segment.fill] * segment.gap_words
    return out


def test_segments_walk_as_the_contract_says(rng, seed):
    """RECV and SEND of random multi-segment records (strides of both signs, gaps, empty
    segments): the words sent, and the memory after the writes, against the model."""
    words = 256
    memory = rng.integers(0, 1 << 32, words, dtype=np.uint64).astype(np.uint32)
    writes = [random_segment(rng, words=words) for _ in range(4)]
    reads = [random_segment(rng, words=words) for _ in range(5)]
    incoming = rng.integers(0, 1 << 32, sum(s.words for s in writes),
                            dtype=np.uint64).astype(np.uint32)
    model = memory.copy()
    stream = iter(incoming)
    for segment in writes:  # chunk words land in order; gap words are dropped
        for o in range(segment.outer_count):
            for i in range(segment.inner_count):
                start = segment.base + o * segment.outer_stride + i * segment.inner_stride
                for address in range(start, start + segment.chunk_words):
                    model[address] = next(stream)
                for _ in range(segment.gap_words):
                    next(stream)
    sent = [w for segment in reads for w in stream_of(segment, model)]
    records = [header("RECV", writes=len(writes)), *(w for s in writes for w in s.encode()),
               header("SEND", reads=len(reads)), *(w for s in reads for w in s.encode()),
               header("END")]
    seen = {}

    async def bench(ctx, host):
        seen["run"] = await host.play(ctx, records, data=memory, incoming=incoming)
        seen["sent"] = list(host.received)
        host.received.clear()
        await host.write(ctx, "RES_ADDR", 0)
        await host.write(ctx, "RES_COUNT", words)
        await host.write(ctx, "RES_CTRL", RES_CTRL["read_data"])
        seen["read"] = await host.finish(ctx)

    host = simulate(bench, cycles=40_000)
    label = f"seed={seed} writes {writes} reads {reads}"
    assert seen["run"] == seen["read"] == DONE, label
    assert [w for w, _ in seen["sent"]] == sent, label
    if sent:
        assert [last for _, last in seen["sent"]] == [0] * (len(sent) - 1) + [1], label
    assert [w for w, _ in host.received] == [int(w) for w in model], label


@pytest.mark.parametrize("case", ["bad_record", "segment_past_the_end", "load_past_the_end",
                                  "record_past_the_end"])
def test_a_bad_program_stops_with_its_error_code(case):
    words = {
        "bad_record": [header("END") | 0x7F],
        "segment_past_the_end": [header("SEND", reads=1),
                                 *Segment(base=CONFIG.resident_words - 1,
                                          chunk_words=2).encode(), header("END")],
        "record_past_the_end": [header("PASS", csr=CONFIG.program_words // 2)],
    }.get(case, [header("END")])
    seen = {}

    async def bench(ctx, host):
        seen["load"] = await host.load(ctx, words, program=True)
        if case == "load_past_the_end":
            # Three words from the second last: the two that fit are taken, then the
            # player stops (before the third arrives, so none is left on the stream).
            seen["status"] = await host.load(ctx, [1, 2, 3],
                                             address=CONFIG.resident_words - 2, send=2)
        else:
            await host.run(ctx)
            seen["status"] = await host.finish(ctx)
        seen["error"] = await host.read(ctx, "RES_ERROR")
        seen["pc"] = await host.read(ctx, "RES_PC")
        # The player is free again: a good program runs.
        await host.load(ctx, [header("END")], program=True)
        await host.run(ctx)
        seen["then"] = await host.finish(ctx)

    host = simulate(bench, cycles=20_000)
    bad = "BAD_RECORD" if case == "bad_record" else "BAD_ADDRESS"
    assert seen["load"] == DONE
    assert seen["status"] == ERROR and seen["error"] == ERROR_CODES[bad][0], seen
    assert seen["pc"] == 0, seen
    assert seen["then"] == DONE
    # The SEND stopped before its bad address: never a word from there, nor a `last`.
    assert len(host.received) <= (1 if case == "segment_past_the_end" else 0)
    assert not any(last for _, last in host.received)


def test_soft_reset_aborts_a_run():
    seen = {}

    async def bench(ctx, host):
        await host.load(ctx, [*[header("RECV", writes=1)],
                              *Segment(base=0, chunk_words=4).encode(), header("END")],
                        program=True)
        await host.run(ctx)
        await ctx.tick().repeat(50)
        seen["waiting"] = await host.read(ctx, "RES_STATUS")
        await host.write(ctx, "CTRL", regs.CTRL_SOFT_RESET_MASK)
        await ctx.tick().repeat(4)
        seen["aborted"] = await host.read(ctx, "RES_STATUS")
        seen["id"] = await host.read(ctx, "ID")

    simulate(bench, cycles=5_000)
    assert seen["waiting"] == regs.RES_STATUS_BUSY_MASK
    assert seen["aborted"] == 0 and seen["id"] == regs.ID_VALUE


def requant_params(rng, channels):
    # Shifts that scale a 3x3x3 accumulator (|acc| < 2**19) onto the int8 range, so that
    # the outputs are not all clamped (a wrong word must show).
    return (rng.integers(-2**12, 2**12, channels).astype(np.int32),
            rng.integers(2**30, 2**31, channels), rng.integers(36, 40, channels))


def conv_case(rng):
    """A 3x3 convolution that lowers to one pass: (program, expected beats, check)."""
    x = rng.integers(-128, 128, (1, 3, 5, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 4)
    options = dict(x_zero_point=-3, y_zero_point=4, lo=-128, hi=127)
    passes = lower_conv2d(x, w, bias, mult, shift, stride=1, padding=1, config=CONFIG,
                          **options)
    assert len(passes) == 1
    want = requantize(conv2d(x, w, bias, x_zero_point=-3, stride=1, padding=1), mult, shift,
                      4, -128, 127)
    assert len(np.unique(want)) > 10, "the outputs are mostly clamped"
    reference = engine_reference(passes[0])
    # The engine's reference is the golden model's layer, before the player comes in.
    assert np.array_equal(assemble_output(passes, [reference], 4), want)

    def golden(beats):
        return assemble_output(passes, [beats], 4), want

    return pass_program(passes[0], CONFIG), golden


def pool_case(rng):
    x = rng.integers(-128, 128, (1, 3, 6, 4), dtype=np.int8)
    program = pool_program(x, CONFIG)

    def golden(beats):
        out = beats.reshape(1, 2, 3, 2, 2).transpose(0, 1, 4, 2, 3).reshape(1, 4, 3, 2)
        return out[:, :3], max_pool2d(x, 2, 2)

    return program, golden


_MA, _NA, _MB, _NB, _MY, _NY = add_multipliers(0.05, 0.08, 0.1)
_ADD_PARAMS = {"a_zero_point": 3, "b_zero_point": -7, "y_zero_point": 1, "lo": -128,
               "hi": 127, "a_multiplier": _MA, "a_shift": _NA, "b_multiplier": _MB,
               "b_shift": _NB, "y_multiplier": _MY, "y_shift": _NY}


def add_case(rng):
    a = rng.integers(-128, 128, (1, 3, 3, 3), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 3, 3, 3), dtype=np.int8)
    scales = (0.05, 0.08, 0.1)
    program = add_program(a, b, _ADD_PARAMS, CONFIG)

    def golden(beats):
        return (beats.reshape(-1)[:a.size].reshape(a.shape),
                add(a, scales[0], 3, b, scales[1], -7, scales[2], 1))

    return program, golden


CASES = {"conv3x3": conv_case, "pool": pool_case, "add": add_case}


@pytest.mark.parametrize("case", CASES)
def test_a_whole_pass_from_resident_memory_is_bit_exact(case, rng, seed):
    program, golden = CASES[case](rng)
    data, records, results = single_pass_image(program)
    seen = {}

    async def bench(ctx, host):
        seen["loads"] = (await host.load(ctx, data), await host.load(ctx, records,
                                                                     program=True))
        await host.run(ctx)
        seen["status"] = await host.finish(ctx)
        seen["error"] = await host.read(ctx, "RES_ERROR")

    host = simulate(bench)
    label = f"seed={seed} {case} on {CONFIG.name}"
    assert seen["loads"] == (DONE, DONE), label
    assert seen["status"] == DONE, f"{label}: {seen}"
    assert len(host.received) == results, label
    assert [last for _, last in host.received] == [0] * (results - 1) + [1], label
    raw = np.array([w for w, _ in host.received], dtype="<u4").tobytes()
    got, want = golden(program.decode(raw))
    np.testing.assert_array_equal(got, want, err_msg=label)


@pytest.mark.parametrize("case", ["conv3x3", "add"])
def test_a_host_segment_feeds_the_pass_from_the_host(case, rng, seed):
    """A PASS whose read segments take a middle run of its stream from the host (a host
    segment, as the compiler streams a model's input) between two runs from the data
    memory, which holds zeros there: bit-exact, and the run's words all taken."""
    program, golden = CASES[case](rng)
    count = len(program.h2c) // 4
    start = int(rng.integers(1, count // 2))
    stop = int(rng.integers(start + 1, count))
    data, records, results = single_pass_image(program, host=(start, stop))
    incoming = words_of(program.h2c)[start:stop]
    seen = {}

    async def bench(ctx, host):
        seen["status"] = await host.play(ctx, records, data=data, incoming=incoming)

    host = simulate(bench)
    label = f"seed={seed} {case} host words {start}..{stop} of {count}"
    assert seen["status"] == DONE, f"{label}: {seen}"
    assert not host.queue, label
    raw = np.array([w for w, _ in host.received], dtype="<u4").tobytes()
    assert len(host.received) == results, label
    got, want = golden(program.decode(raw))
    np.testing.assert_array_equal(got, want, err_msg=label)


def test_a_pass_reads_what_the_pass_before_it_wrote(rng, seed):
    """Two ADD passes, the second reading the first's result words as its operands: the
    player starts the second pass's reader while the first computes (its look-ahead), and
    must not read those words before the first pass's writer has stored them (the memory
    holds zeros there before). Both results are sent; the second is the golden add of the
    first's bytes (each result word's lanes 0-1 as ``a``, its padding lanes 2-3 as ``b``)."""
    first, _ = add_case(rng)
    scales, zero_points = (0.05, 0.08, 0.1), (3, -7, 1)
    beats = first.c2h_bytes // 4
    a2 = np.zeros((1, 2 * beats, 1, 1), np.int8)
    second = add_program(a2, a2, _ADD_PARAMS, CONFIG)
    h2c = words_of(first.h2c)
    results, results2 = len(h2c), len(h2c) + beats
    records = [*pass_records(first, source=0, result=results),
               *pass_records(second, source=results, result=results2),
               *send_record(results, 2 * beats), header("END")]
    seen = {}

    async def bench(ctx, host):
        seen["status"] = await host.play(ctx, records, data=h2c)

    host = simulate(bench)
    label = f"seed={seed}"
    assert seen["status"] == DONE, f"{label}: {seen}"
    words = np.array([w for w, _ in host.received], dtype="<u4")
    assert len(words) == 2 * beats, label
    lanes = words[:beats].view(np.int8).reshape(beats, 4)
    a, b = lanes[:, :2].reshape(a2.shape), lanes[:, 2:].reshape(a2.shape)
    want = add(a, scales[0], zero_points[0], b, scales[1], zero_points[1], scales[2],
               zero_points[2])
    got = second.decode(words[beats:].tobytes()).reshape(-1)[:a2.size].reshape(a2.shape)
    np.testing.assert_array_equal(got, want, err_msg=label)


def test_a_pass_add_adds_the_skip_operand_as_its_results_are_stored(rng, seed):
    """On a build with the resident add, a 3x3 convolution's pass played twice: as a PASS
    (its results as they are) and as a PASS_ADD (each result word added lane by lane to
    the word ``fill`` words on, random int8, by ``models.eltwise.add``'s arithmetic with
    the ADD_* values the record writes): the second equals ``add_words`` of the first and
    the operand words; both results bit-exact word for word, padding lanes included."""
    config = replace(CONFIG, resident_add=True)
    program, _ = conv_case(rng)
    h2c = words_of(program.h2c)
    count = program.c2h_bytes // 4
    plain, added, operand = len(h2c), len(h2c) + count, len(h2c) + 2 * count
    skip = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    params = dict(_ADD_PARAMS, lo=-100, hi=90)
    add_writes = [(REG[f"ADD_{name.upper()}"].offset, int(params[name]) & 0xFFFFFFFF)
                  for name in params]
    fused = replace(program, csr_writes=(*program.csr_writes[:-1], *add_writes,
                                         program.csr_writes[-1]))
    records = pass_records(program, source=0, result=plain)
    second = pass_records(fused, source=0, result=added)
    second[0] = header("PASS_ADD", csr=len(fused.csr_writes), reads=1, writes=1)
    # The write segment's fill: from each result word to its operand word.
    second[-SEGMENT_WORDS:] = Segment(base=added, chunk_words=count,
                                      fill=(operand - added) & 0xFFFFFFFF).encode()
    records = [*records, *second, *send_record(plain, 2 * count), header("END")]
    data = np.concatenate([h2c, np.zeros(2 * count, np.uint32), skip])
    seen = {}

    later = rng.integers(0, 1 << 32, 8, dtype=np.uint64).astype(np.uint32)

    async def bench(ctx, host):
        seen["status"] = await host.play(ctx, records, data=data)
        seen["error"] = await host.read(ctx, "RES_ERROR")
        # After the run the writer's words go straight to the memory again: a load.
        seen["sent"] = list(host.received)
        host.received.clear()
        await host.load(ctx, later, address=plain)
        await host.write(ctx, "RES_ADDR", plain)
        await host.write(ctx, "RES_COUNT", len(later))
        await host.write(ctx, "RES_CTRL", RES_CTRL["read_data"])
        seen["read"] = await host.finish(ctx)

    host = simulate(bench, config=config)
    label = f"seed={seed} lo/hi {params['lo']}/{params['hi']}"
    assert seen["status"] == seen["read"] == DONE, f"{label}: {seen}"
    assert [w for w, _ in host.received] == [int(w) for w in later], label
    words = np.array([w for w, _ in seen["sent"]], dtype=np.uint32)
    assert len(words) == 2 * count, label
    np.testing.assert_array_equal(words[count:], add_words(words[:count], skip, params),
                                  err_msg=label)


def test_a_pass_add_without_the_resident_add_is_a_bad_record():
    records = [header("PASS_ADD"), header("END")]
    seen = {}

    async def bench(ctx, host):
        seen["status"] = await host.play(ctx, records)
        seen["error"] = await host.read(ctx, "RES_ERROR")

    simulate(bench, cycles=20_000)
    assert seen == {"status": ERROR, "error": ERROR_CODES["BAD_RECORD"][0]}, seen


def test_a_host_segment_outside_a_pass_is_a_bad_address():
    """Only a PASS's reads take host words: a SEND's host segment is an address past the
    data memory."""
    records = [header("SEND", reads=1), *Segment(base=HOST_BASE, chunk_words=2).encode(),
               header("END")]
    seen = {}

    async def bench(ctx, host):
        seen["status"] = await host.play(ctx, records, incoming=[1, 2])
        seen["error"] = await host.read(ctx, "RES_ERROR")

    host = simulate(bench, cycles=20_000)
    assert seen["status"] == ERROR, seen
    assert seen["error"] == ERROR_CODES["BAD_ADDRESS"][0], seen
    assert not host.received


def test_the_image_helpers_round_trip():
    """The test image lays the pass's bytes out word for word (a check of the helper the
    tests above and the twin's test share)."""
    assert list(words_of(b"\x01\x00\x00\x00\xff\xff\xff\xff")) == [1, 0xFFFFFFFF]


def test_a_boot_image_is_there_after_reset(rng, seed):
    """A build with a model in it (``tessera build``): after reset, with nothing loaded,
    the checksum registers read the image's checksum, the data memory reads back the
    image's words, and a run plays the image's program bit-exactly."""
    program, golden = conv_case(rng)
    data, records, results = single_pass_image(program)
    image = BootImage(program=records, data=data)
    seen = {}

    async def bench(ctx, host):
        seen["checksum"] = (await host.read(ctx, "RES_CHECKSUM_A"),
                            await host.read(ctx, "RES_CHECKSUM_B"))
        await host.write(ctx, "RES_ADDR", 0)
        await host.write(ctx, "RES_COUNT", len(data))
        await host.write(ctx, "RES_CTRL", RES_CTRL["read_data"])
        seen["read"] = await host.finish(ctx)
        seen["read_back"] = [w for w, _ in host.received]
        host.received.clear()
        await host.run(ctx)
        seen["status"] = await host.finish(ctx)

    host = simulate(bench, image=image)
    label = f"seed={seed} on {CONFIG.name}"
    assert image.checksum == image_checksum(data, image_checksum(records)) != (0, 0)
    assert seen["checksum"] == image.checksum, label
    assert seen["read"] == seen["status"] == DONE, f"{label}: {seen}"
    assert seen["read_back"] == [int(w) for w in data], label
    assert len(host.received) == results, label
    raw = np.array([w for w, _ in host.received], dtype="<u4").tobytes()
    got, want = golden(program.decode(raw))
    np.testing.assert_array_equal(got, want, err_msg=label)


def test_a_boot_image_is_checked():
    image = BootImage(program=[1, 2], data=[3] * 5)
    assert len(image.key) == 8 and image.key != BootImage(program=[1, 2], data=[3] * 4).key
    with pytest.raises(ValueError, match="5 data words do not fit a data memory of 4 words"):
        image.check_fits(4, 256)
    with pytest.raises(ResidentFormatError, match="program word 1 is -1, not a 32-bit word"):
        BootImage(program=[0, -1], data=[0])
    big = BootImage(program=[0], data=[0] * (CONFIG.resident_words + 1))
    with pytest.raises(ValueError, match="data memory of 1024 words"):
        ResidentTop(CONFIG, image=big)
    with pytest.raises(ValueError, match="a boot image needs a configuration with resident"):
        accelerator_top(replace(CONFIG, resident_words=0, program_words=0), image)


def test_the_banked_data_memory_reads_and_writes_as_one_memory(rng, seed):
    """``DataMemory`` over several banks (the last one short), with its initial contents:
    each read gives, ``READ_LATENCY`` cycles after its address, the word a plain memory
    would hold, writes landing a cycle after the write port's (random addresses, reads
    and writes in the same cycles)."""
    depth, bank_words = 200, 64
    init = [int(w) for w in rng.integers(0, 2**32, size=150, dtype=np.uint64)]
    dut = DataMemory(depth=depth, bank_words=bank_words, init=init)
    model = init + [0] * (depth - len(init))
    mismatches = []

    async def bench(ctx):
        pending = deque()  # (cycle the word is due, address, word expected)
        for cycle in range(600):
            address = int(rng.integers(0, depth))
            write = bool(rng.random() < 0.3)
            w_address, w_data = int(rng.integers(0, depth)), int(rng.integers(0, 2**32))
            ctx.set(dut.rd_addr, address)
            ctx.set(dut.w_en, write)
            ctx.set(dut.w_addr, w_address)
            ctx.set(dut.w_data, w_data)
            # A read takes the memory as it is this cycle (a write given now lands after).
            pending.append((cycle + DataMemory.READ_LATENCY, address, model[address]))
            if pending[0][0] == cycle:
                _, at, want = pending.popleft()
                got = ctx.get(dut.rd_data)
                if got != want and not mismatches:
                    mismatches.append(f"cycle {cycle}: word {at} read {got:#x}, "
                                      f"expected {want:#x}")
            await ctx.tick()
            if write:
                model[w_address] = w_data

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"seed={seed}: {mismatches[0]}"


def test_the_data_memory_checks_its_parameters():
    with pytest.raises(ValueError, match="bank_words must be a power of 2, not 48"):
        DataMemory(depth=100, bank_words=48)
    with pytest.raises(ValueError, match="depth must be a positive integer, not 0"):
        DataMemory(depth=0)
    with pytest.raises(ValueError, match="init has 5 words, more than the 4 of the memory"):
        DataMemory(depth=4, init=[0] * 5)
