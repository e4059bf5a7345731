"""Run soak cases: each through the golden models, every backend and onnxruntime.

:func:`run_case` is the whole check of one configuration; as :func:`draw_case` is a pure
function of ``(seed, index)``, ``tessera soak --seed S --only I`` (:func:`repro_command`)
repeats exactly what the soak did for case ``I``.

Outcomes per backend: ``pass`` (bit-identical to the golden model), ``refused`` (the
provider declined the layer, with its reason: neither a pass nor a failure), ``mismatch``
(an output that differs) and ``error`` (the provider accepted the layer, then raised).
Against onnxruntime's unoptimized QDQ graph the result is measured, not judged: how many
elements differ, by how much, and how far from a rounding tie (float32 evaluation may move
a value across ``k + 1/2``, so a 1 LSB difference within :data:`NEAR_TIE` of a tie is the
expected kind; see ``docs/semantics.md``).
"""

import os
import shlex
from dataclasses import dataclass, field

import numpy as np

from .cases import draw_case
from .golden import golden_output
from .onnx_reference import onnxruntime_output
from .ties import NEAR_TIE, tie_distance

__all__ = ["BackendOutcome", "CaseResult", "OnnxruntimeComparison",
           "compare_outputs", "repro_command", "run_case", "run_cases"]


@dataclass(frozen=True)
class BackendOutcome:
    """``status`` is "pass", "refused", "mismatch" or "error"; ``detail`` says why."""

    status: str
    detail: str = ""


@dataclass(frozen=True)
class OnnxruntimeComparison:
    """The golden output against onnxruntime's for one case.

    ``max_tie_distance`` is the largest ``|frac(v) - 1/2|`` over the differing elements
    (None when none differ or the layer does not round); ``away_from_tie`` counts the
    differing elements that are more than 1 LSB off or farther than :data:`NEAR_TIE` from a
    tie, i.e. not explained by float32 rounding.
    """

    elements: int = 0
    differing: int = 0
    max_abs_diff: int = 0
    max_tie_distance: float = None
    away_from_tie: int = 0
    detail: str = ""
    error: str = ""


@dataclass
class CaseResult:
    """Everything :func:`run_case` found for one case."""

    case: object
    backends: dict = field(default_factory=dict)
    onnxruntime: OnnxruntimeComparison = None
    golden_error: str = ""

    @property
    def failures(self):
        """Backends (and "golden") whose outcome is a mismatch or an error."""
        failed = [name for name, outcome in self.backends.items()
                  if outcome.status in ("mismatch", "error")]
        return (["golden"] if self.golden_error else []) + failed


#: Comma-separated modules or ``.py`` files adding providers to the soak
#: (:func:`~.backends.load_plugins`); a repro command carries it when it is set.
PLUGINS_VARIABLE = "TESSERA_SOAK_PROVIDERS"


def repro_command(seed, index, backend=None):
    """The one-line command that runs case ``index`` of soak ``seed`` again, in detail
    (``--only``/``--backends`` are also spelt ``--index``/``--providers``)."""
    plugins = os.environ.get(PLUGINS_VARIABLE)
    command = f"{PLUGINS_VARIABLE}={shlex.quote(plugins)} " if plugins else ""
    command += f".venv/bin/tessera soak --seed {seed} --only {index}"
    return command + (f" --backends {backend}" if backend else "")


def _one_line(error):
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def compare_outputs(expected, actual, who):
    """None when ``actual`` equals ``expected`` (shape, dtype and values), else a one-line
    description: how many elements differ, the first index and both values."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)}, golden {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, golden {expected.dtype}"
    differ = actual != expected
    if not differ.any():
        return None
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
    return (f"{int(differ.sum())} of {differ.size} elements differ (max |diff| "
            f"{int(diff.max())}); first at {first}: golden {int(expected[first])}, "
            f"{who} {int(actual[first])}")


def _run_backend(backend, case, expected):
    try:
        reason = backend.refusal(case)
    except Exception as exc:  # any exception: a crash in supports() is a finding, not fatal
        return BackendOutcome("error", f"supports/estimate raised {_one_line(exc)}")
    if reason is not None:
        return BackendOutcome("refused", " ".join(str(reason).split()))
    try:
        actual = backend.run(case)
    except Exception as exc:  # any exception: recorded with its message, the soak goes on
        backend.reopen()
        return BackendOutcome("error", _one_line(exc))
    problem = compare_outputs(expected, actual, backend.name)
    return BackendOutcome("pass") if problem is None else BackendOutcome("mismatch", problem)


def _compare_onnxruntime(case, expected):
    try:
        reference = onnxruntime_output(case)
    except Exception as exc:  # any exception: recorded; onnxruntime is measured, not judged
        return OnnxruntimeComparison(elements=expected.size, error=_one_line(exc))
    if reference.shape != expected.shape:
        return OnnxruntimeComparison(
            elements=expected.size,
            error=f"onnxruntime shape {list(reference.shape)}, golden {list(expected.shape)}")
    diff = np.abs(reference.astype(np.int64) - expected.astype(np.int64))
    differ = diff > 0
    if not differ.any():
        return OnnxruntimeComparison(elements=expected.size)
    distance = tie_distance(case, differ)
    if distance is None:  # a layer that does not round (MaxPool) must agree exactly
        away, max_distance = int(differ.sum()), None
    else:
        away = int(((diff[differ] > 1) | (distance > NEAR_TIE)).sum())
        max_distance = float(distance.max())
    return OnnxruntimeComparison(
        elements=expected.size, differing=int(differ.sum()), max_abs_diff=int(diff.max()),
        max_tie_distance=max_distance, away_from_tie=away,
        detail=compare_outputs(expected, reference, "onnxruntime"))


def run_case(case, backends, use_onnxruntime=True):
    """Check one case on ``backends`` (:class:`~.backends.Backend`) and onnxruntime.

    Unavailable backends are skipped (they are reported once, not per case).

    Returns
    -------
    CaseResult
    """
    result = CaseResult(case)
    try:
        expected = golden_output(case)
    except Exception as exc:  # any exception: the generator drew a case the model rejects
        result.golden_error = _one_line(exc)
        return result
    for backend in backends:
        if backend.available:
            result.backends[backend.name] = _run_backend(backend, case, expected)
    if use_onnxruntime:
        result.onnxruntime = _compare_onnxruntime(case, expected)
    return result


def run_cases(seed, indices, backends, use_onnxruntime=True):
    """Yield :func:`run_case` for ``draw_case(seed, i)`` for each ``i`` in ``indices``."""
    for index in indices:
        yield run_case(draw_case(seed, index), backends, use_onnxruntime)
