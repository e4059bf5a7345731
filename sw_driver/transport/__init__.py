"""How the host reaches an accelerator: one Transport interface, one implementation per
kind (the Verilator twin, Xilinx XDMA), so everything above it runs unchanged on both."""

from .base import Transport, TransportError, TransportTimeout
from .xdma import XdmaTransport

__all__ = ["Transport", "TransportError", "TransportTimeout", "XdmaTransport"]
