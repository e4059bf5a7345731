"""The cycle model of a resident run (the passes plus the player's overheads,
``sw_driver/cycle_model.py``) against the default twin's ``PERF_CYCLES``, through a session
on the RTL player; this also drives the runner's load and run protocol on the real player
(a load must be through before the next command, and ``done`` comes after the last output
word)."""

import numpy as np
import pytest

from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ
from sw_driver import InferenceSession
from sw_driver.cycle_model import (
    RESIDENT,
    resident_pass_cycles,
    resident_run_cycles,
    resident_stream_cycles,
)

CONFIG = PRESETS["default"]


def test_player_overheads_follow_the_table():
    """The composition of docs/resident.md's table: a one-segment SEND of L words is
    L + 27 and a RECV L + 22; each register write 2 cycles; each further segment 2."""
    assert resident_stream_cycles("SEND", 10, 1) == 37
    assert resident_stream_cycles("RECV", 10, 1) == 32
    assert resident_stream_cycles("SEND", 10, 2) == 10 + 27 + RESIDENT.SEGMENT
    one = resident_pass_cycles(1000, csr_writes=10, read_segments=1)
    assert resident_pass_cycles(1000, csr_writes=11, read_segments=1) == one + 2 - 2
    assert resident_pass_cycles(1000, csr_writes=10, read_segments=3) == one + 4
    with pytest.raises(KeyError):
        resident_stream_cycles("PASS", 1, 1)


def _player_cycles(kind, words, segments, *, limit):
    """Cycles of a run of ``kind`` (one record of ``words`` stream words in ``segments``
    equal segments, then ``END``) on the player with its memories under Amaranth's
    simulator: from the ``run`` strobe's cycle to the ``set_done`` pulse's, both counted;
    a ``RECV``'s words offered by the host a word a cycle. The run may take ``limit``
    cycles, the program's load as many."""
    from amaranth.sim import Simulator

    from bench.ooc_fmax import ResidentBlock
    from contract.resident import Segment, header
    from sim.streams import run_bounded

    dut = ResidentBlock(data_words=1024, program_words=256)
    each = words // segments
    parts = [Segment(base=100 * k, outer_count=1, outer_stride=0, inner_count=1,
                     inner_stride=0, chunk_words=each, gap_words=0, fill=0)
             for k in range(segments)]
    count = {"reads" if kind == "SEND" else "writes": segments}
    program = [header(kind, **count), *(w for s in parts for w in s.encode()), header("END")]
    seen = {}

    async def bench(ctx):
        ctx.set(dut.to_host.ready, 1)
        ctx.set(dut.addr, 0)
        ctx.set(dut.count, len(program))
        ctx.set(dut.load_program, 1)
        await ctx.tick()
        ctx.set(dut.load_program, 0)
        for word in program:
            ctx.set(dut.from_host.valid, 1)
            ctx.set(dut.from_host.payload, {"data": word, "last": 0})
            await ctx.tick().until(dut.from_host.ready)
        ctx.set(dut.from_host.valid, 0)
        await ctx.tick().until(~dut.busy)
        ctx.set(dut.loops, 1)
        ctx.set(dut.run, 1)
        offered = 0
        if kind == "RECV":
            ctx.set(dut.from_host.valid, 1)
            ctx.set(dut.from_host.payload, {"data": 0, "last": 0})
        cycles = 1
        while True:
            taken = kind == "RECV" and offered < words and ctx.get(dut.from_host.ready)
            await ctx.tick()
            ctx.set(dut.run, 0)
            cycles += 1
            if taken:
                offered += 1
                ctx.set(dut.from_host.valid, offered < words)
                ctx.set(dut.from_host.payload, {"data": offered, "last": 0})
            if ctx.get(dut.set_done):
                break
            assert cycles < limit, f"no done after {cycles} cycles"
        seen["cycles"] = cycles

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    assert run_bounded(sim, 1e-8 * (2 * limit + 8 * len(program))), \
        f"{kind}: the program's load or the run hung"
    return seen["cycles"]


@pytest.mark.parametrize("kind", ["SEND", "RECV"])
@pytest.mark.parametrize("words, segments", [(10, 1), (20, 1), (32, 2), (48, 3)])
def test_stream_records_take_the_cycles_the_model_says(kind, words, segments):
    """The RTL player against the cycle model's table (``RESIDENT``): a run of one ``SEND``
    or ``RECV`` record and ``END``, exact. Segments of 16 words or more, so that the fetch of
    each next segment hides behind the walk of the one before, as the table assumes."""
    model = resident_run_cycles(resident_stream_cycles(kind, words, segments)
                                + RESIDENT.RECORD)
    assert _player_cycles(kind, words, segments, limit=2 * model) == model


@pytest.mark.slow
def test_resident_cycles_match_the_twin(rng, seed):
    from sw_driver.providers.sim import SimProvider

    provider = SimProvider(CONFIG)
    session = InferenceSession(str(DIGITS_QDQ), providers=[provider, "cpu"])
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    assert session._segments, provider.resident_notes
    for batch in (1, 3):
        x = {"input": rng.random((batch, 1, 8, 8), dtype=np.float32)}
        got, want = session.run(None, x)[0], reference.run(None, x)[0]
        assert np.array_equal(got, want), f"resident output differs (seed {seed})"
    row = next(r for r in session.profile() if "segment" in r)
    assert "fell_back_from" not in row and row["segment"]["loads"] == 1
    image = session._segments[row["layer"]].image
    model, twin = image.run_cycles(3), row["cycles"]
    # The twin's figure also holds the host's few register accesses around the run.
    assert abs(model - twin) / twin < 0.02, f"model {model} against twin {twin} (seed {seed})"
    segment = row["segment"]
    assert segment["link_seconds"] is None and "twin" in segment["link_model"]
    assert segment["compute_seconds"] == pytest.approx(image.run_cycles(1) / 50e6)


@pytest.mark.slow
def test_resnet8_runs_bit_exact_on_the_twin(tmp_path, rng, seed):
    """ResNet-8 resident on the default twin's RTL (its input a host segment, its residual
    Adds done by the player's add in PASS_ADD records, the look-ahead between passes):
    bit-exact with the cpu provider, and the cycle model within 2 %."""
    from models.zoo import random_models
    from sw_driver.providers.sim import SimProvider

    path = str(random_models.built("resnet8", tmp_path))
    session = InferenceSession(path, providers=[SimProvider(CONFIG), "cpu"])
    reference = InferenceSession(path, providers=["cpu"])
    assert session._segments
    for _ in range(2):  # the second run's cycles: the image already loaded
        x = {session.get_inputs()[0].name: rng.random((2, 3, 32, 32), dtype=np.float32)}
        got, want = session.run(None, x)[0], reference.run(None, x)[0]
        assert np.array_equal(got, want), f"resident output differs (seed {seed})"
    row = next(r for r in session.profile() if "segment" in r)
    assert row["segment"]["loads"] == 1, row
    image = session._segments[row["layer"]].image
    assert [p.layer for p in image.passes if p.layer.endswith("_conv2")], image.passes
    model, twin = image.run_cycles(2), row["cycles"]
    assert abs(model - twin) / twin < 0.02, f"model {model} against twin {twin} (seed {seed})"
