"""The one hardware configuration, read from a file (TOML or JSON) or a named preset.

Every command that builds or simulates hardware takes ``--config FILE|PRESET`` and turns it
into a :class:`~contract.config.ConvEngineConfig` here. Plain Python (``tomllib``, ``json``)
and no Amaranth, so the driver and the benchmarks read the same files as the generators.

A file holds the engine's fields at the top level and the array's in an ``[array]`` table
(``docs/config.md``); ``base = "PRESET"`` starts from a preset instead of ``default`` and
the file overrides what it names. Everything is checked when the file is read: an unknown
field, a wrong type or a value out of range is a :class:`ConfigFileError` naming the file,
the field and the allowed values.
"""

import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path

from .config import (
    ADD_LANES_CHOICES,
    MAX_ACT_DEPTH,
    MAX_ARRAY_SIDE,
    MAX_CLOCK_MHZ,
    MAX_COL_TILES,
    MAX_PROGRAM_WORDS,
    MAX_RESIDENT_WORDS,
    MAX_WEIGHT_DEPTH,
    MIN_CLOCK_MHZ,
    PUMP_CHOICES,
    STREAM_WIDTHS,
    ArrayConfig,
    ConvEngineConfig,
)
from .requant import ACC_WIDTH

__all__ = ["DEFAULT_PRESET", "PRESETS", "ConfigFileError", "config_to_dict", "dumps_json",
           "dumps_toml", "load_config", "parse_config", "write_config"]


class ConfigFileError(ValueError):
    """A configuration that cannot be built; the message names the file (or preset), the
    field and what it may be."""


#: Named configurations. ``default`` is what every command builds when given none: the
#: "sim" provider's 8x8 engine, whose buffers hold every layer of the zoo's models. The
#: board presets are what ``make bitstream BOARD=...`` builds by default (``hw/boards/``
#: reads them; ``docs/boards.md`` gives what each uses of its device).
PRESETS = {
    # With the resident block: a 160 KiB data memory (ResNet-8 resident needs 134 KiB: its
    # weights and parameters, 83 KiB, and three live 16 KiB activations of a residual
    # block) and a 16 KiB program memory.
    # With the depthwise mode (docs/conv-engine.md; the boards' presets leave it out until a
    # board build has measured it) and two residual-add datapaths (add_lanes 4): ADD passes
    # at the host stream's pace, a beat every 4 cycles instead of 8, for 8 more multipliers;
    # and the resident player's residual add (a residual block's Add in its second
    # convolution's pass, docs/resident.md).
    "default": ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=16384,
                                weight_depth=8192, max_col_tiles=16, resident_words=40960,
                                program_words=4096, depthwise=True, add_lanes=4,
                                resident_add=True),
    # The cheapest engine that still runs every kind of layer: quick twin and netlist builds
    # for tests and first experiments.
    "tiny": ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=2048,
                             weight_depth=1024, max_col_tiles=16),
    # The boards' default builds (recorded in tessera/explore/board_builds.json, timing met).
    "ulx3s-85f": ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=4096,
                                  weight_depth=1024, max_col_tiles=16),
    "ulx3s-45f": ConvEngineConfig(array=ArrayConfig(rows=6, cols=8), act_depth=4096,
                                  weight_depth=1024, max_col_tiles=16),
    "ulx3s-25f": ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=4096,
                                  weight_depth=1024, max_col_tiles=16),
    # The same engines with the resident block, sized with the compiler at each preset's
    # own buffers (docs/boards.md): the ResNet-8-like zoo model needs 34,326 data and 6,105
    # program words on the 85F's 8x8 and the 45F's 6x8 (their smaller buffers cut it into
    # 64 passes), the digits CNN 1,700 and 1,159 on the 25F's 4x4. Each memory takes
    # ceil(words / 512) DP16KD (hw.bitstream.block_rams_needed checks the device's count).
    # Not the boards' defaults: `make bitstream` keeps building the engine alone. The 85F's
    # runs at 54 MHz (the PLL makes 54.17; 3 Mbaud 0.3 % off): with the block it met that
    # (59.27 MHz) and missed the board's 62.5 (49.99 to 54.96 MHz; docs/boards.md).
    "ulx3s-85f-resident": ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=4096,
                                           weight_depth=1024, max_col_tiles=16,
                                           resident_words=36864, program_words=8192,
                                           clock_mhz=54),
    # The 85F's engine with a 16x8 array on 64 multipliers in its own clock domain
    # (array.pump 2, docs/architecture.md "The array's own clock") at 89.29 MHz beside the
    # engine's 62.5: the PLL's nearest setting below the 91.42 MHz its board build reached,
    # where it met both clocks (engine 64.02 MHz; docs/boards.md). Peak 11.43 GOP/s against
    # the 8x8's 8.0; not the board's default yet (docs/boards.md, Known limits).
    "ulx3s-85f-pumped": ConvEngineConfig(array=ArrayConfig(rows=16, cols=8, pump=2),
                                         act_depth=4096, weight_depth=1024, max_col_tiles=16,
                                         clock_mhz=62.5, array_clock_mhz=89.2857),
    "ulx3s-45f-resident": ConvEngineConfig(array=ArrayConfig(rows=6, cols=8), act_depth=4096,
                                           weight_depth=1024, max_col_tiles=16,
                                           resident_words=35840, program_words=6144),
    "ulx3s-25f-resident": ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=4096,
                                           weight_depth=1024, max_col_tiles=16,
                                           resident_words=4096, program_words=2048),
    # No residual add: its datapath's 8 SB_MAC16 are what the UP5K (8 in all) lacks
    # beside the array's 4 and the requantizer's 4; no performance counters and no
    # readback of the RW registers, no registers that only buy clock speed (it runs at
    # 24 MHz): logic cells are what the UP5K lacks (docs/boards.md).
    "icebreaker": ConvEngineConfig(array=ArrayConfig(rows=1, cols=1), act_depth=1024,
                                   weight_depth=1024, max_col_tiles=16, residual_add=False,
                                   perf_counters=False, csr_readback=False,
                                   pipelined=False),
}
DEFAULT_PRESET = "default"

