"""Compatibility name of :mod:`contract.descriptor`, where the residual-add unit's
parameters live."""

from contract.descriptor import ADD_PARAM_FIELDS

__all__ = ["ADD_PARAM_FIELDS"]
