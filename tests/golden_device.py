"""The golden layer-at-a-time device, for the tests: it lives in the product
(``tessera/soak/golden_device.py``) because the soak's resident cases run on it."""

from tessera.soak.golden_device import GoldenDevice

__all__ = ["GoldenDevice"]
