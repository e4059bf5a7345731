"""Compatibility name of :mod:`contract.config`, where the build parameters live."""

from contract.config import MULTIPLIER_LATENCY, ArrayConfig, check_positive_int

__all__ = ["MULTIPLIER_LATENCY", "ArrayConfig", "check_positive_int"]
