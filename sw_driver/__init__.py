"""Tessera host runtime: import QDQ ONNX models and run them on Tessera's providers."""

from .run_options import RunOptions
from .session import InferenceSession

__all__ = ["InferenceSession", "RunOptions"]
