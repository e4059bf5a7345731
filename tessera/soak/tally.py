"""Counting soak results: per layer kind and backend, against onnxruntime, as JSON.

:class:`Tally` takes :class:`~.runner.CaseResult` objects one by one and keeps only
counts plus the details of what went wrong (every mismatch with its repro command, and the
first onnxruntime differences of each kind), so a 10**4-case soak holds no outputs.
"""

import re
from collections import Counter

from .cases import KINDS
from .runner import repro_command
from .ties import NEAR_TIE

__all__ = ["STATUSES", "Tally"]

STATUSES = ("pass", "refused", "mismatch", "error")
#: onnxruntime differences listed per kind in the JSON (all are counted).
LISTED_DIFFERENCES = 20


def _reason_class(reason):
    """A refusal reason without the layer's name and numbers, so that similar refusals
    count together."""
    return re.sub(r"\d+", "#", re.sub(r"^layer 'soak_\d+': ", "", reason))


class _OnnxruntimeCounts:
    def __init__(self):
        self.compared = self.configs_differing = self.elements = 0
        self.elements_differing = self.away_from_tie = self.errors = 0
        self.max_abs_diff = 0
        self.max_tie_distance = None
        self.listed = []

    def add(self, result):
        ort = result.onnxruntime
        if ort.error:
            self.errors += 1
            self.listed.append({"index": result.case.index, "error": ort.error,
                                "repro": repro_command(result.case.seed, result.case.index)})
            return
        self.compared += 1
        self.elements += ort.elements
        if not ort.differing:
            return
        self.configs_differing += 1
        self.elements_differing += ort.differing
        self.away_from_tie += ort.away_from_tie
        self.max_abs_diff = max(self.max_abs_diff, ort.max_abs_diff)
        if ort.max_tie_distance is not None:
            self.max_tie_distance = max(self.max_tie_distance or 0.0, ort.max_tie_distance)
        if len(self.listed) < LISTED_DIFFERENCES or ort.away_from_tie:
            self.listed.append({
                "index": result.case.index, "description": result.case.description,
                "detail": ort.detail, "max_tie_distance": ort.max_tie_distance,
                "away_from_tie": ort.away_from_tie,
                "repro": repro_command(result.case.seed, result.case.index)})

    def document(self):
        return {
            "configs_compared": self.compared, "configs_differing": self.configs_differing,
            "elements": self.elements, "elements_differing": self.elements_differing,
            "max_abs_diff": self.max_abs_diff, "max_tie_distance": self.max_tie_distance,
            "elements_away_from_tie": self.away_from_tie, "errors": self.errors,
            "differences": self.listed,
        }


class Tally:
    """Counts of a soak run.

    Parameters
    ----------
    seed : int
    backends : list of Backend
        All of them, available or not (the unavailable ones are reported with their
        reason).
    """

    def __init__(self, seed, backends):
        self.seed = seed
        self.backend_labels = {b.name: b.label for b in backends}
        self.unavailable = {b.name: b.unavailable for b in backends if not b.available}
        self.available = [b.name for b in backends if b.available]
        self.configs = Counter()
        self.outcomes = {kind: {name: Counter() for name in self.available} for kind in KINDS}
        self.reasons = {name: Counter() for name in self.available}
        self.onnxruntime = {kind: _OnnxruntimeCounts() for kind in KINDS}
        self.failures = []  # one entry per (case, backend) mismatch or error

    def add(self, result):
        """Count one :class:`~.runner.CaseResult`; return its new failure entries."""
        case = result.case
        self.configs[case.kind] += 1
        new = []
        if result.golden_error:
            new.append(self._failure(case, "golden", "error", result.golden_error))
        for name, outcome in result.backends.items():
            self.outcomes[case.kind][name][outcome.status] += 1
            if outcome.status == "refused":
                self.reasons[name][_reason_class(outcome.detail)] += 1
            elif outcome.status in ("mismatch", "error"):
                new.append(self._failure(case, name, outcome.status, outcome.detail))
        if result.onnxruntime is not None:
            self.onnxruntime[case.kind].add(result)
        self.failures.extend(new)
        return new

    @staticmethod
    def _failure(case, backend, status, detail):
        return {"index": case.index, "kind": case.kind, "backend": backend, "status": status,
                "detail": detail, "description": case.description,
                "repro": repro_command(case.seed, case.index,
                                       None if backend == "golden" else backend)}

    # ------------------------------------------------------------ totals

    @property
    def kinds_seen(self):
        """The kinds drawn so far, in :data:`KINDS` order."""
        return [kind for kind in KINDS if self.configs[kind]]

    @property
    def total_configs(self):
        return sum(self.configs.values())

    @property
    def mismatches(self):
        """Backend outputs that differ from the golden model, errors included."""
        return len(self.failures)

    def backend_totals(self, name):
        """Counter of statuses of backend ``name`` over every kind."""
        total = Counter()
        for kind in KINDS:
            total.update(self.outcomes[kind].get(name, Counter()))
        return total

    def onnxruntime_totals(self):
        """(configs compared, configs differing, elements differing, max |diff|,
        elements away from a tie)."""
        counts = self.onnxruntime.values()
        return (sum(c.compared for c in counts), sum(c.configs_differing for c in counts),
                sum(c.elements_differing for c in counts),
                max((c.max_abs_diff for c in counts), default=0),
                sum(c.away_from_tie for c in counts))

    def document(self):
        """The JSON-ready details (everything but the metrics)."""
        kinds = {}
        for kind in KINDS:
            kinds[kind] = {
                "configs": self.configs[kind],
                "backends": {name: {s: self.outcomes[kind][name][s] for s in STATUSES}
                             for name in self.available},
                "onnxruntime": self.onnxruntime[kind].document(),
            }
        backends = {}
        for name, label in self.backend_labels.items():
            if name not in self.available:
                backends[name] = {"available": False, "reason": self.unavailable[name]}
                continue
            totals = self.backend_totals(name)
            backends[name] = {"available": True, "provider": label,
                              **{s: totals[s] for s in STATUSES},
                              "refusal_reasons": dict(self.reasons[name].most_common())}
        return {"seed": self.seed, "configs": self.total_configs, "near_tie": NEAR_TIE,
                "backends": backends, "kinds": kinds, "mismatches": self.failures}
