"""The driver runs without the hardware generator: in a Python where ``import amaranth`` and
``import hw`` fail, ``sw_driver`` imports, discovers an accelerator from its registers and
runs a model on the cpu provider, bit-identical to a normal process."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import qdq_models

from contract.regmap import MAP_VERSION, pack_config
from sw_driver import InferenceSession

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import importlib.abc
    import sys

    BLOCKED = ("amaranth", "hw")


    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the driver must not need it")
            return None


    sys.meta_path.insert(0, Blocker())
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"the blocker let {name} through")

    import numpy as np

    import sw_driver.accelerator
    import sw_driver.planner
    import sw_driver.providers.costs
    import sw_driver.providers
    import sw_driver.transport.sim
    from sw_driver import InferenceSession
    from sw_driver.regs import Reg

    model, x_path, y_path, config_word, version = sys.argv[1:]
    session = InferenceSession(model, providers=["cpu"])
    (y,) = session.run(None, {"x": np.load(x_path)})
    np.save(y_path, y)


    class Registers:
        # Only what discovery reads: the ID and configuration registers.
        values = {Reg.ID: 0x54455353, Reg.VERSION: int(version), Reg.CONFIG: int(config_word),
                  Reg.ACT_DEPTH: 4096, Reg.WEIGHT_DEPTH: 1024, Reg.PARAM_DEPTH: 16,
                  Reg.POOL_MAX_WIDTH: 128, Reg.RES_DATA_WORDS: 0, Reg.RES_PROGRAM_WORDS: 0}

        def csr_read(self, offset):
            return self.values[offset]

        def csr_write(self, offset, value):
            pass


    device = sw_driver.accelerator.Accelerator(Registers())
    print("config", device.config.rows, device.config.cols, device.config.act_depth,
          device.pool_max_width)
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
    print("loaded", loaded)
""")


def test_driver_imports_and_runs_without_amaranth_or_hw(tmp_path):
    _, model, shape = qdq_models.build("lenet", 5, tmp_path)
    x = np.random.default_rng(6).standard_normal((4, *shape)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (expected,) = InferenceSession(model, providers=["cpu"]).run(None, {"x": x})

    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), str(tmp_path / "x.npy"),
         str(tmp_path / "y.npy"), str(pack_config(rows=4, cols=16, acc_width=32)),
         str(MAP_VERSION)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.splitlines() == ["config 4 16 4096 128", "loaded []"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)
