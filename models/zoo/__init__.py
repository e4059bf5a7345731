"""Tessera's model zoo: small real and random-weight ONNX models for tests and demos.

- ``digits``: a CNN trained (in NumPy) on scikit-learn's 8x8 ``digits``; its float and
  onnxruntime-QDQ ONNX files ship here (:data:`DIGITS_FLOAT`, :data:`DIGITS_QDQ`, about
  20 KB and 10 KB), ``make zoo-digits`` retrains and rewrites them.
- ``random_models``: ResNet-8 and a depthwise-separable stack at 32x32x3 with random
  weights, written on demand into ``build/zoo/`` by ``make zoo``.

Unlike the rest of ``models/`` (pure NumPy golden functions), the zoo needs onnx,
onnxruntime and, for the data set, scikit-learn; importing ``models`` does not import it.
"""

from .digits import FLOAT_PATH as DIGITS_FLOAT
from .digits import QDQ_PATH as DIGITS_QDQ
from .digits import load_digits_split
from .random_models import MODELS as RANDOM_MODELS
from .random_models import build as build_random
from .random_models import random_inputs

__all__ = ["DIGITS_FLOAT", "DIGITS_QDQ", "RANDOM_MODELS", "build_random", "load_digits_split",
           "random_inputs"]
