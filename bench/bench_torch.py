"""The "torch" provider on PyTorch's CPU against the "cpu" provider
(``bench/results/torch.json``).

ResNet-8-like zoo model (``models.zoo.random_models``), seeded inputs, batch 1 and 64,
images/s (median of interleaved repeats), after checking that both give identical outputs.
PyTorch gets the thread count ``OPENBLAS_NUM_THREADS`` gives the cpu provider's BLAS
(``make bench`` sets 1), so that both run on the same cores.
The GPU figures come from ``make gpu-check`` on a machine with CUDA (docs/performance.md).
"""

import os
import tempfile
from pathlib import Path

import numpy as np

from bench.common import images_per_second, metric, write_results
from models.zoo import random_models
from sw_driver import InferenceSession

SEED = 33
BATCHES = (1, 64)
REPEATS = 5
MIN_SECONDS = 0.3


def main():
    import torch  # a clear ImportError when the [gpu] extra is missing

    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    metrics = []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(random_models.build("resnet8", Path(tmp))[1])
        cpu = InferenceSession(path, providers=["cpu"])
        # Alone: with the CPU provider appended, the planner would give it the heavy layers.
        on_torch = InferenceSession(path, providers=[("torch", {"device": "cpu"})],
                                    cpu_fallback=False)
        rng = np.random.default_rng(SEED)
        for batch in BATCHES:
            x = random_models.random_inputs(rng, batch)
            (want,) = cpu.run(None, {"input": x})
            (got,) = on_torch.run(None, {"input": x})
            if not np.array_equal(got, want):
                raise AssertionError(f"torch and cpu differ at batch {batch}, seed {SEED}")
            rates = images_per_second(
                {"cpu": lambda x=x: cpu.run(None, {"input": x}),
                 "torch": lambda x=x: on_torch.run(None, {"input": x})},
                batch, repeats=REPEATS, min_seconds=MIN_SECONDS)
            metrics.append(metric(f"torch_cpu_images_per_s_b{batch}", rates["torch"],
                                  "images/s", peer="cpu provider", peer_value=rates["cpu"]))
    write_results("torch", metrics, model="resnet8 (zoo)", device="PyTorch CPU, float32",
                  seed=SEED, torch_threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