#: Every field a file may hold: dotted name -> (kind, allowed). ``kind`` is "int" (allowed:
#: an inclusive range, or a tuple of the only values), "number" (an inclusive range) or
#: "bool" (true or false).
FIELDS = {
    "array.rows": ("int", range(1, MAX_ARRAY_SIDE + 1)),
    "array.cols": ("int", range(1, MAX_ARRAY_SIDE + 1)),
    # The engine's requantizer takes exactly this accumulator width (contract.requant).
    "array.acc_width": ("int", (ACC_WIDTH,)),
    # 2: the array's multipliers on their own clock at twice the engine's, two rows each
    # (hw/double_pumped.py; rows even, no depthwise mode, ECP5 boards).
    "array.pump": ("int", PUMP_CHOICES),
    "act_depth": ("int", range(1, MAX_ACT_DEPTH + 1)),
    "weight_depth": ("int", range(1, MAX_WEIGHT_DEPTH + 1)),
    "max_col_tiles": ("int", range(1, MAX_COL_TILES + 1)),
    "stream_width": ("int", STREAM_WIDTHS),
    "clock_mhz": ("number", (MIN_CLOCK_MHZ, MAX_CLOCK_MHZ)),
    # The array's own clock (array.pump 2); absent: pump times clock_mhz.
    "array_clock_mhz": ("number", (MIN_CLOCK_MHZ, MAX_CLOCK_MHZ)),
    "residual_add": ("bool", (True, False)),
    "perf_counters": ("bool", (True, False)),
    "csr_readback": ("bool", (True, False)),
    "pipelined": ("bool", (True, False)),
    "depthwise": ("bool", (True, False)),
    # The resident player's residual add (with the resident block: resident_words).
    "resident_add": ("bool", (True, False)),
    # 0 and 0: no resident block; both positive: its memories' depths in 32-bit words.
    "resident_words": ("int", range(0, MAX_RESIDENT_WORDS + 1)),
    "program_words": ("int", range(0, MAX_PROGRAM_WORDS + 1)),
    # Lanes a residual-add datapath serves: 4 gives an 8-lane bank two (ADD twice as fast).
    "add_lanes": ("int", ADD_LANES_CHOICES),
}
_TABLES = {"array"}


def _allowed(kind, allowed):
    if kind == "bool":
        return "true or false"
    if kind == "number":
        return f"a number from {allowed[0]:g} to {allowed[1]:g}"
    if isinstance(allowed, range):
        return f"an integer from {allowed.start} to {allowed.stop - 1}"
    if len(allowed) == 1:
        return f"{allowed[0]} (the only value the hardware is built for)"
    return "one of " + ", ".join(str(value) for value in allowed)


def _describe(value):
    """``value`` as the file wrote it, with its type when that is what is wrong."""
    kinds = {str: "a string", bool: "a boolean", float: "a number", list: "a list",
             dict: "a table"}
    kind = kinds.get(type(value))
    return f"{value!r} ({kind})" if kind else repr(value)


