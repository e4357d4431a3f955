"""Faults injected into a bake, as a faulty device would make them.

The device check's: each moves the last bit of what it touches (up or down, so no bias the precision
gate would see) under a condition that a correct device never depends on; shared by the device-check
tests of every engine (they need torch). Verify's: ``scaled_weights`` runs chosen pcg64 chunks of one
MLP on slightly wrong weights, a fault the stored numbers carry consistently (trail, spot check, drift).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from whestbench.compute.pcg64 import Pcg64Stream


def scaled_weights(monkeypatch, weights: np.ndarray, factor: float, when: Callable[[Pcg64Stream], bool]) -> None:
    """Until ``monkeypatch.undo()``: every pcg64 step of the MLP whose weights are ``weights`` for which
    ``when(stream)`` holds runs on ``weights * factor``; every other step is exact."""
    real = Pcg64Stream.step

    def step(self):
        if when(self) and np.array_equal(self.weights, weights):
            self.weights = weights * np.float32(factor)
            try:
                return real(self)
            finally:
                self.weights = weights
        return real(self)

    monkeypatch.setattr(Pcg64Stream, "step", step)


def _flip(r):
    import torch

    return (r.view(torch.int32) ^ 1).view(torch.float32)


def row_count_dependent_bmm(min_rows: int):
    """``torch.bmm`` whose results move by one ulp when at least ``min_rows`` rows are multiplied together."""
    import torch

    real = torch.bmm

    def bmm(a, b, *, out=None):
        r = real(a, b)
        if a.shape[1] >= min_rows:
            r = _flip(r)
        return r if out is None else out.copy_(r)

    return bmm


def batch_dependent_mm():
    """``torch.mm`` whose results move by one ulp when its output buffer holds more than one MLP's rows
    (the cuda engine's GEMMs are one shape, so the batch is what could still reach them)."""
    import torch

    real = torch.mm

    def mm(a, b, *, out=None):
        r = real(a, b)
        if out is not None and out.untyped_storage().nbytes() > out.nbytes:
            r = _flip(r)
        return r if out is None else out.copy_(r)

    return mm


def first_word_flipped(real):
    """A ``(key, n0, n1, width, device) -> words`` stage like ``real`` with its first word's low bit flipped."""

    def words(key, n0, n1, width, device):
        w = np.array(real(key, n0, n1, width, device), copy=True)
        w[0, 0] ^= 1
        return w

    return words
