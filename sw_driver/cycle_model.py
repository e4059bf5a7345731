"""The cycle model of one engine pass: what the device's PERF_CYCLES counter will read.

Used by the planner (a layer's cost) and by the accelerator driver (how long to wait for a
pass). It counts the words the host link carries (``contract.streams``), so it follows the
stream format without importing the hardware.
"""

from fractions import Fraction
from math import ceil

from contract.descriptor import DEPTHWISE_FIELDS
from contract.postprocess import (
    REQUANT_LATENCY,
    SERIAL_BEAT_CYCLES,
    requant_units,
    serial_lane_cycles,
    serial_requantizer,
)
from contract.streams import ACTIVATIONS_PER_WORD, output_words, param_words, weight_words

__all__ = ["PASS_LATENCY_CYCLES", "RESIDENT", "TILE_SWITCH_CYCLES", "pass_cycles",
           "resident_pass_cycles", "resident_run_cycles", "resident_stream_cycles"]

#: Cycles per engine pass beyond loading and computing: the descriptor writes, lane
#: set-up, the array's skew and drain and the requantizer's stages (fitted on the 8x8
#: twin; docs/conv-engine.md). 94 before the retiming for the board clock,
#: which added the address generator's set-up cycle, the operand register after the
#: buffers and six requantizer stages; one more for the post-processing bank's lane-pick
#: stage and one for its saturation stage; one more for the sequencer's registered engine
#: start (``hw/sequencer.py``, STARTING); one each for the skid buffers between the address
#: generator and the engine's read stage and at the engine's output (``hw/conv_engine.py``).
PASS_LATENCY_CYCLES = 107

#: The host's writes of the depthwise fields (``contract.descriptor.DEPTHWISE_FIELDS``),
#: which every pass on a device with the depthwise mode carries
#: (``sw_driver.accelerator.pass_program``): the twin host's 2-cycle write each.
DEPTHWISE_REGISTER_CYCLES = 2 * len(DEPTHWISE_FIELDS)

#: The post-processing bank's requantization stages (``contract.postprocess``). Between
#: column tiles the engine waits for them to empty before it switches the per-channel
#: constants; that wait shows when the output side is the bottleneck (below), and hides
#: behind the next group's beats otherwise.

#: Cycles a column-tile switch costs an output-bound pass: the requantizer's drain and
#: refill and the parameter read (fitted on the 4x4 twin, tests/test_dataflow.py).
TILE_SWITCH_CYCLES = REQUANT_LATENCY + 4


#: A 1x1 pass's pixel group starts this many cycles after its last pixel's first word is
#: written, when that is sooner than all of its words (a pixel of many channels, as a
#: Dense pass's sample: its beats then follow the words as they come, four channels a
#: word against one a beat). Fitted on the 8x8 twin: Dense passes of 1, 8 and 16 samples
#: of 256 and 512 inputs within 0.2 %.
ONE_BY_ONE_START_CYCLES = 24


