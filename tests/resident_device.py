"""The software resident device, for the tests: it lives in the product
(``tessera/soak/resident_device.py``) because the soak's resident cases run on it."""

from tessera.soak.resident_device import BAD_RECORD, ResidentDevice

__all__ = ["BAD_RECORD", "ResidentDevice"]
