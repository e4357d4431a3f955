"""The random choices of ``verify --spot-check`` and ``verify --recompute``, and what a choice catches.

No I/O. A forger who knows which segments (or MLPs) a check will regenerate forges the others, so
the choice must be unpredictable: each run draws a fresh seed from the operating system's entropy
(``fresh_seed``) and prints it; ``--spot-seed S`` / ``--recompute-seed S`` reproduce a run. The
draw is a function of the seed, of what it draws (segments or MLPs) and of the budget, through
its own ``SeedSequence``: two budgets under one seed are independent draws, never one a prefix of
the other (``random.Random(seed).sample`` with the default seed 0 picked nested prefixes, so a
segment the default never picked was never checked).

A spot-check budget is ``K`` segments for the whole dataset (drawn without replacement among all
of its segments) or ``K/mlp`` (K segments of every MLP, all of an MLP's when it has fewer). What a
draw catches is stated for two threat models, exactly for the draw's shape (hypergeometric over
what it drew and what there was to draw), whatever the forgery's positions, since the draw is
uniform given its shape (``detection``):

- **every**: one bad segment in every MLP (a device fault, a forger who skipped 1/S of each MLP);
- **one**: ``q`` forged segments in one MLP among M (the forger picks the MLP; the worst is stated).
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from whestbench.errors import UsageError

SEED_BITS = 32
"""A fresh seed's size: 2³² draws, each as likely, nothing a forger can guess."""
_SPOT, _RECOMPUTE = 0x53504F54, 0x52454350  # the SeedSequence's tag of each kind of draw
_SPOT_FIX = "pass 8 or 2/mlp, say."
_BUDGET = re.compile(r"^\s*(\d+)\s*(/\s*mlp)?\s*$", re.IGNORECASE)


def fresh_seed() -> int:
    """A seed no one can predict (``secrets``: the operating system's entropy)."""
    return secrets.randbits(SEED_BITS)


def check_seed(flag: str, value: Any) -> int | None:
    """``value`` as a seed (None stays None: a fresh one is drawn), else the one-line UsageError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise UsageError(f"{flag} must be a non-negative integer (a seed printed by an earlier run); got {value!r};",
                         fix=f"pass one, or leave {flag} out for a fresh seed.")
    return int(value)


@dataclass(frozen=True)
class SpotBudget:
    """``k`` segments for the whole dataset, or (``per_mlp``) ``k`` segments of every MLP."""

    k: int
    per_mlp: bool = False

    @classmethod
    def parse(cls, value: Any) -> "SpotBudget":
        """``8`` or ``"8"``: 8 segments for the dataset; ``"4/mlp"``: 4 of every MLP. UsageError else."""
        if isinstance(value, cls):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            k, per = int(value), False
        else:
            m = _BUDGET.match(value) if isinstance(value, str) else None
            if m is None:
                raise UsageError(f"--spot-check takes K (segments for the whole dataset) or K/mlp (K segments of "
                                 f"every MLP), K a positive integer; got {value!r};", fix=_SPOT_FIX)
            k, per = int(m.group(1)), m.group(2) is not None
        if k < 1:
            raise UsageError(f"--spot-check must be a positive integer (K or K/mlp); got {value!r};", fix=_SPOT_FIX)
        return cls(k, per)

    def __str__(self) -> str:
        return f"{self.k}/mlp" if self.per_mlp else str(self.k)


def _rng(seed: int, tag: int, *budget: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), tag, *budget])))


def draw_segments(counts: Sequence[int], budget: SpotBudget, seed: int) -> list[tuple[int, int]]:
    """The segments a spot check regenerates: ``(MLP position in counts, segment)``, sorted. ``counts``:
    each MLP's segments, in the dataset's order. Uniform without replacement over every segment
    (``K``) or over each MLP's (``K/mlp``)."""
    rng = _rng(seed, _SPOT, budget.k, int(budget.per_mlp))
    if budget.per_mlp:
        return [(m, int(g)) for m, s in enumerate(counts) if s > 0
                for g in sorted(rng.choice(int(s), min(budget.k, int(s)), replace=False))]
    starts = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
    total = int(starts[-1])
    flat = np.sort(rng.choice(total, min(budget.k, total), replace=False)) if total else np.zeros(0, np.int64)
    mlp = np.searchsorted(starts, flat, side="right") - 1
    return [(int(m), int(f - starts[m])) for m, f in zip(mlp, flat)]


def draw_rows(n_rows: int, k: int, seed: int) -> list[int]:
    """The rows ``verify --recompute K`` bakes again: ``min(k, n_rows)`` positions, uniform without
    replacement, sorted."""
    return sorted(int(r) for r in _rng(seed, _RECOMPUTE, k).choice(n_rows, min(k, n_rows), replace=False))


def miss(total: int, bad: int, k: int) -> float:
    """The chance that ``k`` draws without replacement from ``total`` items miss all ``bad`` of them:
    C(total − bad, k) / C(total, k)."""
    if bad <= 0 or k <= 0:
        return 1.0
    if k > total - bad:
        return 0.0
    lg = math.lgamma
    return math.exp(lg(total - bad + 1) - lg(total - bad - k + 1) + lg(total - k + 1) - lg(total + 1))


@dataclass(frozen=True)
class Detection:
    """What a draw catches, over the draw (its shape fixed): ``every``, one bad segment in every MLP;
    ``one``, ``q`` forged segments in one MLP (the MLP the forger would pick: the worst)."""

    every: float
    one: float
    q: int
    drawn: int
    total: int
    mlps: int


def detection(counts: Sequence[int], budget: SpotBudget, q: int = 1) -> Detection:
    """``Detection`` of a draw of ``budget`` over MLPs with ``counts`` segments each (``draw_segments``)."""
    counts = [int(s) for s in counts if s > 0]
    total, mlps = sum(counts), len(counts)
    if budget.per_mlp:
        drawn = [min(budget.k, s) for s in counts]
        every = 1.0 - math.prod(1.0 - d / s for d, s in zip(drawn, counts))
        one = min((1.0 - miss(s, min(q, s), d) for d, s in zip(drawn, counts)), default=0.0)
        return Detection(every, one, q, sum(drawn), total, mlps)
    k = min(budget.k, total)
    one = min((1.0 - miss(total, min(q, s), k) for s in set(counts)), default=0.0)
    return Detection(1.0 - miss(total, mlps, k), one, q, k, total, mlps)
