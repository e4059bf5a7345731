"""Global average pooling on the engine (Dense passes over channel groups) against the
golden ``models.pool.global_avg_pool``, bit for bit: on the golden device, through the
device provider's refusals, and resident."""

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from models.pool import global_avg_pool
from sw_driver import graph as g
from sw_driver.accelerator import Accelerator
from sw_driver.gap_lowering import gap_group, gap_refusal
from tests.golden_device import GoldenDevice

CONFIGS = {
    "8x8": ConvEngineConfig(),
    "4x4-small": ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=512,
                                  weight_depth=256, max_col_tiles=8),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_gap_matches_golden(name, rng, seed):
    config = CONFIGS[name]
    acc = Accelerator(GoldenDevice(config))
    for trial in range(12):
        n = int(rng.integers(1, 4))
        c = int(rng.integers(1, 21))
        h, w = (int(v) for v in rng.integers(1, 9, size=2))
        x = rng.integers(-128, 128, size=(n, c, h, w)).astype(np.int8)
        # Equal scales make ties (a mean ending in .5) common; others exercise rounding.
        x_scale = float(rng.choice([0.05, 0.1, 0.0371]))
        y_scale = x_scale if trial % 2 else float(rng.choice([0.02, 0.07, 0.25]))
        zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
        lo, hi = (-128, 127) if trial % 3 else (zy, 127)
        want = global_avg_pool(x, x_scale, zx, y_scale, zy, lo, hi)
        got = acc.global_average_pool(x, x_scale=x_scale, x_zero_point=zx, y_scale=y_scale,
                                      y_zero_point=zy, lo=lo, hi=hi)
        assert np.array_equal(got, want), (f"seed {seed}, trial {trial}: shape "
                                           f"{(n, c, h, w)}, scales {x_scale}/{y_scale}")


def test_gap_groups_whole_words():
    config = CONFIGS["8x8"]
    assert gap_group(64, 64, config) == 8          # ResNet-8's last map: a column tile
    assert gap_group(64, 200, config) == 4         # 1024 // 200 = 5 -> a multiple of 4
    assert gap_group(3, 4, config) == 3
    assert gap_group(8, 2000, config) == 0          # does not fit: refused


def test_gap_refusal_names_the_limit():
    layer = g.GlobalAveragePool(name="gap", inputs=("x",), output="y", x_scale=0.1,
                                y_scale=0.1)
    assert gap_refusal(layer, CONFIGS["8x8"], (1, 8, 4, 4)) is None
    why = gap_refusal(layer, CONFIGS["4x4-small"], (1, 8, 32, 32))
    assert "1024 pixels per channel" in why and "weight buffer (256 words)" in why