def _check_field(source, name, value):
    kind, allowed = FIELDS[name]
    if kind == "int":
        good = isinstance(value, int) and not isinstance(value, bool) and value in allowed
    elif kind == "bool":
        good = isinstance(value, bool)
    else:
        good = (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and allowed[0] <= value <= allowed[1])
    if not good:
        raise ConfigFileError(f"{source}: {name} must be {_allowed(kind, allowed)}, "
                              f"not {_describe(value)}")
    return float(value) if kind == "number" else value


def _preset(name, source):
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigFileError(f"{source}: base must be a preset name, one of "
                              f"{', '.join(PRESETS)}; not {_describe(name)}")
    return PRESETS[name]


def parse_config(mapping, source="<config>"):
    """The :class:`ConvEngineConfig` a file's contents describe.

    Parameters
    ----------
    mapping : dict
        Top-level fields, an optional ``array`` table and an optional ``base`` preset name.
    source : str
        Named in every error (the file's path).

    Raises
    ------
    ConfigFileError
        An unknown field, a wrong type, a value out of range or an impossible combination.
    """
    if not isinstance(mapping, dict):
        raise ConfigFileError(f"{source}: a configuration is a table of fields, not "
                              f"{_describe(mapping)}")
    config = _preset(mapping["base"], source) if "base" in mapping else PRESETS[DEFAULT_PRESET]
    engine, array = {}, {}
    for key, value in mapping.items():
        if key == "base":
            continue
        if key in _TABLES:
            if not isinstance(value, dict):
                raise ConfigFileError(f"{source}: {key} must be a table ([{key}]) of "
                                      f"{', '.join(n for n in FIELDS if n.startswith(key + '.'))}"
                                      f", not {_describe(value)}")
            for inner, item in value.items():
                name = f"{key}.{inner}"
                if name not in FIELDS:
                    raise _unknown(source, name)
                array[inner] = _check_field(source, name, item)
        elif key in FIELDS:
            engine[key] = _check_field(source, key, value)
        else:
            raise _unknown(source, key)
    try:
        return replace(config, array=replace(config.array, **array), **engine)
    except (ValueError, TypeError) as error:  # a combination the types refuse
        raise ConfigFileError(f"{source}: {error}") from None


def _unknown(source, name):
    known = ", ".join(["base", *FIELDS])
    return ConfigFileError(f"{source}: unknown field {name!r}; known fields: {known}")


def load_config(spec):
    """The configuration ``--config SPEC`` names: a preset name or a ``.toml``/``.json``
    file (a preset name has no suffix, so the two never clash).

    Raises
    ------
    ConfigFileError
        The file is missing, unreadable, not TOML/JSON, or describes an impossible
        configuration; the message names it.
    """
    spec = str(spec)
    path = Path(spec)
    if spec in PRESETS:
        return PRESETS[spec]
    if not path.is_file():
        raise ConfigFileError(f"{spec}: no such configuration file, and not a preset "
                              f"(presets: {', '.join(PRESETS)})")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigFileError(f"{spec}: a configuration file is .toml or .json, not "
                              f"{suffix or 'a file without a suffix'!r}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigFileError(f"{spec}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{spec}: not UTF-8 text") from None
    try:
        mapping = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        kind = "TOML" if suffix == ".toml" else "JSON"
        raise ConfigFileError(f"{spec}: not valid {kind} ({error})") from None
    return parse_config(mapping, spec)


def config_to_dict(config):
    """``config`` as a file holds it (every field written; the clocks only when set)."""
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    data = {name: getattr(config, name) for name in FIELDS if "." not in name}
    for name in ("clock_mhz", "array_clock_mhz"):
        if data[name] is None:
            del data[name]
    data["array"] = {name.split(".", 1)[1]: getattr(config.array, name.split(".", 1)[1])
                     for name in FIELDS if name.startswith("array.")}
    return data


def dumps_json(config):
    return json.dumps(config_to_dict(config), indent=2) + "\n"


def dumps_toml(config):
    """TOML text of ``config`` (``tomllib`` reads only; the format is flat enough to write
    by hand: numbers at the top level, then the ``[array]`` table)."""
    data = config_to_dict(config)
    lines = ["# Tessera hardware configuration (docs/config.md)"]
    lines += [f"{name} = {_toml_value(value)}" for name, value in data.items()
              if name not in _TABLES]
    for table in sorted(_TABLES):
        lines += ["", f"[{table}]", *(f"{name} = {value!r}"
                                      for name, value in data[table].items())]
    return "\n".join(lines) + "\n"


def _toml_value(value):
    """TOML's spelling of a number or a boolean (Python's ``True`` is not TOML)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def write_config(config, path):
    """Write ``config`` to ``path`` as TOML or JSON, by its suffix; returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigFileError(f"{path}: a configuration file is .toml or .json")
    path.write_text(dumps_toml(config) if suffix == ".toml" else dumps_json(config))
    return path
