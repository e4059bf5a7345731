"""Agreement figures between Tessera and onnxruntime on the same QDQ model (shared by the
zoo, quantizer and CLI tests).

The reference is onnxruntime's unoptimized QDQ graph (the same on every CPU). It evaluates in
float32, so an element whose real value lies within about 1e-5 LSB of a rounding tie may
come out 1 LSB away from Tessera's exactly rounded one, and a sample whose two best logits
are that close may change its top-1: the contract asks for top-1 agreement only where the
reference's winner leads by more than ``CLEAR_LEAD_LSB``.
"""

import numpy as np
import qdq_models

from sw_driver import InferenceSession

#: Contract for whole models: share of output elements within 1 LSB, and top-1 agreement on
#: every sample whose reference winner leads the runner-up by more than this many LSB (with
#: elements 1 LSB apart, a lead of 2 LSB or less is the only way top-1 can change).
WITHIN_1_LSB_MIN = 0.99
CLEAR_LEAD_LSB = 2


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
    top2 = np.sort(theirs.astype(np.float64), axis=1)[:, -2:]
    figures = {"ours": ours, "theirs": theirs,
               "lead_lsb": np.rint((top2[:, 1] - top2[:, 0]) / scale),
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
    differ = ours.argmax(axis=1) != theirs.argmax(axis=1)
    bad = np.flatnonzero(differ & (figures["lead_lsb"] > CLEAR_LEAD_LSB))
    detail = (f"; first top-1 difference at sample {bad[0]} (reference lead "
              f"{int(figures['lead_lsb'][bad[0]])} LSB): ours {ours[bad[0]]}, onnxruntime "
              f"{theirs[bad[0]]}" if bad.size else "")
    assert not bad.size, (f"{what}: top-1 differs on {bad.size} samples with a clear winner "
                          f"(top-1 agreement {figures['top1']:.2%} overall){detail}")
    assert figures["within"] >= WITHIN_1_LSB_MIN, (
        f"{what}: only {figures['within']:.2%} of elements within 1 LSB (max "
        f"{figures['max_lsb']} LSB){detail}")


def accuracy(logits, labels):
    return float((logits.argmax(axis=1) == labels).mean())
