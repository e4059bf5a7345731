"""Shared NumPy training pieces for the zoo's sequence models (``vit``, ``rowrnn``).

The zoo trains without a deep-learning framework: each model writes its own forward pass and
hand-derived backward pass over a dict of float32 arrays, and this module supplies what they
share -- softmax cross-entropy, Adam with a cosine-decayed rate, the seeded mini-batch loop,
the accuracy record stored beside the shipped ONNX files, and a central-difference gradient
check that the tests run on every hand-written backward pass.
"""

import json

import numpy as np

__all__ = ["adam_fit", "numeric_gradient_check", "read_record", "softmax_xent",
           "write_record"]


def softmax_xent(logits, y):
    """Mean cross-entropy of ``logits`` [N, C] against labels ``y``; (loss, dlogits)."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
    p[np.arange(len(y)), y] -= 1
    return float(loss), p / len(y)


def adam_fit(params, loss_and_grads, x, y, *, epochs, batch, lr, seed, weight_decay=0.0,
             augment=None, report=None, report_every=10):
    """Train ``params`` in place with Adam on seeded mini-batches; returns ``params``.

    Parameters
    ----------
    params : dict of str -> numpy.ndarray
        Float32 parameters, updated in place (and kept float32).
    loss_and_grads : callable
        ``(params, x_batch, y_batch) -> (loss, grads)`` with ``grads`` keyed like ``params``.
    x, y : numpy.ndarray
        The training inputs and int labels.
    epochs, batch, lr : int, int, float
        Usual Adam betas; the rate follows a cosine from ``lr`` down to 5 % of it.
    seed : int
        Seeds the batch order (and ``augment``'s generator).
    weight_decay : float
        Decoupled (AdamW) decay, applied to matrices only: norms, biases and embeddings of
        one row are left alone, as transformer recipes do.
    augment : callable, optional
        ``(rng, x_batch) -> x_batch``: a seeded data augmentation.
    report : callable, optional
        ``(epoch, mean_loss)`` every ``report_every`` epochs.
    """
    rng = np.random.default_rng(seed)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, step = 0.9, 0.999, 0
    total = epochs * -(-len(y) // batch)
    for epoch in range(epochs):
        order = rng.permutation(len(y))
        losses = []
        for start in range(0, len(order), batch):
            index = order[start:start + batch]
            xb = x[index] if augment is None else augment(rng, x[index])
            loss, grads = loss_and_grads(params, xb, y[index])
            step += 1
            rate = lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * step / total)))
            for key, grad in grads.items():
                m[key] = beta1 * m[key] + (1 - beta1) * grad
                v2[key] = beta2 * v2[key] + (1 - beta2) * grad * grad
                mhat = m[key] / (1 - beta1 ** step)
                vhat = v2[key] / (1 - beta2 ** step)
                update = mhat / (np.sqrt(vhat) + 1e-8)
                if weight_decay and params[key].ndim >= 2 and min(params[key].shape) > 1:
                    update = update + weight_decay * params[key]
                params[key] = (params[key] - rate * update).astype(np.float32)
            losses.append(loss)
        if report is not None and (epoch + 1) % report_every == 0:
            report(epoch + 1, float(np.mean(losses)))
    return params


def numeric_gradient_check(loss_and_grads, params, x, y, *, samples=6, eps=1e-5, seed=0):
    """Largest relative error between the analytic and central-difference gradients.

    Runs in float64 (the parameters and ``x`` are cast), at ``samples`` seeded entries of
    every parameter, so a wrong term in any hand-written backward pass shows up as an error
    far above float64 rounding (a correct one gives about 1e-7 or less).

    Returns
    -------
    (float, str)
        The worst relative error and where it was (``"name[index]"``).
    """
    rng = np.random.default_rng(seed)
    p64 = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    x64 = np.asarray(x, dtype=np.float64)
    _, grads = loss_and_grads(p64, x64, y)
    worst, where = 0.0, ""
    for key, value in p64.items():
        flat = value.reshape(-1)
        for i in rng.choice(flat.size, size=min(samples, flat.size), replace=False):
            saved = flat[i]
            flat[i] = saved + eps
            up = loss_and_grads(p64, x64, y)[0]
            flat[i] = saved - eps
            down = loss_and_grads(p64, x64, y)[0]
            flat[i] = saved
            numeric = (up - down) / (2 * eps)
            analytic = float(grads[key].reshape(-1)[i])
            # The floor keeps central-difference noise (~1e-10) on zero gradients from counting.
            error = abs(numeric - analytic) / max(1e-4, abs(numeric) + abs(analytic))
            if error > worst:
                worst, where = error, f"{key}[{np.unravel_index(i, value.shape)}]"
    return worst, where


def write_record(path, record):
    """Write the accuracy record (JSON, sorted keys) shipped beside a zoo model."""
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_record(path):
    """The accuracy record written by :func:`write_record`."""
    return json.loads(path.read_text())
