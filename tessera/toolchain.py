"""Compatibility name of :mod:`hw.toolchain`: the tool lookup lives below the hardware
generators, which need it, so that nothing under ``tessera/`` is imported from below."""

from hw.toolchain import (
    VERILATOR_WARNING_FLAGS,
    YOWASP_TOOLS,
    ToolchainError,
    apply_tool_env,
    require,
    tool_env,
)

__all__ = ["VERILATOR_WARNING_FLAGS", "YOWASP_TOOLS", "ToolchainError", "apply_tool_env",
           "require", "tool_env"]
