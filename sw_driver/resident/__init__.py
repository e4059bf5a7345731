"""Resident execution's driver side: the compiler that turns device layers into an image
(program words, constants, an arena laid out by tensor liveness), the software player
that runs an image over a layer-at-a-time device, and the host protocol of a device with
the resident player (``docs/resident.md``; the format is ``contract/resident.py``)."""

from .compiler import compile_layers, compile_model, device_segments
from .image import DeviceImage, PassInfo, Port
from .player import PlayStats, play, play_memory
from .runner import ResidentRunner

__all__ = ["DeviceImage", "PassInfo", "PlayStats", "Port", "ResidentRunner", "compile_layers",
           "compile_model", "device_segments", "play", "play_memory"]
