"""``tessera build MODEL --board B``: pick the accelerator configuration for one model on
one board, then build it.

The search (``docs/build.md``):

1. **Candidates.** Array sizes R x C from :data:`SIDES`, activation and weight buffer
   depths from :data:`ACT_DEPTHS` and :data:`WEIGHT_DEPTHS` (``max_col_tiles`` and the
   stream width stay at their defaults: the only stream width the contract has is 32 bits).
   The optional blocks (:data:`FEATURES`) are the board preset's, less the residual add
   for a model with no Add layer (:func:`features_for`). No array has more PEs than the
   model's largest routed build on the device (beyond it the clock is extrapolated).
2. **Fit.** The resource model (``tessera.explore.resource_model``, fitted on real builds) predicts
   LUT/FF/DSP/EBR and fmax; a candidate fits when every prediction is within the board's
   limits (logic below 85 %, 95 % of the iCE40's packed logic cells: ``FAMILY_CAPS``).
3. **Clock.** The predicted fmax less :data:`CLOCK_MARGIN`, rounded down to a clock the
   board's PLL makes and the UART bridge divides into 3 Mbaud.
4. **Score.** Predicted images/s of *this* model at batch 1: per layer, the driver's own
   pass list counted by the cycle model (``sw_driver.providers.costs.device_work``) at that
   clock; layers the device cannot run fall back to the CPU at the planner's CPU cost.
   A Conv/Dense layer that runs on a large enough engine but not on a candidate (its
   buffers too small) rules the candidate out rather than fall back, so the chosen engine
   runs every layer an engine can. Images/s is non-decreasing in the buffer depths, so
   for each array size only the largest buffers that fit are scored.
5. **Pick** the best score; ties go to fewer LUTs.

On a board with a resident preset (the ULX3S: ``ulx3s-85f-resident``...), only arrays whose
columns are a multiple of :data:`contract.resident.COLUMN_MULTIPLE` are candidates, each
predicted and scored with the smallest resident block, and the model goes into the
bitstream (:func:`model_image`): its resident image is compiled for the chosen
configuration, the resident memories are sized to it (whole DP16KD blocks; the buffers
are halved where the block RAM would not hold them), the design is predicted and clocked
again with them, and the build
writes it into their initial contents with the checksum registers' reset values equal to
its checksum, so the board boots with the model loaded and a session skips the load.

Then (not with ``--dry-run``) the chosen configuration is built with the board flow
(:func:`hw.bitstream.build_bitstream`) and ``report.json`` (chosen configuration, predicted
vs achieved fmax and resources, block RAM, the image's checksum and sizes, predicted
images/s, fallbacks) and ``run-config.json`` (``contract.config_file`` format, with the
clock and the resident memories) are written to ``--out``.
"""

import dataclasses
import functools
import json
import math
import time
from pathlib import Path

from contract.config import OPTIONAL_BLOCKS, ArrayConfig, ConvEngineConfig
from tessera.explore.resource_model import (
    REPORT_NAMES,
    ModelError,
    ResourceModel,
    board_limits,
    fits,
)

#: Array sides tried for R and for C.
SIDES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
ACT_DEPTHS = (512, 1024, 2048, 4096, 8192, 16384)
WEIGHT_DEPTHS = (256, 512, 1024, 2048, 4096, 8192)
#: The design clock is chosen this far below the predicted fmax: room for the fmax model's
#: held-out error (at most 4.8 % on the recorded builds, docs/build.md) and for the spread
#: of place and route between seeds and sources.
CLOCK_MARGIN = 0.10
#: A layer that no engine of the search space can run (the largest buffers, an 8x8
#: array) falls back to the CPU; others must run on the chosen engine.
PROBE = ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=max(ACT_DEPTHS),
                         weight_depth=max(WEIGHT_DEPTHS))
BAUD = 3_000_000
#: The optional blocks of an engine (docs/config.md) a build takes from its board's preset.
FEATURES = tuple(OPTIONAL_BLOCKS)


#: Words of one DP16KD used as a 32-bit memory (512 x 36): a built-in image's memories
#: are its words rounded up to whole blocks.
RESIDENT_BLOCK_WORDS = 512


class BuildSearchError(ValueError):
    """The model fits no configuration of the board; the message says which layer needs
    what."""


