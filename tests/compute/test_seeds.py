"""Per-MLP seeds: validation, random and derived lists, the estimator seed, slices and the list digest."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from whestbench.compute.seeds import (
    SEED_LIMIT,
    SeedError,
    _first_distinct,
    check_range,
    derived_seeds,
    estimator_seed,
    estimator_seeds,
    random_seeds,
    seed_list_digest,
    slice_bounds,
    validate_mlp_seeds,
)
from whestbench.errors import UsageError

# --- validate_mlp_seeds -------------------------------------------------------------------------


def test_valid_seeds_are_returned_as_plain_ints():
    out = validate_mlp_seeds([0, np.int64(7), SEED_LIMIT - 1], 3)
    assert out == [0, 7, SEED_LIMIT - 1]
    assert all(type(v) is int for v in out)


def test_seed_errors_are_usage_errors():
    # The CLI maps UsageError to exit code 2 ("fix the command"), not 1 ("the work failed").
    assert issubclass(SeedError, UsageError)


def test_bool_seed_is_refused_with_its_index():
    with pytest.raises(SeedError, match=r"mlp_seeds\[1\] must be an int; got bool: True"):
        validate_mlp_seeds([3, True, 5])


def test_float_seed_is_refused_even_when_integral():
    with pytest.raises(SeedError, match=r"mlp_seeds\[2\] must be an int; got float: 5\.0"):
        validate_mlp_seeds([1, 2, 5.0])


def test_string_seed_is_refused():
    with pytest.raises(SeedError, match=r"mlp_seeds\[0\] must be an int; got str"):
        validate_mlp_seeds(["1"])


def test_negative_seed_is_refused_with_the_range():
    with pytest.raises(SeedError, match=r"mlp_seeds\[1\] = -2 is out of range \[0, 2\*\*63\)"):
        validate_mlp_seeds([1, -2])


def test_seed_at_two_to_the_63_is_refused():
    with pytest.raises(SeedError, match=rf"mlp_seeds\[0\] = {SEED_LIMIT} is out of range"):
        validate_mlp_seeds([SEED_LIMIT])


def test_duplicate_seeds_name_both_indices_and_the_value():
    with pytest.raises(SeedError, match=r"duplicate at indices \[0, 2\]: both = 7"):
        validate_mlp_seeds([7, 8, 7])


def test_wrong_length_names_both_counts():
    with pytest.raises(SeedError, match=r"has 2 entries but --n-mlps is 3"):
        validate_mlp_seeds([1, 2], 3)


LONG = list(range(10, 100_010))


def test_a_long_valid_list_is_returned_as_is():
    out = validate_mlp_seeds(LONG, len(LONG))
    assert out == LONG and out is not LONG


@pytest.mark.parametrize(
    "tail, message",
    [
        ([10], r"duplicate at indices \[0, 100000\]: both = 10"),
        ([True], r"mlp_seeds\[100000\] must be an int; got bool"),
        ([-1], r"mlp_seeds\[100000\] = -1 is out of range"),
        ([SEED_LIMIT], rf"mlp_seeds\[100000\] = {SEED_LIMIT} is out of range"),
        ([2**70], r"mlp_seeds\[100000\] = 1180591620717411303424 is out of range"),
        ([3.0], r"mlp_seeds\[100000\] must be an int; got float"),
    ],
)
def test_a_long_list_names_its_first_bad_entry(tail, message):
    with pytest.raises(SeedError, match=message):
        validate_mlp_seeds(LONG + tail)


def test_a_long_list_with_numpy_ints_is_returned_as_plain_ints():
    out = validate_mlp_seeds(LONG[:-1] + [np.int64(5)])
    assert out == LONG[:-1] + [5] and all(type(v) is int for v in out)


def test_a_long_list_of_the_wrong_length_names_both_counts():
    with pytest.raises(SeedError, match=r"has 100000 entries but --n-mlps is 99999"):
        validate_mlp_seeds(LONG, 99_999)


@pytest.mark.parametrize("value, type_name", [({"a": 1}, "dict"), (5, "int"), ("1,2", "str"), (None, "NoneType")])
def test_a_non_list_is_refused_naming_its_type(value, type_name):
    with pytest.raises(SeedError, match=rf"must be a JSON array of ints; got {type_name}"):
        validate_mlp_seeds(value)


# --- random and derived seed lists --------------------------------------------------------------


def test_random_seeds_are_distinct_int63():
    seeds = random_seeds(2000)
    assert len(seeds) == 2000 and len(set(seeds)) == 2000
    assert all(type(s) is int and 0 <= s < SEED_LIMIT for s in seeds)
    validate_mlp_seeds(seeds, 2000)


def test_random_seeds_do_not_depend_on_numpy_global_state():
    np.random.seed(0)
    a = random_seeds(4)
    np.random.seed(0)
    b = random_seeds(4)
    assert a != b


def test_derived_seeds_are_deterministic():
    assert derived_seeds(12345, 50) == derived_seeds(12345, 50)


def test_derived_seeds_are_pinned():
    # `--seed S` is recorded in metadata and re-bake commands: the list it stands for must never
    # change between versions, or old `bake_command`s would bake different MLPs.
    assert derived_seeds(1, 3) == [4720721261117928063, 8766480278738261043, 1329637740802083942]
    assert derived_seeds(0, 2) == [5874934615388537135, 2488343231644625808]


def test_derived_seeds_are_distinct_valid_int63():
    seeds = derived_seeds(7, 3000)
    assert validate_mlp_seeds(seeds, 3000) == seeds


def test_derived_seeds_differ_between_roots():
    assert derived_seeds(1, 10) != derived_seeds(2, 10)


def test_derived_seeds_for_n_are_a_prefix_of_those_for_more():
    assert derived_seeds(99, 10) == derived_seeds(99, 1000)[:10]


def single_draw_derived_seeds(root: int, n: int) -> list[int]:
    """The definition, one int63 draw at a time (as derived lists were first made)."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(root)))
    out: list[int] = []
    while len(out) < n:
        v = int(rng.integers(0, SEED_LIMIT, dtype=np.int64))
        if v not in out:
            out.append(v)
    return out


