"""The depthwise mode on the twin of the ``default`` preset (which has it): the zoo's
depthwise-separable model through the "sim" provider, layer at a time and resident,
bit-exact with the cpu provider, its depthwise layers run as depthwise passes."""

import numpy as np
import pytest

from contract.config_file import PRESETS
from models.zoo import random_models
from sw_driver import InferenceSession
from sw_driver import accelerator as accelerator_module
from sw_driver.providers.sim import SimProvider

pytestmark = pytest.mark.slow

CONFIG = PRESETS["default"]


@pytest.mark.parametrize("resident", [False, True], ids=["layer-at-a-time", "resident"])
def test_dwsep_runs_bit_exact_in_the_depthwise_mode(zoo, resident, rng, seed, monkeypatch):
    assert CONFIG.depthwise
    modes = []
    program = accelerator_module.pass_program

    def recording(engine_pass, config, **options):
        modes.append(engine_pass.descriptor["depthwise"])
        return program(engine_pass, config, **options)
    monkeypatch.setattr(accelerator_module, "pass_program", recording)
    model = str(zoo["dwsep"])
    x = random_models.random_inputs(rng, 2)
    (want,) = InferenceSession(model, providers=["cpu"]).run(None, {"input": x})
    provider = SimProvider(CONFIG, log=lambda message: None, resident=resident)
    try:
        session = InferenceSession(model, providers=[provider, "cpu"])
        (got,) = session.run(None, {"input": x})
        profile = session.profile()
    finally:
        provider.close()
    mismatch = np.argwhere(got != want)
    assert not len(mismatch), (f"seed={seed} resident={resident}: first difference at "
                               f"{mismatch[0].tolist()}: twin {got[tuple(mismatch[0])]} != "
                               f"cpu {want[tuple(mismatch[0])]}")
    assert any(row["provider"] == provider.name for row in profile), profile
    if resident:
        # The compiler traced the driver's lowering (several probe runs a layer): its
        # depthwise passes are depthwise passes.
        assert 1 in modes and 0 in modes, modes
    else:
        # Two depthwise layers (16 and 32 channels), one pass each per image.
        assert modes.count(1) == 2 * 2, modes
