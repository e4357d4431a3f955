"""The audit trail's arithmetic: segments fixed by the data, and what each stores (docs/format.md, "Audit trail").

An MLP's N samples fall into contiguous segments of whole steps (a pcg64 chunk, a philox batch), so the
boundaries depend only on N, the step and S, never on devices, ranks, unit cuts or interruptions: pcg64's
(``aligned=False``) are ``min(S, T)`` near-equal runs of its ``T`` chunks; philox's (``aligned=True``)
are aligned power-of-two runs of batches, subtrees of the pairwise sum, so a segment's sums are the same
bits however the MLP is cut. A segment stores float32 means and variances of every neuron (``finish``:
``NAMES``, the control variates' too); pcg64 also keeps the generator's state at each segment's start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_SEGMENTS = 32
MIN_SEGMENTS = 4  # a trail of fewer segments (1 to 3) is refused by bake and verify: one segment would cost a whole MLP to spot-check
MAX_SEGMENTS = 1024
NAMES = ("means", "var", "cv_means", "cv_var")
PREFIX = "trail_"


def segment_bounds(n: int, step: int, segments: int, aligned: bool) -> list[tuple[int, int]]:
    """``[(start, end)]`` in samples of the segments of ``n`` samples cut into steps of ``step`` (the
    last segment ragged); ``[]`` when ``segments`` is 0."""
    n, step, segments = int(n), int(step), int(segments)
    if segments <= 0 or n <= 0:
        return []
    if aligned:
        p = segment_samples(n, step, segments)
        return [(j * p, min((j + 1) * p, n)) for j in range(-(-n // p))]
    t = -(-n // step)
    k = min(segments, t)
    return [(s * t // k * step, min((s + 1) * t // k * step, n)) for s in range(k)]


def segment_samples(n: int, step: int, segments: int) -> int:
    """The samples of one (non-ragged) aligned segment: ``p·step``."""
    t = -(-int(n) // int(step))
    per = -(-t // int(segments))
    return (1 << max(per - 1, 0).bit_length()) * int(step)


def finish(packed: np.ndarray, n: int, depth: int) -> dict[str, np.ndarray]:
    """A segment's float32 values from its fp64 sums ``packed`` (..., 2 or 4·depth, width): the rows
    Σy, Σy² and, under control variates, Σn_b r̄_b, Σn_b r̄_b² (``philox.pack``'s order)."""
    packed = np.asarray(packed, dtype=np.float64)
    rows = packed.shape[-2] // depth
    out = {}
    for k in range(0, rows, 2):
        s, sq = packed[..., k * depth:(k + 1) * depth, :], packed[..., (k + 1) * depth:(k + 2) * depth, :]
        mean = s / n
        var = np.maximum(sq - s * mean, 0.0) / n
        out[NAMES[k]], out[NAMES[k + 1]] = mean.astype(np.float32), var.astype(np.float32)
    return out


@dataclass
class SegmentTrail:
    """Consecutive segments of one MLP (or, with a leading MLP axis, of a batch of MLPs).

    ``first``: the index of the first segment held; ``values``: ``NAMES`` -> (..., n_seg, depth, width)
    float32; ``states``: pcg64's generator state at each segment's start (JSON-able), else None.
    """

    first: int
    values: dict[str, np.ndarray]
    states: list | None = None

    @property
    def count(self) -> int:
        return int(self.values["means"].shape[-3])

    def mlp(self, j: int) -> "SegmentTrail":
        return SegmentTrail(self.first, {k: v[j] for k, v in self.values.items()}, self.states)

    def record(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(meta, arrays)`` for a work record (arrays prefixed ``trail_``)."""
        meta = {PREFIX + "first": self.first}
        if self.states is not None:
            meta[PREFIX + "states"] = self.states
        return meta, {PREFIX + k: np.ascontiguousarray(v, dtype=np.float32) for k, v in self.values.items()}

    @classmethod
    def from_record(cls, meta: dict, arrays: dict[str, np.ndarray]) -> "SegmentTrail | None":
        values = {k[len(PREFIX):]: v for k, v in arrays.items() if k.startswith(PREFIX)}
        if not values:
            return None
        return cls(int(meta[PREFIX + "first"]), values, meta.get(PREFIX + "states"))

    @staticmethod
    def concat(parts: list["SegmentTrail"]) -> "SegmentTrail":
        """One trail of consecutive parts (their segments in order)."""
        states = None if parts[0].states is None else [s for p in parts for s in p.states]
        return SegmentTrail(parts[0].first, {k: np.concatenate([p.values[k] for p in parts], axis=-3)
                                             for k in parts[0].values}, states)

    def problem(self, lead: tuple, n_seg: int, depth: int, width: int, names: tuple) -> str | None:
        """Why this trail cannot be what a unit computed (shape, dtype, non-finite, negative), or None."""
        if tuple(self.values) != names:
            return f"trail holds {', '.join(self.values)}, expected {', '.join(names)}"
        want = lead + (n_seg, depth, width)
        for k, v in self.values.items():
            if v.shape != want or v.dtype != np.float32:
                return f"trail {k} is {v.dtype}{list(v.shape)}, expected float32{list(want)}"
            if not np.all(np.isfinite(v)):
                return f"trail {k} holds non-finite values"
            if k in ("var", "cv_var", "means") and np.any(v < 0):
                return f"trail {k} holds negative values"
        return None


def trail_names(cv: bool) -> tuple[str, ...]:
    return NAMES if cv else NAMES[:2]
