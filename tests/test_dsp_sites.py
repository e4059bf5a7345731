"""The pumped array's multipliers on fixed DSP sites of an ECP5 die (hw.dsp_sites)."""

import re

import pytest
from amaranth.back import rtlil

from contract.config import ArrayConfig
from hw.double_pumped import PumpedCore
from hw.dsp_sites import ECP5_DSP_SLICES, SLICE_SITES, array_dsp_sites


class _Ecp5:
    family = "ecp5"

    def __init__(self, device):
        self.device = device


def _device_sites(device):
    ys, firsts = ECP5_DSP_SLICES[device]
    return {f"X{x + dx}/Y{y}/{name}": (x, y) for y in ys for x in firsts
            for dx, name in SLICE_SITES}


@pytest.mark.parametrize("device, rows, cols", [
    ("LFE5U-85F", 8, 8), ("LFE5U-85F", 4, 8), ("LFE5U-85F", 12, 8), ("LFE5U-85F", 6, 6),
    ("LFE5U-45F", 4, 8), ("LFE5U-45F", 6, 8), ("LFE5U-25F", 3, 8), ("LFE5U-25F", 2, 4),
])
def test_each_row_takes_whole_slices_of_real_sites(device, rows, cols):
    sites = array_dsp_sites(_Ecp5(device), rows, cols)
    on_die = _device_sites(device)
    assert set(sites) == {(r, c) for r in range(rows) for c in range(cols)}
    assert len(set(sites.values())) == rows * cols, "a site given twice"
    assert set(sites.values()) <= set(on_die), "a site the device does not have"
    # A slice holds one row's multipliers only (their clock enable is that row's copy),
    # and a row's columns run left to right in one DSP row.
    owner = {}
    for (row, _col), site in sites.items():
        assert owner.setdefault(on_die[site], row) == row, f"slice {on_die[site]} shared"
    for row in range(rows):
        xs = [int(re.match(r"X(\d+)/Y(\d+)", sites[row, c]).group(1)) for c in range(cols)]
        ys = {re.match(r"X(\d+)/Y(\d+)", sites[row, c]).group(2) for c in range(cols)}
        assert xs == sorted(xs) and len(ys) == 1


@pytest.mark.parametrize("platform, rows, cols", [
    (None, 8, 8), (_Ecp5("LFE5U-12F"), 2, 4), (_Ecp5("LFE5U-25F"), 8, 8),
])
def test_no_sites_where_the_die_is_unknown_or_too_small(platform, rows, cols):
    assert array_dsp_sites(platform, rows, cols) is None


def test_pumped_core_pins_its_multipliers_on_an_ecp5():
    core = PumpedCore(ArrayConfig(rows=4, cols=8, pump=2))
    text = rtlil.convert(core, platform=_Ecp5("LFE5U-85F"))
    want = array_dsp_sites(_Ecp5("LFE5U-85F"), 2, 8)
    assert sorted(re.findall(r'attribute \\BEL "([^"]+)"', text)) == sorted(want.values())
