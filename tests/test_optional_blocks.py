"""The engine's optional blocks as configuration (``residual_add``, ``perf_counters``,
``csr_readback``; all false only in the ``icebreaker`` preset): each field is checked and
names the netlist, a configuration file spells it as a TOML boolean, and the CONFIG
register carries its absence in its own bit. What each block's absence does to the
hardware and the driver is tested beside it (test_feature_set.py, test_perf_optional.py,
test_csr_readback.py)."""

import itertools
import tomllib
from dataclasses import replace

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import PRESETS, ConfigFileError, dumps_toml, parse_config
from contract.regmap import implemented_registers, pack_config, unpack_config, unpack_features
from sw_driver import regs

SMALL = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=64, weight_depth=16,
                         max_col_tiles=2)
#: field -> (netlist name suffix without it, CONFIG bit that says it is absent)
BLOCKS = {"residual_add": ("-noadd", 24), "perf_counters": ("-noperf", 25),
          "csr_readback": ("-wo", 26), "pipelined": ("-lean", 27)}
#: Each block's bit constants as the driver's generated module spells them.
DRIVER_BITS = {"residual_add": "NO_ADD", "perf_counters": "NO_PERF",
               "csr_readback": "NO_READBACK", "pipelined": "NO_PIPELINE"}


@pytest.mark.parametrize("field", BLOCKS)
def test_the_field_is_checked_and_names_the_netlist(field):
    for wrong in ("no", 1, 0):
        with pytest.raises(ValueError,
                           match=rf"^{field} must be true or false \(.+\), not {wrong!r}$"):
            ConvEngineConfig(**{field: wrong})
    without = replace(SMALL, **{field: False})
    assert without.name == SMALL.name + BLOCKS[field][0]
    assert ConvEngineConfig.from_env({"TESSERA_ROWS": "2", "TESSERA_COLS": "2",
                                      **without.env()}) == without
    assert getattr(PRESETS["icebreaker"], field) is False
    assert all(getattr(config, field) for name, config in PRESETS.items()
               if name != "icebreaker")


def test_the_suffixes_combine_in_a_fixed_order():
    assert replace(SMALL, residual_add=False, perf_counters=False).name == \
        SMALL.name + "-noadd-noperf"


@pytest.mark.parametrize("field", BLOCKS)
def test_a_config_file_spells_it_as_a_toml_boolean(field):
    text = dumps_toml(PRESETS["icebreaker"])
    assert f"{field} = false" in text.splitlines()
    assert parse_config(tomllib.loads(text), "ice.toml") == PRESETS["icebreaker"]
    assert getattr(parse_config({"base": "icebreaker", field: True}), field) is True
    with pytest.raises(ConfigFileError, match=rf"^ice\.toml: {field} must be true or false, "
                                              rf"not 'no' \(a string\)$"):
        parse_config({field: "no"}, "ice.toml")
    with pytest.raises(ConfigFileError,
                       match=rf"^ice\.toml: {field} must be true or false, not 0$"):
        parse_config({field: 0}, "ice.toml")


@pytest.mark.parametrize("present", list(itertools.product([True, False], repeat=len(BLOCKS))))
def test_config_word_carries_each_absence_in_its_own_bit(present):
    flags = dict(zip(BLOCKS, present, strict=True))
    word = pack_config(rows=2, cols=3, acc_width=32, **flags)
    for field, (_, bit) in BLOCKS.items():
        assert word >> bit & 1 == (not flags[field]), (field, hex(word))
        name = DRIVER_BITS[field]
        assert getattr(regs, f"CONFIG_{name}_SHIFT") == bit
        assert getattr(regs, f"CONFIG_{name}_MASK") == 1 << bit
    assert unpack_features(word) == {**flags, "depthwise": False, "resident_add": False}
    assert unpack_config(word) == {"rows": 2, "cols": 3, "acc_width": 32}


def test_a_configuration_packs_and_unpacks_its_own_features():
    for name, config in PRESETS.items():
        word = pack_config(rows=config.rows, cols=config.cols, acc_width=config.acc_width,
                           **config.features())
        assert unpack_features(word) == config.features() == \
            {field: getattr(config, field)
             for field in [*BLOCKS, "depthwise", "resident_add"]}, name


@pytest.mark.parametrize("function", [
    lambda **flags: pack_config(rows=2, cols=2, acc_width=32, **flags),
    implemented_registers], ids=["pack_config", "implemented_registers"])
def test_a_name_that_is_no_optional_block_is_refused(function, request):
    caller = request.node.callspec.id
    with pytest.raises(TypeError, match=rf"^{caller}: 'residual_ad' is not an optional block; "
                                        rf"expected one of "
                                        rf"{', '.join([*BLOCKS, 'depthwise', 'resident_add'])}$"):
        function(residual_ad=False)


def test_the_resident_add_is_an_added_feature_with_its_own_presence_bit():
    # Off unless named (the boards' resident presets keep their multipliers); on, its
    # CONFIG bit (29) is set and the netlist's name says so; it adds no register.
    assert ConvEngineConfig().resident_add is False
    assert PRESETS["default"].resident_add is True
    assert not any(c.resident_add for n, c in PRESETS.items() if n != "default")
    with_add = replace(SMALL, resident_add=True)
    assert with_add.name == SMALL.name + "-ra"
    assert ConvEngineConfig.from_env({"TESSERA_ROWS": "2", "TESSERA_COLS": "2",
                                      **with_add.env()}) == with_add
    word = pack_config(rows=2, cols=2, acc_width=32, resident_add=True)
    assert word >> 29 & 1 == 1 == word >> regs.CONFIG_RESIDENT_ADD_SHIFT & 1
    assert unpack_features(word)["resident_add"] is True
    assert implemented_registers(resident_add=True) == implemented_registers()


def test_the_depthwise_mode_is_an_added_feature_with_its_own_presence_bit():
    # Off unless named, so a configuration from before it (the boards') names the netlist
    # it always did; on, its CONFIG bit is set (a build from before reads 0: without it).
    assert ConvEngineConfig().depthwise is False
    with_mode = replace(SMALL, depthwise=True)
    assert with_mode.name == SMALL.name + "-dw"
    assert ConvEngineConfig.from_env({"TESSERA_ROWS": "2", "TESSERA_COLS": "2",
                                      **with_mode.env()}) == with_mode
    assert "TESSERA_DEPTHWISE" not in SMALL.env()
    word = pack_config(rows=2, cols=2, acc_width=32, depthwise=True)
    assert word >> 28 & 1 == 1 == word >> regs.CONFIG_DEPTHWISE_SHIFT & 1
    assert unpack_features(word)["depthwise"] is True
    assert unpack_features(pack_config(rows=2, cols=2, acc_width=32))["depthwise"] is False
    names = {reg.name for reg in implemented_registers(depthwise=True)}
    assert names - {reg.name for reg in implemented_registers()} == {
        "CONV_DEPTHWISE", "CONV_DW_TILE_DADDR"}
    assert PRESETS["default"].depthwise is True
    assert not any(config.depthwise for name, config in PRESETS.items() if name != "default")
    with pytest.raises(ValueError, match=r"^depthwise must be true or false \(whether the "
                                         r"engine has the depthwise mode\), not 1$"):
        ConvEngineConfig(depthwise=1)
    assert parse_config({"depthwise": True}, "dw.toml").depthwise is True
