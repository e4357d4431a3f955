"""The control-variate estimator's fitted controls, kept per process: every unit of an MLP, its
planned sample count and verify's target check use the same fit."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from whestbench.compute.estimators import fit_controls
from whestbench.compute.seeds import PILOT, stream
from whestbench.compute.mlp import weights_for_seed

CONTROLS_CACHE_BYTES = 1 << 30
"""How many bytes of fitted controls a process keeps for reuse. One MLP's coefficients are
(2·width, (depth−1)·width) fp64: 7 MiB at 256×8 but 240 MiB at 1024×16, so a cache bounded by a
count (it held 64) grows to 15 GiB over a long bake at that size."""

_controls: OrderedDict[tuple[int, int, int], Any] = OrderedDict()  # (seed, width, depth) -> Controls, oldest first
_controls_lock = threading.Lock()


def _nbytes(controls) -> int:
    return controls.mu1.nbytes + controls.ez2sq.nbytes + controls.coef.nbytes


def controls_for(seed: int, weights: np.ndarray):
    """The control-variate estimator's controls of the MLP with this seed: every unit of the MLP uses
    the same coefficients, and they are fitted once per process while they fit ``CONTROLS_CACHE_BYTES``
    (a refit gives the same bits: the fit is a function of the seed)."""
    depth, width, _ = weights.shape
    key = (int(seed), width, depth)
    with _controls_lock:
        if key in _controls:
            _controls.move_to_end(key)
            return _controls[key]
    controls = fit_controls(weights_for_seed(*key), stream(key[0], PILOT))
    with _controls_lock:
        _controls[key] = controls
        total = sum(map(_nbytes, _controls.values()))
        while total > CONTROLS_CACHE_BYTES and len(_controls) > 1:
            total -= _nbytes(_controls.popitem(last=False)[1])
    return controls