@pytest.mark.parametrize("root", [0, 1, 7, 2**32, SEED_LIMIT - 1])
@pytest.mark.parametrize("n", [0, 1, 2, 17, 2000])
def test_derived_seeds_are_the_single_draw_stream(root, n):
    assert derived_seeds(root, n) == single_draw_derived_seeds(root, n)


def test_an_int63_draw_is_one_64_bit_output_shifted_right():
    # Why a batched draw is the single-draw stream: each value of [0, 2**63) takes exactly one 64-bit
    # output of the bit generator (it is that output >> 1), however many are drawn at once.
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(3)))
    raw = np.random.PCG64(np.random.SeedSequence(3)).random_raw(10_000)
    got = np.concatenate([rng.integers(0, SEED_LIMIT, size=k, dtype=np.int64) for k in (1, 999, 1, 4_000, 4_999)])
    assert (got.astype(np.uint64) == raw >> np.uint64(1)).all()


def test_first_distinct_skips_repeats_and_draws_no_further_than_needed():
    stream = iter([5, 5, 3, 5, 7, 3, 9, 5, 11, 12])
    drawn: list[int] = []

    def draw(k: int) -> np.ndarray:
        drawn.extend(next(stream) for _ in range(k))
        return np.array(drawn[-k:], dtype=np.int64)

    assert _first_distinct(draw, 4) == [5, 3, 7, 9]
    assert drawn == [5, 5, 3, 5, 7, 3, 9]


@pytest.mark.parametrize("root", [-1, True, 1.0])
def test_derived_seeds_refuse_a_bad_root(root):
    with pytest.raises(SeedError, match="--seed must be a non-negative int"):
        derived_seeds(root, 3)


# --- estimator seed -----------------------------------------------------------------------------


def test_estimator_seed_matches_the_reference_anchor():
    assert estimator_seed(6717184059027789272) == 2861657444


def test_estimator_seed_is_the_third_spawned_streams_first_word():
    ss = np.random.SeedSequence(424242).spawn(3)[2]
    assert estimator_seed(424242) == int(ss.generate_state(1)[0])


def test_estimator_seed_is_uint32_at_the_int63_edges():
    for s in (0, 1, SEED_LIMIT - 1):
        assert 0 <= estimator_seed(s) < 2**32


