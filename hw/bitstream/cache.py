"""What a build depends on and where it goes: the inputs key (configuration, options and the
``hw/`` sources), the build folder, the last report, and the git state of the sources."""

import hashlib
import json
import subprocess
from pathlib import Path

from contract.config import ArrayConfig

REPORT_NAME = "report.json"
ARRAY_SUFFIX = "-array"  # build folder suffix of the bare-array top
# The hw/ package root: every file under it goes into the inputs key.
HW_ROOT = Path(__file__).resolve().parent.parent


def _board_sources(root):
    """The files under ``hw/`` (at ``root``) that a board build reads: all of them, since
    the whole accelerator is in the bitstream."""
    return sorted(root.rglob("*.py"))


def inputs_key(board, config, **options):
    """Hash of everything a bitstream depends on: the board, the configuration, the build
    options (keyword arguments, e.g. ``clock_mhz``, ``seed``) and the source files under
    ``hw/`` (not the tools; their versions are in the report)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({
        "board": board, "kind": type(config).__name__, "config": config.as_dict(),
        **options,
    }, sort_keys=True, default=str).encode())
    for path in _board_sources(HW_ROOT):
        digest.update(str(path.relative_to(HW_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_dir_for(board, config, build_root="build", *, image=None):
    """Where a build of ``config`` for ``board`` goes: ``<root>/<board>`` for the
    accelerator (``<root>/<board>-<image key>`` with a model built in), ``<root>/<board>-array``
    for the bare array."""
    suffix = ARRAY_SUFFIX if isinstance(config, ArrayConfig) else ""
    if image is not None:
        suffix += f"-{image.key}"
    return Path(build_root) / f"{board}{suffix}"

def source_state(root=None):
    """The git commit the build's sources came from and whether ``hw/`` or ``contract/`` had
    uncommitted changes (a figure from a dirty tree is not that commit's)."""
    root = HW_ROOT.parent if root is None else Path(root)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hw", "contract"],
                               cwd=root, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty.strip())}

def load_report(board, build_root="build", *, array=False):
    """The last ``report.json`` written for ``board`` (the accelerator's, or the bare
    array's with ``array=True``), or ``None``."""
    suffix = ARRAY_SUFFIX if array else ""
    path = Path(build_root) / f"{board}{suffix}" / REPORT_NAME
    return json.loads(path.read_text()) if path.exists() else None
