"""Agreement figures between Tessera and onnxruntime on the same QDQ model (shared by the
zoo, quantizer and CLI tests)."""

import numpy as np
import qdq_models

from sw_driver import InferenceSession

#: Contract for whole models: top-1 agreement and share of output elements within 1 LSB.
TOP1_MIN = 0.995
WITHIN_1_LSB_MIN = 0.99


def compare(qdq, x, input_name="input", what=""):
    """Run ``qdq`` (path or bytes) on Tessera's CPU provider and onnxruntime; figures.

    Returns
    -------
    dict
        ``ours``, ``theirs`` (outputs), ``top1`` (agreement), ``within`` (share of elements
        within one output LSB), ``exact``, ``max_lsb``; printed with ``what``.
    """
    session = InferenceSession(qdq, providers=["cpu"])
    (ours,) = session.run(None, {input_name: x})
    (theirs,) = qdq_models.ort_session(qdq).run(None, {input_name: x})
    last = session.graph.layers[-1]
    # One output LSB: the final Dequantize's scale; a float Softmax output (probabilities)
    # is measured in 1/256, the step onnxruntime's quantizer gives a Softmax output.
    scale = last.scale if last.op == "Dequantize" else 1 / 256
    diff = np.rint(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / scale)
    figures = {"ours": ours, "theirs": theirs,
               "top1": float((ours.argmax(axis=1) == theirs.argmax(axis=1)).mean()),
               "within": float((diff <= 1).mean()), "exact": float((diff == 0).mean()),
               "max_lsb": int(diff.max())}
    print(f"{what}: Tessera vs onnxruntime over {len(x)} samples: top-1 agreement "
          f"{figures['top1']:.2%}, elements within 1 LSB {figures['within']:.2%} "
          f"(exact {figures['exact']:.2%}, max {figures['max_lsb']} LSB)")
    return figures


def assert_agree(figures, what):
    """The whole-model contract, with the first disagreeing sample in the message."""
    ours, theirs = figures["ours"], figures["theirs"]
    bad = np.flatnonzero(ours.argmax(axis=1) != theirs.argmax(axis=1))
    detail = (f"; first top-1 difference at sample {bad[0]}: ours {ours[bad[0]]}, onnxruntime "
              f"{theirs[bad[0]]}" if bad.size else "")
    assert figures["top1"] >= TOP1_MIN, f"{what}: top-1 agreement {figures['top1']:.2%}{detail}"
    assert figures["within"] >= WITHIN_1_LSB_MIN, (
        f"{what}: only {figures['within']:.2%} of elements within 1 LSB (max "
        f"{figures['max_lsb']} LSB){detail}")


def accuracy(logits, labels):
    return float((logits.argmax(axis=1) == labels).mean())
