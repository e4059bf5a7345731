"""Training run for the profile-guided twin (``twin.dma.build_twin(..., train=...)``).

``python -m bench.twin_train LIBRARY CONFIG_JSON`` loads the instrumented twin library
(built for the configuration that ``ConvEngineConfig.as_dict()`` wrote as JSON), runs a few
seeded layers of the kinds the twin spends its time on through the driver (a 3x3
convolution, a 1x1 stride-2 one, a fused conv + max-pool) and exits non-zero if any result
differs from the golden model, so a build that mis-simulates is never the one kept. The
layers differ from the benchmark's reference layer (other sizes and seeds): the profile
describes the kind of work, not one measured input.
"""

import json
import sys

import numpy as np

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.pool import max_pool2d
from models.requant import requantize
from sw_driver.accelerator import Accelerator
from sw_driver.transport.sim import SimTransport
from twin.dma import Twin

#: (kernel, stride, c_in, c_out, size, pool, seed); sizes fit the smallest configuration
#: the tests build (2x2 array, 1024-word buffers).
LAYERS = ((3, 1, 8, 12, 10, False, 11), (1, 2, 12, 8, 12, False, 12),
          (3, 1, 4, 8, 8, True, 13))


def layer(kernel, stride, c_in, c_out, size, pool, seed):
    rng = np.random.default_rng(seed)
    k = c_in * kernel * kernel
    return {"x": rng.integers(-128, 128, (1, c_in, size, size), dtype=np.int8),
            "w": rng.integers(-128, 128, (c_out, c_in, kernel, kernel), dtype=np.int8),
            "bias": rng.integers(-2**16, 2**16, c_out).astype(np.int32),
            "multiplier": rng.integers(2**30, 2**31, c_out),
            # About log2(K * 2^14) bits above the int8 range, so outputs spread over it.
            "shift": np.full(c_out, int(np.log2(k * 2**14)) + 24),
            "zx": int(rng.integers(-10, 10)), "zy": int(rng.integers(-10, 10)),
            "stride": stride, "padding": (kernel // 2,) * 4, "pool": pool}


def run(accelerator, spec):
    p = layer(*spec)
    got = accelerator.conv2d(p["x"], p["w"], p["bias"], p["multiplier"], p["shift"],
                             x_zero_point=p["zx"], y_zero_point=p["zy"], lo=-128, hi=127,
                             stride=p["stride"], padding=p["padding"], pool=p["pool"])
    acc = conv2d(p["x"], p["w"], p["bias"], x_zero_point=p["zx"], stride=p["stride"],
                 padding=p["padding"])
    want = requantize(acc, p["multiplier"], p["shift"], p["zy"], -128, 127)
    if p["pool"]:
        want = max_pool2d(want, 2, 2)
    if not np.array_equal(got, want):
        raise SystemExit(f"twin_train: layer {spec} differs from the golden model")


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python -m bench.twin_train LIBRARY CONFIG_JSON")
    fields = json.loads(argv[1])
    config = ConvEngineConfig(array=ArrayConfig(**fields.pop("array")), **fields)
    transport = SimTransport(Twin(config, library=argv[0], log=lambda message: None))
    accelerator = Accelerator(transport)
    for spec in LAYERS:
        run(accelerator, spec)
    transport.close()


if __name__ == "__main__":
    main(sys.argv[1:])
