"""The philox sampler's numpy reference: Philox itself, the sample layout, the float transform, the
pairwise sums and how block results combine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from whestbench.compute.philox import spec as philox
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.seeds import spawn_streams
from philox_kat import KAT, KEY  # tests/philox_kat.py
from philox_reference import block_sums, sample_layer_sums_philox  # tests/philox_reference.py


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox4x32_matches_random123_known_answers(counter, key, expected):
    out = philox.philox4x32([np.array([c], dtype=np.uint32) for c in counter], key)
    assert tuple(int(w[0]) for w in out) == expected


def test_key_is_two_uint32_words_of_the_sample_stream():
    sample_ss = spawn_streams(12345)[1]
    expected = sample_ss.generate_state(2, dtype=np.uint32)
    assert philox.philox_key(sample_ss) == (int(expected[0]), int(expected[1]))


def test_word_4g_plus_i_of_sample_n_is_philox_of_counter_lo_hi_g_0():
    n0 = 2**32 - 2  # crosses into hi32(n) = 1
    words = philox.philox_words(KEY, n0, n0 + 4, 9)  # 3 groups
    assert words.shape == (4, 12) and words.dtype == np.uint32
    for row, n in enumerate(range(n0, n0 + 4)):
        for g in range(3):
            c = (n & 0xFFFFFFFF, n >> 32, g, 0)
            out = philox.philox4x32([np.array([x], dtype=np.uint32) for x in c], KEY)
            assert [int(w[0]) for w in out] == list(words[row, 4 * g : 4 * g + 4])


def test_a_normal_depends_only_on_key_sample_and_neuron():
    whole = philox.normals(KEY, 0, 50, 40)
    assert np.array_equal(philox.normals(KEY, 17, 31, 40), whole[17:31])
    assert np.array_equal(philox.normals(KEY, 0, 50, 37), whole[:, :37])  # width only truncates


def test_uniforms_lie_in_zero_one_and_never_reach_zero():
    u = philox.uniforms(np.array([0, 1, 2**31, 2**32 - 129, 2**32 - 1], dtype=np.uint32))
    assert u.dtype == np.float32
    assert u[0] == np.float32(2.0**-33) and u[-1] == np.float32(1.0)
    assert np.all(u > 0) and np.all(u <= 1)


def test_box_muller_pairs_adjacent_words_into_cos_then_sin():
    words = np.array([[2**31, 2**30]], dtype=np.uint32)  # u1 ~ 1/2, u2 ~ 1/4: theta ~ pi/2
    z = philox.box_muller(words)
    u1, u2 = philox.uniforms(words[0])
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    assert z[0, 0] == r * np.cos(philox.TWO_PI * u2)
    assert z[0, 1] == r * np.sin(philox.TWO_PI * u2)
    assert abs(z[0, 1] - math.sqrt(2 * math.log(2))) < 1e-6


def test_a_million_normals_look_standard():
    z = philox.normals(KEY, 0, 2**15, 32).ravel().astype(np.float64)  # 1,048,576 draws
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    # Kolmogorov-Smirnov distance on a grid; 1.63/sqrt(n) is the 1% critical value.
    z.sort()
    grid = np.linspace(-4, 4, 801)
    emp = np.searchsorted(z, grid, side="right") / n
    phi = np.array([0.5 * (1 + math.erf(t / math.sqrt(2))) for t in grid])
    assert np.max(np.abs(emp - phi)) < 1.63 / math.sqrt(n)
    assert np.max(np.abs(z)) < 6.8  # the uniform's floor 2**-33 bounds |z| by sqrt(66 ln 2)


# --- pairwise sums ------------------------------------------------------------------------------


def test_pairwise_colsum_is_the_zero_padded_binary_tree():
    a = np.array([[1.0], [2.0**-53], [2.0**-53], [2.0**-53], [2.0**-52]])
    # Five rows pad to eight: ((a0 + a1) + (a2 + a3)) + ((a4 + 0) + (0 + 0)).
    expected = ((1.0 + 2.0**-53) + (2.0**-53 + 2.0**-53)) + 2.0**-52
    assert philox.pairwise_colsum(a)[0] == expected == 1.0 + 2.0**-51
    assert ((((1.0 + 2.0**-53) + 2.0**-53) + 2.0**-53) + 2.0**-52) != expected  # the order is visible


@pytest.mark.parametrize("piece", [1, 2, 4, 8, 32, 64])
def test_pairwise_stack_of_aligned_pieces_equals_the_whole_tree(piece):
    a = np.random.default_rng(0).random((45, 3)) * 10.0 ** np.arange(-3, 0)  # (45, 3)
    stack = philox.PairwiseStack()
    for s in range(0, 45, piece):
        chunk = a[s : s + piece]
        stack.push(philox.pairwise_colsum(chunk), philox.level_of(len(chunk)))
    assert (stack.value() + 0.0).tobytes() == (philox.pairwise_colsum(a) + 0.0).tobytes()


def test_pairwise_stack_rejects_a_misaligned_push():
    stack = philox.PairwiseStack()
    stack.push(np.zeros(1), 0)
    with pytest.raises(ValueError, match="aligned"):
        stack.push(np.zeros(1), 1)


# --- blocks -------------------------------------------------------------------------------------

WIDTH, DEPTH, BLOCK = 37, 3, 256
N_RAGGED = 5 * BLOCK + 77  # six blocks, the last one ragged


@pytest.fixture(scope="module")
def weights():
    return weights_for_seed(7, WIDTH, DEPTH)


@pytest.fixture(scope="module")
def sample_ss():
    return spawn_streams(7)[1]


@pytest.fixture(scope="module")
def whole(weights, sample_ss):
    return sample_layer_sums_philox(weights, sample_ss, N_RAGGED, block_size=BLOCK)


def _same(a, b):
    return (a.count, a.sums.tobytes(), a.sumsq.tobytes()) == (b.count, b.sums.tobytes(), b.sumsq.tobytes())


def test_block_sums_covers_the_blocks_samples_and_the_last_block_is_ragged(weights):
    s = block_sums(weights, KEY, 5, N_RAGGED, block_size=BLOCK)
    assert s.count == 77 and s.sums.shape == (DEPTH, WIDTH) and s.sumsq.shape == (DEPTH, WIDTH)
    assert s.sums.dtype == np.float64 and np.all(s.sums >= 0)


def test_block_sums_equal_the_definition_on_the_blocks_inputs(weights):
    s = block_sums(weights, KEY, 1, N_RAGGED, block_size=BLOCK)
    h = philox.normals(KEY, BLOCK, 2 * BLOCK, WIDTH)
    for layer in range(DEPTH):
        h = np.maximum(h @ weights[layer], np.float32(0.0))
        np.testing.assert_allclose(s.sums[layer], h.astype(np.float64).sum(axis=0), rtol=1e-12)
        np.testing.assert_allclose(s.sumsq[layer], (h.astype(np.float64) ** 2).sum(axis=0), rtol=1e-12)


def test_per_block_results_combine_to_the_whole_range_bit_for_bit(weights, sample_ss, whole):
    key = philox.philox_key(sample_ss)
    blocks = [block_sums(weights, key, b, N_RAGGED, block_size=BLOCK) for b in range(6)]
    assert _same(philox.combine_in_order(blocks), whole)


@pytest.mark.parametrize("blocks_per_unit", [1, 2, 4, 8])
def test_aligned_units_combine_to_the_whole_range_bit_for_bit(weights, sample_ss, whole, blocks_per_unit):
    units = philox.unit_block_ranges(N_RAGGED, blocks_per_unit, block_size=BLOCK)
    parts = [
        sample_layer_sums_philox(weights, sample_ss, N_RAGGED, block_range=r, block_size=BLOCK)
        for r in units
    ]
    assert _same(philox.combine_in_order(parts), whole)


def test_units_of_units_combine_too(weights, sample_ss, whole):
    key = philox.philox_key(sample_ss)
    blocks = [block_sums(weights, key, b, N_RAGGED, block_size=BLOCK) for b in range(6)]
    pairs = [philox.combine_in_order(blocks[i : i + 2]) for i in range(0, 6, 2)]
    assert _same(philox.combine_in_order([philox.combine_in_order(pairs[:2]), pairs[2]]), whole)


def test_combine_in_order_rejects_a_part_that_is_not_an_aligned_power_of_two(weights):
    b = [block_sums(weights, KEY, i, N_RAGGED, block_size=BLOCK) for i in range(3)]
    with pytest.raises(ValueError, match="power of two"):
        philox.combine_in_order([b[0], philox.combine_in_order(b[1:3]), b[0]])  # 1 block, then 2 at offset 1


@pytest.mark.parametrize("block_range", [(1, 3), (0, 3), (2, 5)])
def test_a_block_range_must_be_one_aligned_subtree(weights, sample_ss, block_range):
    with pytest.raises(ValueError, match="unit_block_ranges"):
        sample_layer_sums_philox(
            weights, sample_ss, N_RAGGED, block_range=block_range, block_size=BLOCK
        )


def test_a_range_may_end_ragged_at_the_end_of_the_data():
    assert philox.check_block_range((4, 6), N_RAGGED, BLOCK) == (4, 6)  # blocks 4..7 minus the missing 6, 7


def test_unit_block_ranges_are_aligned_runs_covering_every_block():
    assert philox.unit_block_ranges(N_RAGGED, 4, block_size=BLOCK) == [(0, 4), (4, 6)]
    with pytest.raises(ValueError, match="power of two"):
        philox.unit_block_ranges(N_RAGGED, 3, block_size=BLOCK)


def test_on_block_reports_every_sample_once(weights, sample_ss):
    seen = []
    sample_layer_sums_philox(weights, sample_ss, N_RAGGED, on_block=seen.append, block_size=BLOCK)
    assert seen == [BLOCK] * 5 + [77]


def test_an_exact_zero_sum_is_stored_as_positive_zero():
    # Padding and skipped subtrees may flip the sign of an exact zero; the final +0.0 erases it.
    from whestbench.compute.stats import LayerSums

    negative_zero = LayerSums(sums=np.array([[-0.0, 1.0]]), sumsq=np.array([[-0.0, 1.0]]), count=4)
    out = philox.combine_in_order([negative_zero])
    assert not np.any(np.signbit(out.sums)) and not np.any(np.signbit(out.sumsq))


def test_layer1_means_match_the_exact_value_within_five_standard_errors(weights, sample_ss):
    n = 16 * 4096
    s = sample_layer_sums_philox(weights, sample_ss, n, block_size=4096)
    sigma = np.linalg.norm(weights[0].astype(np.float64), axis=0)  # (width,) std of x @ W1[:, j]
    exact = sigma / math.sqrt(2 * math.pi)
    se = sigma * math.sqrt(0.5 - 1 / (2 * math.pi)) / math.sqrt(n)  # std of relu(sigma Z) / sqrt(n)
    assert np.all(np.abs(s.sums[0] / n - exact) < 5 * se)


def test_block_size_must_be_a_power_of_two(weights):
    with pytest.raises(ValueError, match="power of two"):
        block_sums(weights, KEY, 0, 1000, block_size=1000)
