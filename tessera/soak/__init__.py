"""The soak (``make soak``, ``tessera soak``): thousands of random layers, every backend.

Each configuration is a pure function of ``(seed, index)`` (:mod:`.cases`); it is run by
the golden models (:mod:`.golden`, the reference), every provider (:mod:`.backends`) and
onnxruntime's unoptimized QDQ graph (:mod:`.onnx_reference`); :mod:`.runner` compares,
:mod:`.tally` counts and :mod:`.console` shows progress, the summary and writes
``bench/results/soak.json``. Not a benchmark: ``make bench`` does not run it
(10**4 configurations take tens of minutes); ``make test`` runs a 200-case sample
(``tests/test_soak.py``). See ``docs/soak.md``.
"""

from .backends import BACKENDS, Backend, open_backends, parse_backends
from .cases import KINDS, SoakCase, draw_case
from .runner import CaseResult, repro_command, run_case, run_cases
from .tally import Tally

__all__ = ["BACKENDS", "KINDS", "Backend", "CaseResult", "SoakCase", "Tally", "draw_case",
           "open_backends", "parse_backends", "repro_command", "run_case", "run_cases"]
