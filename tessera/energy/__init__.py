"""The energy ESTIMATE of a model on a board: the coefficient model (``model``, with
``energy_coefficients.json``) and the estimate from the energy twin's activity
(``estimate``); ``docs/energy.md``."""
