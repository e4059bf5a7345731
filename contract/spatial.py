"""Spatial sharing: several accelerator instances on one FPGA.

The facts the hardware (``hw/multi_top.py``), the serving configuration
(``tessera/serve/config.py``) and the docs share: how many instances one device may hold
and where each instance's registers sit.
"""

__all__ = ["INSTANCE_WINDOW", "MAX_INSTANCES", "instance_base"]

#: Bytes of CSR address space per instance: one accelerator's whole register map
#: (``hw/csr.py``'s 10-bit byte address), so each window is that map unchanged.
INSTANCE_WINDOW = 0x400
#: Most instances on one device (the CSR select field stays 4 bits).
MAX_INSTANCES = 16


def instance_base(index):
    """Byte address of instance ``index``'s CSR window."""
    return index * INSTANCE_WINDOW