EDGE_SEEDS = [0, 1, 2, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**62, SEED_LIMIT - 2, SEED_LIMIT - 1, 6717184059027789272]


def test_estimator_seeds_are_numpys_at_the_edges():
    got = estimator_seeds(EDGE_SEEDS)
    assert got.dtype == np.uint32
    assert got.tolist() == [estimator_seed(s) for s in EDGE_SEEDS]


def test_estimator_seeds_are_numpys_for_a_hundred_thousand_int63s():
    seeds = np.random.default_rng(11).integers(0, SEED_LIMIT, 100_000, dtype=np.int64)
    assert estimator_seeds(seeds).tolist() == [estimator_seed(s) for s in seeds.tolist()]


@pytest.mark.parametrize("seeds", [[-1], np.array([3, -1]), [2**64], [1.5]])
def test_estimator_seeds_refuse_what_seedsequence_refuses(seeds):
    with pytest.raises((ValueError, OverflowError)):
        estimator_seeds(seeds)


def test_estimator_seeds_take_lists_tuples_and_arrays():
    want = [estimator_seed(s) for s in EDGE_SEEDS]
    for seeds in (EDGE_SEEDS, tuple(EDGE_SEEDS), np.array(EDGE_SEEDS, dtype=np.uint64)):
        assert estimator_seeds(seeds).tolist() == want
    assert estimator_seeds([]).tolist() == []


# --- slices and ranges --------------------------------------------------------------------------


def test_last_slice_gets_the_remainder():
    # SPEC §8: the user manual's rule, not whestbench 0.16's floor boundaries (which give 2,3,2,3 for 10/4).
    assert [slice_bounds(k, 3, 7) for k in range(3)] == [(0, 2), (2, 4), (4, 7)]
    assert [slice_bounds(k, 4, 10) for k in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 10)]


@pytest.mark.parametrize(
    "n_mlps, n_slices",
    # more slices than MLPs is refused by the CLI, so only n_slices <= n_mlps
    [(n, k) for n in (1, 2, 5, 7, 10, 64, 101) for k in (1, 2, 3, 4, 7) if k <= n],
)
def test_slices_cover_every_mlp_exactly_once(n_mlps, n_slices):
    bounds = [slice_bounds(k, n_slices, n_mlps) for k in range(n_slices)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n_mlps
    for (_, end), (start, _) in zip(bounds, bounds[1:]):
        assert end == start
    assert all(start < end for start, end in bounds)
    sizes = [end - start for start, end in bounds]
    assert len(set(sizes[:-1])) <= 1 and sizes[-1] >= sizes[0]


def test_check_range_accepts_the_whole_and_a_part():
    assert check_range((0, 5), 5) == (0, 5)
    assert check_range([1, 3], 5) == (1, 3)


@pytest.mark.parametrize("rng", [(0, 0), (3, 2), (-1, 2), (0, 6)])
def test_check_range_refuses_empty_reversed_or_out_of_bounds(rng):
    with pytest.raises(SeedError, match=rf"mlp_range \({rng[0]}, {rng[1]}\) is invalid for n_mlps=5"):
        check_range(rng, 5)


# --- seed list digest ---------------------------------------------------------------------------


def test_seed_list_digest_is_sha256_of_little_endian_int64():
    expected = hashlib.sha256(np.array([1, 2, 3], dtype="<i8").tobytes()).hexdigest()
    assert seed_list_digest([1, 2, 3]) == "sha256:" + expected
    assert seed_list_digest([1, 2, 3]) == "sha256:e2e2033ae7e19d680599d4eb0a1359a2b48ec5baac75066c317fbf85159c54ef"


def test_seed_list_digest_is_stable_across_input_types():
    assert seed_list_digest([5, SEED_LIMIT - 1]) == seed_list_digest(iter((np.int64(5), SEED_LIMIT - 1)))


def test_seed_list_digest_depends_on_order_and_content():
    assert seed_list_digest([1, 2, 3]) != seed_list_digest([3, 2, 1])
    assert seed_list_digest([1, 2, 3]) != seed_list_digest([1, 2, 4])
    assert seed_list_digest([1, 2, 3]) != seed_list_digest([1, 2])
