"""Compatibility name of :mod:`contract.config` and :mod:`contract.descriptor`, where the
engine's build parameters and layer descriptor live."""

from contract.config import ConvEngineConfig
from contract.descriptor import DESCRIPTOR_FIELDS, KERNEL_MAX, PAD_MAX, STRIDES

__all__ = ["DESCRIPTOR_FIELDS", "KERNEL_MAX", "PAD_MAX", "STRIDES", "ConvEngineConfig"]
