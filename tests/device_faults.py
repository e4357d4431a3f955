"""Faults the device check exists to catch, injected into a path's matmul or sampler: each moves the
last bit of what it touches (up or down, so no bias the precision gate would see) under a condition
that a correct device never depends on. Shared by the device-check tests of every engine."""

from __future__ import annotations

import numpy as np
import torch


def _flip(r: torch.Tensor) -> torch.Tensor:
    return (r.view(torch.int32) ^ 1).view(torch.float32)


def row_count_dependent_bmm(min_rows: int):
    """``torch.bmm`` whose results move by one ulp when at least ``min_rows`` rows are multiplied together."""
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