def _group_ready_words(engine_pass, rows):
    """For each pixel group: the activation words written before the last one it reads
    (its last pixel's bottom-right window position, clipped to the image); the array
    reads a group's beats only once their words are in. A 1x1 group whose last pixel has
    many channels starts once that pixel's first word is in
    (:data:`ONE_BY_ONE_START_CYCLES`)."""
    d = engine_pass.descriptor
    oh, ow = engine_pass.out_size
    width, channels, stride = d["in_width"], d["in_channels"], d["stride"]
    total = -(-engine_pass.activations.size // ACTIVATIONS_PER_WORD)
    ready = []
    for group in range(d["pixel_groups"]):
        oy, ox = divmod(min(group * rows + rows, oh * ow) - 1, ow)
        row = min(d["in_height"] - 1, oy * stride - d["pad_top"] + d["kernel_h"] - 1)
        col = min(width - 1, ox * stride - d["pad_left"] + d["kernel_w"] - 1)
        needed = (row * width + col + 1) * channels
        if not d.get("depthwise"):  # a depthwise pass counts words already
            needed = -(-needed // ACTIVATIONS_PER_WORD)
        words = min(total, needed)
        if d["kernel_h"] == d["kernel_w"] == 1 and not d.get("depthwise"):
            first = (row * width + col) * channels // ACTIVATIONS_PER_WORD + 1
            words = min(words, first + ONE_BY_ONE_START_CYCLES)
        ready.append(words)
    return ready


def pass_cycles(engine_pass, config):
    """Modelled device cycles of one engine pass, as the twin's PERF_CYCLES counts them.

    The parameters and the first column tile's weights load first (a cycle per stream
    word). The engine then starts; the activations stream in
    at a word a cycle while the array computes the first column tile, each pixel group
    waiting for the words of its last input row; the other tiles' weights follow, and a
    tile's first group waits for its last weight row. A group takes K cycles (a beat per
    cycle) unless its output beats are slower (a beat of C bytes leaves the time-shared
    post-processing bank and the output writer every ``max(output_words(C), C /
    requant_units(C))`` cycles); when that is the bottleneck, each column tile after the
    first also waits :data:`TILE_SWITCH_CYCLES`. Plus :data:`PASS_LATENCY_CYCLES`, and on
    a device with the depthwise mode :data:`DEPTHWISE_REGISTER_CYCLES`.

    An array on its own clock at less than ``pump`` times the design clock takes a beat
    every ``pump / ratio`` cycles, so K grows by that factor.

    A depthwise pass loads all its weights before the start; each column tile's groups
    wait for the words of that tile's own activations, which follow one another.

    A lean engine (``config.pipelined`` false) adds R cycles a group (its address
    generator's rotation) and, without the residual add, requantizes a lane at a time:
    ``contract.postprocess.serial_lane_cycles`` of the pass's largest shift per lane, and
    its last group's requantization starts only after that group's K cycles.
    """
    rows, cols = config.rows, config.cols
    d = engine_pass.descriptor
    tiles, groups = d["col_tiles"], d["pixel_groups"]
    tile_rows = engine_pass.weights.shape[0] // tiles
    # A word a cycle: the loader takes an entry's first word as the one before goes out.
    # A depthwise pass loads all its weights before the start (``first_weight_rows``).
    per_row = weight_words(cols)
    load = (per_row * engine_pass.first_weight_rows
            + param_words(cols) * engine_pass.bias.shape[0])
    per_output = max(output_words(cols), cols // requant_units(cols))
    k = engine_pass.beats // (tiles * groups)
    # An array on its own clock slower than `pump` times the engine's takes a beat every
    # pump / ratio engine cycles (``ConvEngineConfig.array_clock_ratio``).
    beat_cycles = max(Fraction(1), Fraction(config.array.pump) / config.array_clock_ratio())
    k = ceil(k * beat_cycles)
    if not config.pipelined:
        # The lean engine (``ConvEngineConfig.pipelined`` false): its address generator
        # rotates its R lanes between groups, and without the add its requantizer is the
        # serial one, a lane at a time (the pass's slowest shift, for a bound).
        k += rows
        if serial_requantizer(residual_add=config.residual_add, pipelined=False):
            lane = serial_lane_cycles(int(engine_pass.shift.max()))
            per_output = max(per_output, cols * lane + SERIAL_BEAT_CYCLES)
    last = d["last_rows"] * per_output
    # The lean engine's serial requantizer takes a group's results only once the array has
    # summed them, so the last group's drain follows its K cycles instead of hiding under
    # them (the pipelined engine's drain of a few cycles is in PASS_LATENCY_CYCLES).
    costs = [max(k, rows * per_output)] * (groups - 1) + [
        max(k, last) if config.pipelined else k + last]
    end = 0
    for ready, cost in zip(_group_ready_words(engine_pass, rows), costs, strict=True):
        end = max(end, ready) + cost
    act_words = -(-engine_pass.activations.size // ACTIVATIONS_PER_WORD)
    switch = TILE_SWITCH_CYCLES if k <= rows * per_output else 0
    if d.get("depthwise"):
        # Each column tile reads its own activations, ``dw_tile_daddr`` words on: its
        # groups wait for those as the first tile's wait for theirs.
        for tile in range(1, tiles):
            end += switch
            for ready, cost in zip(_group_ready_words(engine_pass, rows), costs, strict=True):
                end = max(end, tile * d["dw_tile_daddr"] + ready) + cost
        late_weights = 0
    else:
        for tile in range(1, tiles):
            weights_in = act_words + tile * tile_rows * per_row
            end = max(end + switch + costs[0], weights_in + 1) + sum(costs[1:])
        late_weights = (tiles - 1) * tile_rows * per_row
    # Words the array never reads (rows a stride skips) are still taken before the end.
    end = max(end, act_words + late_weights)
    # A device with the depthwise mode has one descriptor register more to write.
    descriptor_extra = DEPTHWISE_REGISTER_CYCLES if config.depthwise else 0
    return load + end + PASS_LATENCY_CYCLES + descriptor_extra


class RESIDENT:
    """The resident player's own cycles (``hw/resident.py``), measured in Amaranth's
    simulator on the player alone (docs/resident.md, "Cycles"); a resident run costs these
    on top of the core's :func:`pass_cycles`."""

    #: A run's start, and ``done`` after the last ``END``.
    RUN = 3
    #: Each record's fetch and decode (an ``END`` costs this alone, once per iteration); the
    #: program memory's word comes 2 cycles after its address (a register after the block
    #: RAM).
    RECORD = 4
    #: A ``PASS``'s register writes: ``CSR_SETUP`` plus ``CSR_WRITE`` each (the program
    #: memory gives a word a cycle: the offset, then the value).
    CSR_SETUP = 2
    CSR_WRITE = 2
    #: A command's first segment fetched from the program memory (the engine's copy of the
    #: command, 8 words, one a cycle, and the hand-over) plus 2 to start its walk.
    FIRST_SEGMENT = 16
    #: Each further segment of the command's stream: fetched while the one before is
    #: walked, then 2 cycles to start it.
    SEGMENT = 2
    #: A reader's first word after its segment is fetched: the data memory's 3 cycles (the
    #: bank's copy of the address, the block RAM, the bank's output register), the FIFO
    #: and the reader's output register.
    READ_LATENCY = 6
    #: A ``PASS`` after a ``PASS``: the player's look-ahead started its reader while the
    #: pass before computed, so its first segment and words wait at the core
    #: (``FIRST_SEGMENT`` and ``READ_LATENCY`` hidden); its first word reaches the core
    #: this many cycles after the start.
    AHEAD_START = 1
    #: A ``PASS``'s end after the core's ``STATUS.done``: a ``STATUS`` read every 3 cycles,
    #: 2 of latency (at most 5; 3 on average).
    STATUS_POLL = 3
    #: A ``SEND`` of one segment of L words takes L + 27 from its record to done, a ``RECV``
    #: L + 22: the record, the first segment, and the reader's latency (SEND) or the
    #: writer's last store (RECV).
    SEND_EXTRA = 27
    RECV_EXTRA = 22
    #: Cycles the host spends inside a layer-at-a-time pass that :func:`pass_cycles` counts
    #: and a played pass does not have: the twin's host reads the other five performance
    #: counters after ``PERF_CYCLES`` and ``STATUS`` at the end, 2 cycles a register access.
    HOST_READS = 12
    #: The twin host's register write (2 cycles), which :func:`pass_cycles` counts for each
    #: descriptor write of a layer-at-a-time pass and which the player's own write replaces.
    HOST_CSR_WRITE = 2


def resident_pass_cycles(core_cycles, *, csr_writes, read_segments, host_csr_writes=None,
                         ahead=False):
    """Cycles of one ``PASS`` record played on the device: the core's pass as
    :func:`pass_cycles` models it (host-paced, as layer at a time, with its
    ``host_csr_writes`` register writes, default ``csr_writes``), less the host's part of
    that figure, plus the player's record, its ``csr_writes`` register writes, stream start
    and ``STATUS`` polling. The write segments are fetched while the read stream runs, off
    the critical path; each further read segment costs its start. ``ahead``: the record
    after a ``PASS``, whose reader the player's look-ahead started early
    (:attr:`RESIDENT.AHEAD_START` instead of the first segment's fetch and read). A
    ``PASS_ADD`` costs its ``PASS``: the player's add stores the sums 8 cycles after the
    results, and its operand reads take the reader's cycles while that is mostly idle (0.4 %
    on ResNet-8's three, within the model's error)."""
    p = RESIDENT
    host_csr_writes = csr_writes if host_csr_writes is None else host_csr_writes
    start = p.AHEAD_START if ahead else p.FIRST_SEGMENT + p.READ_LATENCY
    player = (p.RECORD + p.CSR_SETUP + p.CSR_WRITE * csr_writes + start
              + p.SEGMENT * max(0, read_segments - 1) + p.STATUS_POLL)
    host = p.HOST_READS + p.HOST_CSR_WRITE * host_csr_writes
    return core_cycles - host + player


def resident_stream_cycles(kind, words, segments):
    """Cycles of a ``RECV`` or ``SEND`` record (``kind``) of ``words`` stream words in
    ``segments`` segments, from its record to its last word, at a word a cycle (the twin's
    host keeps up; a slower link adds its own time, which the link model counts)."""
    extra = {"RECV": RESIDENT.RECV_EXTRA, "SEND": RESIDENT.SEND_EXTRA}[kind]
    return words + extra + RESIDENT.SEGMENT * max(0, segments - 1)


def resident_run_cycles(iteration_cycles, loops=1):
    """Cycles of a resident run of ``loops`` iterations (``RES_LOOPS``) of a program whose
    iteration, ``END`` record included, takes ``iteration_cycles``."""
    return RESIDENT.RUN + loops * iteration_cycles