@dataclasses.dataclass
class LayerCost:
    """One layer of the model on one engine: where it runs and its modelled time."""

    name: str
    op: str
    where: str  # "device" or "cpu"
    seconds: float
    cycles: int = 0
    reason: str = ""


def load_graph(path):
    """The integer graph of an ONNX model and its tensor shapes at batch 1."""
    from sw_driver.importer import import_model
    from sw_driver.shapes import infer_shapes

    graph = import_model(str(path))
    return graph, infer_shapes(graph, 1)


def _device_refusal(layer, shape, config):
    """Why the engine ``config`` cannot run ``layer`` at ``shape``, or None; plus the
    modelled device work when it can."""
    from contract.streams import POOL_MAX_WIDTH
    from sw_driver import graph as g
    from sw_driver.providers import costs
    from sw_driver.providers.device import (
        add_refusal,
        engine_refusal,
        kind_refusal,
        pool_refusal,
    )

    if isinstance(layer, g.MaxPool):
        problem = pool_refusal(layer, POOL_MAX_WIDTH, shape)
    elif isinstance(layer, g.Add):
        problem = add_refusal(layer, config)
    elif isinstance(layer, (g.Conv, g.Dense)):
        problem = engine_refusal(layer, config)
    else:
        problem = kind_refusal(layer, runs="Conv, Dense, 2x2 MaxPool and Add")
    if problem is not None:
        return problem, None
    if shape is None:
        return "its input shape does not follow from the model's inputs", None
    try:
        return None, costs.device_work(layer, shape, config)
    except ValueError as error:
        return f"at input shape {list(shape)}: {error}", None


def _cpu_seconds(layer, shape):
    from sw_driver.providers.costs import CostModel, cpu_estimate

    cost = cpu_estimate(layer, shape, CostModel())
    return 0.0 if cost is None or cost.seconds is None else cost.seconds


def resident_board(board):
    """Whether ``board`` has a resident preset (``<board>-resident``): then the builds
    ``tessera build`` plans for it hold the model."""
    from contract.config_file import PRESETS

    return f"{board}-resident" in PRESETS


