"""Batch inference over a data set (``tessera run-dataset``; ``docs/ray.md``).

The samples (one ``.npy`` array, first axis the sample) are cut into batches; each batch
goes through one :class:`sw_driver.InferenceSession`. Locally one session runs them all;
with Ray, ``ray.data`` ``map_batches`` spreads them over an actor pool, each actor holding
one session (the model's bytes are sent once per actor). Every row carries its sample
index, Ray Data is asked to keep the order, and the outputs are checked to come back
complete and in order before they are written.
"""

import numpy as np

__all__ = ["SessionActor", "run_dataset"]

#: Ray Data column names.
INDEX, X, Y = "index", "x", "y"


class SessionActor:
    """One session of ``model`` on ``providers``; called with a batch of ``{index, x}``.

    Parameters
    ----------
    model : bytes
        The ONNX model.
    providers : list of str
    """

    def __init__(self, model, providers):
        from sw_driver import InferenceSession

        self.session = InferenceSession(model, providers=providers)
        self.input = self.session.get_inputs()[0].name

    def __call__(self, batch):
        y = self.session.run(None, {self.input: np.ascontiguousarray(batch[X])})[0]
        return {INDEX: batch[INDEX], Y: y}


def _local(model, providers, x, batch_size):
    actor = SessionActor(model, providers)
    return np.concatenate([
        actor({INDEX: np.arange(start, min(start + batch_size, len(x))),
               X: x[start:start + batch_size]})[Y]
        for start in range(0, len(x), batch_size)])


def _on_ray(ray, model, providers, x, batch_size, actors):
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    dataset = ray.data.from_items([{INDEX: i, X: sample} for i, sample in enumerate(x)])
    mapped = dataset.map_batches(
        SessionActor, fn_constructor_args=(model, providers), batch_size=batch_size,
        batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1)
    indices, outputs = [], []
    for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
        indices.append(batch[INDEX])
        outputs.append(batch[Y])
    indices = np.concatenate(indices)
    if not np.array_equal(indices, np.arange(len(x))):  # lost, repeated or out of order
        raise RuntimeError(f"Ray Data returned samples {indices[:10].tolist()}... "
                           f"({len(indices)} of {len(x)}), not 0..{len(x) - 1} in order")
    return np.concatenate(outputs)


def run_dataset(model, x, providers, *, batch_size=32, ray=None, actors=2):
    """The first output of ``model`` for every sample of ``x``, in order.

    Parameters
    ----------
    model : bytes
        The ONNX model.
    x : numpy.ndarray
        Samples along the first axis, as the model's input takes them.
    providers : list of str
    batch_size : int
        Samples per ``session.run``.
    ray : module or None
        An initialized ``ray`` (:func:`bench.ray_cluster.connect`): run on an actor pool
        of ``actors`` sessions. None: one session here.
    actors : int

    Returns
    -------
    numpy.ndarray
    """
    if batch_size < 1:
        raise ValueError(f"--batch must be a positive integer, not {batch_size}")
    if actors < 1:
        raise ValueError(f"--actors must be a positive integer, not {actors}")
    if len(x) == 0:
        raise ValueError("the input holds no samples")
    if ray is None:
        return _local(model, providers, x, batch_size)
    return _on_ray(ray, model, providers, x, batch_size, actors)
