"""``tessera serve``: KServe v2 inference over HTTP, for several tenants.

Layers: :mod:`.config` (the TOML file, checked), :mod:`.protocol` (v2 JSON and binary
tensors), :mod:`.limits` (token buckets), :mod:`.admission` (latency prediction and SLO
admission), :mod:`.app` (the FastAPI endpoints) and :mod:`.server` (uvicorn). Only the last
two import the web stack (``pip install .[serve]``); importing this package does not.
"""

from .config import ServeConfig, ServeConfigError, load_config

__all__ = ["ServeConfig", "ServeConfigError", "load_config"]