def _whole_blocks(words):
    return -(-words // RESIDENT_BLOCK_WORDS) * RESIDENT_BLOCK_WORDS


def model_image(model_path, config):
    """``(config, image)``: the model's resident image compiled for ``config`` (the device
    segment with the most weights, as ``sw_driver.resident.compile_model`` picks; a model
    all of whose device layers run in one segment, as the zoo's, is whole) and ``config``
    with resident memories of its size in whole DP16KD blocks.

    Raises
    ------
    sw_driver.errors.ResidentFitError
        The compiler refuses the model on ``config`` (the message says why).
    """
    from contract.config import MAX_PROGRAM_WORDS, MAX_RESIDENT_WORDS
    from sw_driver.resident import compile_model

    graph, _ = load_graph(model_path)
    image = compile_model(graph, config, data_words=MAX_RESIDENT_WORDS,
                          program_words=MAX_PROGRAM_WORDS)
    sized = dataclasses.replace(config, resident_words=_whole_blocks(image.data_words),
                                program_words=_whole_blocks(len(image.program)))
    return sized, image


def image_document(image, boot):
    """``report.json``'s ``image``: key, checksum, sizes and segment of a built-in model."""
    a, b = boot.checksum
    return {"key": boot.key, "checksum": [f"{a:#010x}", f"{b:#010x}"],
            "program_words": len(boot.program), "data_words": len(boot.data),
            "arena_words": image.arena_words, "layers": image.layers,
            "passes": len(image.passes),
            "link_bytes_per_inference": image.link_bytes()["resident"]}


def features_for(board, graph):
    """The optional blocks (:data:`FEATURES`) of a build of ``graph`` for ``board``: the
    board preset's (the iCEBreaker's leaves out what the UP5K cannot hold), and no residual
    add when no layer is an Add (its datapath would be area spent on nothing)."""
    from hw.bitstream import default_config
    from sw_driver import graph as g

    preset = default_config(board)
    features = {name: getattr(preset, name) for name in FEATURES}
    if not any(isinstance(layer, g.Add) for layer in graph.layers):
        features["residual_add"] = False
    return features


class ModelProfile:
    """A model's layers, split into those that must run on the engine and those that
    fall back to the CPU whatever the engine (with the reason), for a build for ``board``
    with its optional blocks (:func:`features_for`; a layer a missing block would run falls
    back). Without a board, every block is in."""

    def __init__(self, path, board=None):
        self.path = Path(path)
        self.graph, self.shapes = load_graph(path)
        self.features = features_for(board, self.graph) if board else {}
        probe = dataclasses.replace(PROBE, **self.features)
        self.required, self.fallbacks = [], []
        for layer in self.graph.layers:
            shape = self.shape_of(layer)
            problem, _ = _device_refusal(layer, shape, probe)
            if problem is None:
                self.required.append(layer)
            else:
                self.fallbacks.append(LayerCost(layer.name, layer.op, "cpu",
                                                _cpu_seconds(layer, shape), reason=problem))
        self.fallback_seconds = sum(f.seconds for f in self.fallbacks)

    def shape_of(self, layer):
        return self.shapes.get(layer.inputs[0]) if layer.inputs else None

    def evaluate(self, config, clock_mhz):
        """``(seconds per image, [LayerCost])`` on ``config`` at ``clock_mhz``, or
        ``(None, (layer, reason))`` when a required layer does not run on it."""
        costs, cycles = [], 0
        for layer in self.required:
            problem, work = _device_refusal(layer, self.shape_of(layer), config)
            if problem is not None:
                return None, (layer, problem)
            cycles += work.cycles
            costs.append(LayerCost(layer.name, layer.op, "device",
                                   work.cycles / (clock_mhz * 1e6), work.cycles))
        return cycles / (clock_mhz * 1e6) + self.fallback_seconds, costs


#: Step of the clocks tried below the target: a PLL from a 25 MHz oscillator makes
#: 25*FB/DIV (39.29 MHz, not 39 or 40), so whole MHz alone would miss most of them.
CLOCK_STEP_MHZ = 0.25


def pll_clock(board_info, fmax_mhz, margin=CLOCK_MARGIN):
    """The highest clock (a multiple of :data:`CLOCK_STEP_MHZ`) at most
    ``fmax_mhz * (1 - margin)`` that the board's PLL makes and that divides 3 Mbaud for the
    UART bridge; ``None`` if there is none."""
    return _pll_clock(board_info["board"], board_info["family"], fmax_mhz, margin)


@functools.lru_cache(maxsize=256)
def _pll_clock(board, family, fmax_mhz, margin):
    from hw.bitstream import KNOWN_BOARDS
    from hw.boards.accelerator import uart_divisor
    from hw.boards.pll import PllError, ecp5_pll_settings, ice40_pll_settings

    oscillator = KNOWN_BOARDS[board]().default_clk_frequency / 1e6
    settings = ecp5_pll_settings if family == "ecp5" else ice40_pll_settings
    steps = int(math.floor(fmax_mhz * (1 - margin) / CLOCK_STEP_MHZ))
    for step in range(steps, 0, -1):
        mhz = step * CLOCK_STEP_MHZ
        try:
            # The UART divides the clock the PLL makes, which may be off the one asked.
            uart_divisor(settings(oscillator, mhz).f_out_mhz, BAUD)
        except (PllError, ValueError):
            continue
        return mhz
    return None


def candidates(board_info, model, features=None, *, resident=False):
    """``[(config, prediction)]`` of every configuration (with the optional blocks
    ``features``) predicted to fit the board, for each array size only the Pareto-largest
    buffers (see the module docstring); with ``resident``, only arrays the resident
    compiler takes (columns a multiple of ``COLUMN_MULTIPLE``), each with the smallest
    resident block (a DP16KD per memory), so that the block's logic and clock are in every
    prediction and score (its memories are sized to the model's image later). Arrays with
    more PEs than the model's largest routed build on the device
    (:meth:`~tessera.explore.resource_model.ResourceModel.largest_routed`) are left out:
    their clock would be an extrapolation."""
    from contract.resident import COLUMN_MULTIPLE

    features = features or {}
    family, device = board_info["family"], board_info["device"]
    block = ({"resident_words": RESIDENT_BLOCK_WORDS, "program_words": RESIDENT_BLOCK_WORDS}
             if resident else {})
    routed = model.largest_routed(family, device)
    fitting = []
    for rows in SIDES:
        for cols in SIDES:
            if resident and cols % COLUMN_MULTIPLE:
                continue
            array = ArrayConfig(rows=rows, cols=cols)
            if rows * cols > board_info["limits"]["dsp"]:
                continue
            if routed is not None and rows * cols > routed:
                continue
            best_weight = {}
            for act in ACT_DEPTHS:
                for weight in WEIGHT_DEPTHS:
                    config = ConvEngineConfig(array=array, act_depth=act, weight_depth=weight,
                                              **features, **block)
                    prediction = model.predict(config, family, device)
                    if not fits(prediction, board_info):
                        best_weight[act] = (config, prediction)
            # Keep (act, weight) pairs not dominated by a larger act with as large weights.
            kept_weight = -1
            for act in sorted(best_weight, reverse=True):
                config, prediction = best_weight[act]
                if config.weight_depth > kept_weight:
                    fitting.append((config, prediction))
                    kept_weight = config.weight_depth
    return fitting


def search(model_path, board, *, resource_model=None, say=None):
    """Search the configurations of ``board`` for ``model_path``; return the plan (a dict:
    chosen configuration, prediction, clock, score, per-layer costs, fallbacks, the
    candidates considered, the runners-up).

    Raises
    ------
    ValueError
        Unknown board (the message lists the known ones).
    BuildSearchError
        No configuration that fits the board runs the model's layers; the message names
        each layer that rules them out and what it needs.
    """
    started = time.monotonic()
    board_info = board_limits(board)
    resource_model = ResourceModel() if resource_model is None else resource_model
    profile = ModelProfile(model_path, board)
    fitting = candidates(board_info, resource_model, profile.features,
                         resident=resident_board(board))
    scored, blocked = [], {}
    for config, prediction in fitting:
        if prediction["fmax_mhz"] is None:
            raise ModelError(f"the resource model has no fmax for {board_info['family']} "
                             f"(no full build of that family was fitted); run `make sweep "
                             f"BOARDS={board}` and refit (docs/build.md)")
        clock = pll_clock(board_info, prediction["fmax_mhz"])
        if clock is None:
            continue
        seconds, costs = profile.evaluate(config, clock)
        if seconds is None:
            layer, reason = costs
            blocked.setdefault(layer.name, (layer, reason, config))
            continue
        scored.append({"config": config, "prediction": prediction, "clock_mhz": clock,
                       "seconds": seconds, "images_per_s": 1.0 / seconds, "layers": costs})
    if not scored:
        raise BuildSearchError(_no_fit_message(profile, board_info, fitting, blocked,
                                               resource_model))
    scored.sort(key=lambda c: (-c["images_per_s"], c["prediction"]["lut"]))
    image, refused = None, None
    if resident_board(board):
        scored, image, refused = _with_model_image(model_path, board, board_info, scored,
                                                   resource_model, profile)
    best = scored[0]
    if say is not None:
        say(f"searched {len(fitting)} fitting configurations ({len(scored)} run the model) "
            f"in {time.monotonic() - started:.1f} s")
    return {
        "model": str(model_path), "board": board, "board_info": board_info,
        "config": best["config"], "prediction": best["prediction"],
        "clock_mhz": best["clock_mhz"], "images_per_s": best["images_per_s"],
        "layers": best["layers"], "fallbacks": profile.fallbacks,
        "candidates": len(fitting), "runnable": len(scored),
        "runners_up": scored[1:4], "image": image, "image_refused": refused,
        "unmeasured": resource_model.unmeasured(best["config"], board_info["family"]),
    }


def _with_model_image(model_path, board, board_info, scored, resource_model, profile):
    """``(scored, image, refused)``: the scored candidates (best first, each with the
    smallest resident block: :func:`candidates`) with the first one that holds the model's
    resident image (the compiler takes it, its memories fit the device's DP16KD and the
    resource model still predicts a fit) moved to the front, configured with the memories
    (:func:`model_image`) and predicted, clocked and scored again; ``image`` is that
    candidate's DeviceImage. When none does: the best candidate without the block, ``None``
    and the best candidate's reason."""
    from sw_driver.errors import ResidentFitError

    reasons = []
    for index, candidate in enumerate(scored):
        try:
            sized, image = _image_in_block_ram(model_path, board, candidate["config"])
        except (ResidentFitError, ValueError) as error:
            reasons.append(str(error))
            continue
        chosen = _rescored(candidate, sized, board_info, resource_model, profile)
        if isinstance(chosen, str):
            reasons.append(f"with the image's memories {chosen}")
            continue
        return [chosen, *scored[:index], *scored[index + 1:]], image, None
    for index, candidate in enumerate(scored):
        bare = dataclasses.replace(candidate["config"], resident_words=0, program_words=0)
        chosen = _rescored(candidate, bare, board_info, resource_model, profile)
        if not isinstance(chosen, str):
            return [chosen, *scored[:index], *scored[index + 1:]], None, \
                reasons[0] if reasons else "no candidate"
    return scored, None, reasons[0] if reasons else "no candidate"


def _image_in_block_ram(model_path, board, config):
    """``(config, image)`` of :func:`model_image`, with the engine's buffers halved
    (activations first: a copy per row) while the memories and buffers are more block RAM
    than the device has; the image is compiled again for each (smaller buffers, more
    passes). Raises the last refusal when even the smallest buffers do not fit."""
    from hw.bitstream.registry import check_fits

    while True:
        sized, image = model_image(model_path, config)
        try:
            check_fits(board, sized)
            return sized, image
        except ValueError:
            if config.act_depth > min(ACT_DEPTHS):
                config = dataclasses.replace(config, act_depth=config.act_depth // 2)
            elif config.weight_depth > min(WEIGHT_DEPTHS):
                config = dataclasses.replace(config, weight_depth=config.weight_depth // 2)
            else:
                raise


def _rescored(candidate, config, board_info, resource_model, profile):
    """``candidate`` with ``config``: its prediction, clock and score (a dict); or why it
    does not fit (a string)."""
    prediction = resource_model.predict(config, board_info["family"], board_info["device"])
    over = fits(prediction, board_info)
    if over:
        return f"the resource model predicts {', '.join(over)} over the board's"
    clock = pll_clock(board_info, prediction["fmax_mhz"])
    if clock is None:
        return f"the predicted fmax {prediction['fmax_mhz']:g} MHz has no clock the PLL makes"
    seconds, costs = profile.evaluate(config, clock)
    if seconds is None:
        layer, reason = costs
        return f"layer {layer.name!r} does not run: {reason}"
    return {**candidate, "config": config, "prediction": prediction, "clock_mhz": clock,
            "seconds": seconds, "images_per_s": 1.0 / seconds, "layers": costs}


def _no_fit_message(profile, board_info, fitting, blocked, resource_model):
    where = f"{board_info['board']} ({board_info['device']})"
    if not fitting:
        smallest = ConvEngineConfig(array=ArrayConfig(rows=1, cols=1),
                                    act_depth=min(ACT_DEPTHS), weight_depth=min(WEIGHT_DEPTHS))
        over = fits(resource_model.predict(smallest, board_info["family"],
                                           board_info["device"]), board_info)
        return (f"no configuration of the search space is predicted to fit {where}, not even "
                f"a 1x1 array with {min(ACT_DEPTHS)}-byte activation and "
                f"{min(WEIGHT_DEPTHS)}-word weight buffers: it needs {'; '.join(over)}")
    if not blocked:
        fastest = max(p["fmax_mhz"] for _, p in fitting)
        return (f"no configuration that fits {where} has a clock its PLL makes below the "
                f"predicted fmax ({fastest:g} MHz at best, less {CLOCK_MARGIN:.0%}) that also "
                f"divides {BAUD} baud")
    biggest_act = max(c.act_depth for c, _ in fitting)
    biggest_weight = max(c.weight_depth for c, _ in fitting)
    lines = [f"{profile.path}: no configuration that fits {where} runs every layer an "
             f"engine can run (the largest buffers that fit: act_depth {biggest_act}, "
             f"weight_depth {biggest_weight}):"]
    for layer, reason, config in blocked.values():
        lines.append(f"  layer {layer.name!r} ({layer.op}) needs more than the "
                     f"{config.rows}x{config.cols} engine with act_depth {config.act_depth}, "
                     f"weight_depth {config.weight_depth}: {reason}")
    return "\n".join(lines)


def plan_document(plan):
    """The JSON-able form of a :func:`search` plan (what ``report.json`` starts from)."""
    from contract.config_file import config_to_dict
    from hw.bitstream import peak_throughput

    config = dataclasses.replace(plan["config"], clock_mhz=plan["clock_mhz"])
    return {
        "model": plan["model"], "board": plan["board"],
        "device": plan["board_info"]["device"], "family": plan["board_info"]["family"],
        "config": config_to_dict(config),
        "clock_mhz": plan["clock_mhz"],
        "predicted": {**plan["prediction"],
                      "available": plan["board_info"]["limits"],
                      # Fields the model's runs never had: LUT, FF and fmax are those of
                      # the runs' value (docs/build.md).
                      "unmeasured": plan.get("unmeasured", []),
                      "images_per_s": round(plan["images_per_s"], 2),
                      # The clock the design is built for, as if it meets it.
                      "peak_gops": peak_throughput(
                          config, plan["clock_mhz"] * config.array.pump, True)["peak_gops"]},
        "layers": [dataclasses.asdict(c) for c in plan["layers"]],
        "fallbacks": [{"layer": f.name, "op": f.op, "reason": f.reason,
                       "cpu_seconds": f.seconds} for f in plan["fallbacks"]],
        "search": {"fitting_candidates": plan["candidates"], "runnable": plan["runnable"],
                   "runners_up": [{"array": f"{c['config'].rows}x{c['config'].cols}",
                                   "act_depth": c["config"].act_depth,
                                   "weight_depth": c["config"].weight_depth,
                                   "clock_mhz": c["clock_mhz"],
                                   "images_per_s": round(c["images_per_s"], 2)}
                                  for c in plan["runners_up"]]},
    }


def achieved(document, report):
    """Add the board build's achieved figures to ``document`` (predicted vs achieved)."""
    names = REPORT_NAMES[document["family"]]
    document["achieved"] = {
        "fmax_mhz": report.get("fmax_mhz"), "timing_met": report.get("timing_met"),
        **{key: report.get(f"{name}_used") for key, name in names.items()},
    }
    document["bitstream"] = report.get("bitstream")
    document["block_ram"] = report.get("block_ram")
    document["build_logs"] = report.get("logs")
    if "timing_failure" in report:
        document["timing_failure"] = report["timing_failure"]
    return document


def write_outputs(document, out):
    """Write ``report.json`` and ``run-config.json`` into ``out``; return their paths."""
    from contract.config_file import parse_config, write_config

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.json"
    report.write_text(json.dumps(document, indent=2) + "\n")
    run_config = write_config(parse_config(document["config"], str(report)),
                              out / "run-config.json")
    return report, run_config


def build(model_path, board, out=None, *, dry_run=False, console=None, resource_model=None):
    """Search, then (unless ``dry_run``) build; write the outputs; return the document."""
    from rich.console import Console

    console = Console(highlight=False) if console is None else console
    out = Path(out) if out is not None else \
        Path("build") / f"{board}-{Path(model_path).stem.removesuffix('_qdq')}"
    plan = search(model_path, board, resource_model=resource_model, say=console.print)
    document = plan_document(plan)
    document["dry_run"] = dry_run
    boot = _built_in_model(plan, document, console)
    if not dry_run:
        from hw.bitstream import BitstreamError, board_top, build_bitstream
        from tessera.board_report import console_say

        config = dataclasses.replace(plan["config"], clock_mhz=None)
        out.mkdir(parents=True, exist_ok=True)
        _write_verilog(board_top(board, config, clock_mhz=plan["clock_mhz"], image=boot),
                       out / "top.v")
        document["verilog"] = str(out / "top.v")
        try:
            report = build_bitstream(board, config, build_root=out / "pnr",
                                     clock_mhz=plan["clock_mhz"], say=console_say(console),
                                     image=boot)
        except BitstreamError as error:
            document["error"] = str(error)
            write_outputs(document, out)
            raise
        achieved(document, report)
    paths = write_outputs(document, out)
    print_summary(document, paths, console)
    return document


def _built_in_model(plan, document, console):
    """The :class:`~contract.resident.BootImage` the plan's build holds (or None, with
    ``document["image_refused"]`` saying why on a resident board); fills
    ``document["image"]``."""
    if not resident_board(plan["board"]):
        return None
    image = plan["image"]
    if image is None:
        document["image"] = None
        document["image_refused"] = plan["image_refused"]
        console.print(f"the model is not built in: {plan['image_refused']}", markup=False)
        return None
    boot = image.boot_image()
    assert boot.checksum == image.checksum  # the checksum a session's runner compares
    document["image"] = figures = image_document(image, boot)
    config = plan["config"]
    console.print(f"model built in: image {boot.key}, {len(boot.program):,} program and "
                  f"{len(boot.data):,} constant words in memories of "
                  f"{config.program_words:,} + {config.resident_words:,} words, checksum "
                  f"{figures['checksum'][0]}/{figures['checksum'][1]}", markup=False)
    return boot


def _write_verilog(top, path):
    from amaranth.back import verilog

    path.write_text(verilog.convert(top, name="top", emit_src=False))


def print_summary(document, paths, console):
    """The one-screen summary: chosen configuration, predicted vs achieved, fallbacks."""
    from rich.table import Table

    config = document["config"]
    array = config["array"]
    predicted, got = document["predicted"], document.get("achieved", {})
    console.print(f"[bold]{Path(document['model']).name}[/] on [bold]{document['board']}[/]"
                  f" ({document['device']}): {array['rows']}x{array['cols']} array, act "
                  f"{config['act_depth']} B/row, weights {config['weight_depth']} words, "
                  f"clock {document['clock_mhz']:g} MHz")
    table = Table(title_justify="left")
    for column in ("", "predicted", "achieved", "available"):
        table.add_column(column, justify="left" if not column else "right")
    names = REPORT_NAMES[document["family"]]
    table.add_row("fmax MHz", f"{predicted['fmax_mhz']:g}", _shown(got.get("fmax_mhz")), "")
    for key, name in names.items():
        table.add_row(name, f"{predicted.get(key, 0):,}", _shown(got.get(key)),
                      f"{predicted['available'].get(key, 0):,}")
    console.print(table)
    console.print(f"predicted {predicted['images_per_s']:,.1f} images/s at batch 1 "
                  f"(device compute at {document['clock_mhz']:g} MHz plus CPU fallbacks; "
                  f"host link not counted); peak {predicted['peak_gops']:g} GOP/s")
    if document["fallbacks"]:
        console.print("on the CPU:")
        for entry in document["fallbacks"]:
            console.print(f"  {entry['layer']} ({entry['op']}): {entry['reason']}",
                          markup=False)
    if "timing_failure" in document:
        console.print(f"[red]timing missed[/]: {document['timing_failure']}")
    if document.get("dry_run"):
        console.print("dry run: nothing built (no Verilog, no bitstream); wrote only the plan:")
        figures = "the prediction"
    else:
        console.print("wrote:")
        figures = "predicted against achieved figures"
    # soft_wrap: a long path stays whole on its line, for copying.
    console.print(f"  {paths[0]}  {figures}, per-layer costs, CPU fallbacks", markup=False,
                  soft_wrap=True)
    console.print(f"  {paths[1]}  the chosen configuration (--config FILE)", markup=False,
                  soft_wrap=True)


def _shown(value):
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


# ------------------------------------------------------------------ command line

def add_commands(sub):
    """``tessera build`` and ``tessera sweep`` (added to the CLI's subparsers)."""
    from tessera.explore.sweep import add_arguments

    p = sub.add_parser("build", help="design-space search for a model on a board, then "
                                      "its bitstream (docs/build.md)")
    p.add_argument("model", help="quantized (QDQ) ONNX model")
    p.add_argument("--board", required=True, help="ulx3s-85f, ulx3s-45f, ulx3s-25f or "
                                                  "icebreaker")
    p.add_argument("--out", default=None, help="output folder (default build/<board>-<model>)")
    p.add_argument("--dry-run", action="store_true",
                   help="search and predict only (seconds); build nothing")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("sweep", help="array sizes x boards, built in parallel and cached: "
                                      "bench/results/sweep.json and a plot (docs/build.md)")
    add_arguments(p)
    p.set_defaults(func=cmd_sweep)


def cmd_build(args):
    """``tessera build``: exit 0 when built (or searched), 1 when timing was missed, 2 on
    bad input (unknown board, a model that fits nothing, a missing model file)."""
    from hw.bitstream import BitstreamError

    model = Path(args.model)
    if not model.is_file():
        raise ValueError(f"{model}: no such model file (a quantized ONNX model; "
                         f"`tessera zoo` writes the zoo's)")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file; --out names the folder that gets "
                         f"report.json and run-config.json")
    try:
        document = build(model, args.board, args.out, dry_run=args.dry_run)
    except BitstreamError as error:
        raise ValueError(f"the build failed: {error}") from None
    return 1 if document.get("achieved", {}).get("timing_met") is False else 0


def cmd_sweep(args):
    from tessera.explore.sweep import run_from_args
    from tessera.ray_cluster import RayClusterError  # imports no Ray

    try:
        run_from_args(args)
    except RayClusterError as error:  # Ray missing or the cluster unreachable: one line
        raise ValueError(str(error)) from None
    return 0
