"""The 85F's two presets on ResNet-8-like: images/s of compute from their twins' cycles.

``ulx3s-85f`` is the board's default (an 8x8 array at 62.5 MHz); ``ulx3s-85f-pumped`` is a
16x8 array on the same 64 multipliers in its own clock domain at 89.29 MHz beside the
engine's 62.5 (docs/boards.md, Known limits). Both builds met their clocks, so each runs at
its preset's design clock; the twin steps the pumped array's clock at its ratio.

- ``resnet8_images_per_second_<preset>``: the zoo's ResNet-8-like layer at a time on the
  preset's twin (neither preset has the resident block), batch 2, the second run; the
  device layers' cycles per image at the preset's clock, checked exact against the CPU
  provider. The peer is the other preset's figure from the same run; the target is the
  throughput issue's 800 images/s.
"""

import tempfile
from pathlib import Path

import numpy as np

from bench.common import metric, random_feeds, write_results
from contract.config_file import PRESETS
from hw.bitstream import design_clock_mhz
from models.zoo import random_models
from sw_driver import InferenceSession
from sw_driver.providers.sim import SimProvider

BOARD = "ulx3s-85f"
PRESET_NAMES = (BOARD, f"{BOARD}-pumped")
BATCH = 2
TARGET_IMAGES_PER_SECOND = 800
SEED = 5


def device_cycles_per_image(path, config, batch=BATCH, seed=SEED):
    """Cycles per image of the device's layers in a second run of ``batch`` images, after
    checking its outputs equal the CPU provider's."""
    session = InferenceSession(path, providers=[SimProvider(config), "cpu"])
    cpu = InferenceSession(path, providers=["cpu"])
    session.run(None, random_feeds(session, batch, seed))  # builds and warms the twin
    feed = random_feeds(session, batch, seed + 1)
    outputs = session.run(None, feed)
    expected = cpu.run(None, feed)
    if not all(np.array_equal(a, b) for a, b in zip(outputs, expected, strict=True)):
        raise AssertionError(f"{config.name}: the twin's ResNet-8 outputs differ from the "
                             f"CPU provider's")
    cycles = sum(row.get("cycles", 0) for row in session.profile() if row["provider"] != "cpu")
    return cycles / batch


def main():
    path = str(random_models.built("resnet8", Path(tempfile.mkdtemp(prefix="bench-presets-"))))
    figures = {}
    for name in PRESET_NAMES:
        config = PRESETS[name]
        cycles = device_cycles_per_image(path, config)
        figures[name] = (cycles, design_clock_mhz(BOARD, config), config)
    metrics = []
    for name, other in (PRESET_NAMES, PRESET_NAMES[::-1]):
        cycles, clock, config = figures[name]
        peer_cycles, peer_clock, _ = figures[other]
        array = f"{config.rows}x{config.cols}" + (
            f" pumped, array at {config.array_clock_mhz:g} MHz" if config.array.pump != 1
            else "")
        metrics.append(metric(
            f"resnet8_images_per_second_{name.replace('-', '_')}",
            round(clock * 1e6 / cycles), "images/s (device time)",
            peer=other, peer_value=round(peer_clock * 1e6 / peer_cycles),
            target=f">= {TARGET_IMAGES_PER_SECOND}",
            note=f"{array}: {cycles:,.0f} twin cycles an image at {clock:g} MHz, layer at a "
                 f"time, batch {BATCH}, exact against the CPU provider"))
    return write_results("board_presets", metrics, batch=BATCH, seed=SEED)
