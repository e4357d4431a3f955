"""The draws of verify --spot-check and --recompute: unpredictable by default, independent across budgets,
and the detection probabilities the check prints are those of the draw function itself (checked against a
Monte-Carlo run of ``draw_segments``, not against the formula's own arithmetic)."""

from __future__ import annotations

import math
import random

import pytest

from whestbench.errors import UsageError
from whestbench.verify.spot_draw import (
    SpotBudget,
    check_seed,
    detection,
    draw_rows,
    draw_segments,
    fresh_seed,
    miss,
)

COUNTS = [10, 10, 7, 12, 4]  # segments per MLP (a target bake's MLPs differ)
TRIALS = 4000


@pytest.mark.parametrize("budget", [SpotBudget(5), SpotBudget(12), SpotBudget(2, per_mlp=True),
                                    SpotBudget(5, per_mlp=True)], ids=str)
def test_printed_probabilities_are_the_draw_functions_catch_rates(budget):
    """For a fixed forgery (the forger does not know the seed): one bad segment in every MLP, at fixed
    positions; q forged segments in the MLP the stated worst case names. The catch rate over TRIALS
    seeds is within 4.5 standard errors of the stated probability."""
    det = detection(COUNTS, budget)
    det2 = detection(COUNTS, budget, q=2)
    bad_every = {(m, (3 * m + 1) % s) for m, s in enumerate(COUNTS)}  # one per MLP, anywhere
    worst = max(range(len(COUNTS)), key=lambda m: COUNTS[m]) if budget.per_mlp else 0  # any MLP in dataset mode
    bad_one, bad_two = {(worst, 2)}, {(worst, 2), (worst, 3)}
    hits = {"every": 0, "one": 0, "two": 0}
    for seed in range(TRIALS):
        got = set(draw_segments(COUNTS, budget, 10_000 + seed))
        assert len(got) == det.drawn  # what the line says was drawn
        hits["every"] += bool(got & bad_every)
        hits["one"] += bool(got & bad_one)
        hits["two"] += bool(got & bad_two)
    for name, p in (("every", det.every), ("one", det.one), ("two", det2.one)):
        se = math.sqrt(max(p * (1 - p), 1e-4) / TRIALS)
        assert abs(hits[name] / TRIALS - p) < 4.5 * se, (name, hits[name] / TRIALS, p)


def test_the_probabilities_in_closed_form():
    # dataset budget: K of T without replacement, hypergeometric
    t = sum(COUNTS)
    assert detection(COUNTS, SpotBudget(5)).every == pytest.approx(1 - math.comb(t - 5, 5) / math.comb(t, 5))
    assert detection(COUNTS, SpotBudget(5)).one == pytest.approx(5 / t)
    # K/mlp: an MLP with fewer segments than K is drawn whole (it cannot hide a bad segment)
    det = detection(COUNTS, SpotBudget(5, per_mlp=True))
    assert det.drawn == 5 * 4 + 4 and det.every == pytest.approx(1 - (1 / 2) * (1 / 2) * (2 / 7) * (7 / 12) * 0)
    assert det.one == pytest.approx(5 / 12)  # the forger picks the MLP with the most segments
    for total, bad, k in [(30, 3, 4), (128, 4, 8), (10, 1, 10), (10, 0, 3), (5, 2, 4)]:
        assert miss(total, bad, k) == pytest.approx(math.comb(total - bad, k) / math.comb(total, k))
    assert miss(10**7, 100, 64) == pytest.approx(math.prod((10**7 - 100 - i) / (10**7 - i) for i in range(64)))


def test_budgets_under_one_seed_are_independent_draws_not_prefixes():
    """``random.Random(seed).sample`` drew nested prefixes: the segments --spot-check 4 picks were always
    among --spot-check 8's, so a segment the smaller draw never picked was never checked by either."""
    nested = sum(set(draw_segments(COUNTS, SpotBudget(4), s)) <= set(draw_segments(COUNTS, SpotBudget(8), s))
                 for s in range(200))
    assert nested < 20  # independent: P(4 of 43 inside 8 of 43) = C(8,4)/C(43,4) ≈ 0.0008
    rows = sum(set(draw_rows(50, 2, s)) <= set(draw_rows(50, 5, s)) for s in range(200))
    assert rows < 40  # independent: C(5,2)/C(50,2) ≈ 0.008
    # the old draw was nested on a real dataset's index (the teeth of this test)
    assert all(set(random.Random(s).sample(range(3200), 4)) <= set(random.Random(s).sample(range(3200), 8))
               for s in range(20))


def test_a_draw_is_a_function_of_its_seed_and_fresh_seeds_differ():
    b = SpotBudget(3, per_mlp=True)
    assert draw_segments(COUNTS, b, 77) == draw_segments(COUNTS, b, 77)
    assert draw_rows(9, 3, 5) == draw_rows(9, 3, 5) and len(set(draw_rows(9, 9, 5))) == 9
    seeds = {fresh_seed() for _ in range(50)}
    assert len(seeds) == 50 and all(0 <= s < 2**32 for s in seeds)


@pytest.mark.parametrize("text, want", [("8", SpotBudget(8)), (" 4/mlp", SpotBudget(4, True)), ("2/MLP", SpotBudget(2, True)),
                                        (3, SpotBudget(3))])
def test_budget_syntax(text, want):
    assert SpotBudget.parse(text) == want and SpotBudget.parse(str(want)) == want


@pytest.mark.parametrize("bad", ["0", "0/mlp", "-1", "4/seg", "x", "", True, 1.5, None])
def test_a_bad_budget_or_seed_is_one_line(bad):
    with pytest.raises(UsageError, match="^--spot-check (takes K|must be a positive integer)"):
        SpotBudget.parse(bad)
    if bad is not None:
        with pytest.raises(UsageError, match="^--spot-seed must be a non-negative integer"):
            check_seed("--spot-seed", -1 if bad == "-1" else bad)
