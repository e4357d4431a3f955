"""The philox sampler on torch matches the numpy reference: same integer stage bit for bit, floats
within a few ulp, sums within arithmetic error, and no knob (chunk size, batch) changes a byte.

The numba kernels' own properties (no torch needed) are in ``test_philox_numba.py``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from whestbench.compute.philox import spec as philox  # noqa: E402
from whestbench.compute.philox import torch_engine as pt  # noqa: E402
from whestbench.compute.mlp import weights_for_seed  # noqa: E402
from whestbench.compute.seeds import spawn_streams  # noqa: E402
from precision_emulation import float32_ulps as ulps  # noqa: E402
from philox_kat import KAT, KEY  # noqa: E402  (tests/philox_kat.py)
from philox_reference import block_sums, block_sums_torch, normals_torch  # noqa: E402

WIDTH, DEPTH, BLOCK = 37, 3, 1024
N_RAGGED = 2 * BLOCK + 301  # three blocks, the last one ragged (and not a whole number of 4-row leaves)
METHODS = ["numba", "torch"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _sample_layer_sums_torch(weights, keys, n_samples, device, *, block_range=None, block_size=BLOCK, engine="auto"):
    """Each MLP's sums over every block (or the aligned ``block_range``): ``block_sums_torch`` per
    block, combined in order, as a bake's units are."""
    nb = philox.block_count(n_samples, block_size)
    b0, b1 = philox.check_block_range(block_range, n_samples, block_size) if block_range is not None else (0, nb)
    per_block = [block_sums_torch(weights, keys, b, n_samples, device, block_size=block_size, engine=engine)
                 for b in range(b0, b1)]
    return [philox.combine_in_order([blk[m] for blk in per_block]) for m in range(len(per_block[0]))]


def _same(a, b) -> bool:
    return (a.count, a.sums.tobytes(), a.sumsq.tobytes()) == (b.count, b.sums.tobytes(), b.sumsq.tobytes())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("counter,key,expected", KAT)
def test_torch_philox_matches_random123_known_answers(counter, key, expected, device):
    c = [torch.tensor([x], dtype=torch.int64, device=device) for x in counter]
    out = pt.philox4x32_torch(c, philox.round_keys(key))
    assert tuple(int(w.item()) for w in out) == expected


@pytest.mark.parametrize("device", DEVICES)
def test_torch_integer_stage_is_bit_identical_to_numpy(device):
    n0 = 2**32 - 40  # crosses into hi32(n) = 1
    keys = np.array([KEY, (1, 2), (0xFFFFFFFF, 0)], dtype=np.uint32)
    got = pt.words_torch(keys, n0, n0 + 80, WIDTH, device).cpu().numpy()
    for b, key in enumerate(keys):
        assert np.array_equal(got[b], philox.philox_words(tuple(int(k) for k in key), n0, n0 + 80, WIDTH))


# u(w) = RN32(RN32(w) * 2**-32 + 2**-33) (docs/sampler-philox.md §3), worked by hand for words at the edges.
UNIFORM_KNOWN_ANSWERS = [
    (0, 2.0**-33),  # the smallest value: never 0, so log(u) is finite
    (1, 3 * 2.0**-33),
    (255, 511 * 2.0**-33),  # exact: 511 needs 9 bits
    (2**24 + 1, 2.0**-8),  # RN32(2**24 + 1) = 2**24 (a tie, to even); 2**-33 is a quarter ulp of 2**-8
    (2**31, 0.5),  # 0.5 + 2**-33 rounds back to 0.5 (its ulp is 2**-24)
    (2**32 - 256, 1 - 2.0**-24),  # 24 significant bits: exact, the largest u below 1
    (2**32 - 1, 1.0),  # RN32(2**32 - 1) = 2**32
]


@pytest.mark.parametrize("device", DEVICES)
def test_torch_uniforms_are_the_specified_float32_values(device):
    words = torch.tensor([w for w, _ in UNIFORM_KNOWN_ANSWERS], dtype=torch.int64, device=device)
    want = np.array([u for _, u in UNIFORM_KNOWN_ANSWERS], dtype=np.float32)
    assert pt.uniforms_torch(words).cpu().numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("device", DEVICES)
def test_torch_uniforms_of_philox_words_are_the_spec_rounded_once(device):
    # The spec in float64, where RN32(w) * 2**-32 + 2**-33 is exact (its bits span 2**0 down to
    # 2**-33: 34 of float64's 53), then one rounding to float32: the spec's one float32 rounding.
    words = philox.philox_words(KEY, 0, 64, 64)
    want = (words.astype(np.float32).astype(np.float64) * 2.0**-32 + 2.0**-33).astype(np.float32)
    got = pt.uniforms_torch(pt.words_torch(np.array([KEY]), 0, 64, 64, device)[0]).cpu().numpy()
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("method,device", [("numba", "cpu")] + [("torch", d) for d in DEVICES])
def test_normals_are_within_a_few_ulp_of_numpy(method, device):
    # log/cos/sin are each within ~1-2 ulp of exact on every platform we know (numpy's SIMD log
    # is the worst at 4); 8 ulp leaves room for a different libm without hiding a wrong formula.
    # (Rare values next to a zero of cos/sin can be further apart in ulps: docs/sampler-philox.md §3.)
    ref = philox.normals(KEY, 1000, 3000, WIDTH)
    got = normals_torch(KEY, 1000, 3000, WIDTH, device, engine=method).cpu().numpy()
    assert got.shape == ref.shape and got.dtype == np.float32
    assert ulps(got, ref).max() <= 8


def test_torch_tree_is_bit_identical_to_the_reference_tree():
    h = np.maximum(np.random.default_rng(3).standard_normal((2, 256, 29)), 0).astype(np.float32)
    got = pt._tree_groups(torch.from_numpy(h), torch.float64)[:, 0].numpy()
    for b in range(2):
        assert got[b].tobytes() == philox.pairwise_colsum(h[b].astype(np.float64)).tobytes()


# --- block sums ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch():
    seeds = [11, 12, 13]
    weights = np.stack([weights_for_seed(s, WIDTH, DEPTH) for s in seeds])  # (3, depth, w, w)
    keys = np.array([philox.philox_key(spawn_streams(s)[1]) for s in seeds], dtype=np.uint32)
    return weights, keys


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("block", [0, 2])  # a full block and the ragged last one
def test_block_sums_torch_agree_with_numpy_within_arithmetic_error(batch, method, block):
    # Same samples, so the only differences are ulps in the float transform and in sgemm (MKL vs
    # OpenBLAS): ~1e-8 relative. A nearly dead neuron's tiny sum can move by ~1e-6 relative when
    # one activation a hair from zero lands on the other side of the ReLU, hence the absolute
    # floor on the mean (1e-8, a hundredth of the precision gate). One wrong sample would be ~1e-3.
    weights, keys = batch
    got = block_sums_torch(weights, keys, block, N_RAGGED, "cpu", block_size=BLOCK, engine=method)
    for b in range(len(keys)):
        ref = block_sums(weights[b], tuple(int(k) for k in keys[b]), block, N_RAGGED, block_size=BLOCK)
        assert got[b].count == ref.count
        n = ref.count
        np.testing.assert_allclose(got[b].sums / n, ref.sums / n, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(got[b].sumsq / n, ref.sumsq / n, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", METHODS)
def test_chunk_size_never_changes_a_byte(batch, method):
    weights, keys = batch
    runs = [
        block_sums_torch(weights, keys, 2, N_RAGGED, "cpu", block_size=BLOCK, chunk_size=c, engine=method)
        for c in (64, 100, 256, 1024, 10**6)
    ]
    for run in runs[1:]:
        assert all(_same(a, b) for a, b in zip(run, runs[0]))


@pytest.mark.parametrize("method", METHODS)
def test_batch_composition_never_changes_a_byte(batch, method):
    weights, keys = batch

    def run(w, k):
        return block_sums_torch(w, k, 0, N_RAGGED, "cpu", block_size=BLOCK, engine=method)

    together = run(weights, keys)
    for b in range(len(keys)):
        assert _same(run(weights[b : b + 1], keys[b : b + 1])[0], together[b])
    reordered = run(weights[::-1].copy(), keys[::-1].copy())
    assert all(_same(a, b) for a, b in zip(reordered[::-1], together))


def test_torch_thread_count_never_changes_a_byte(batch):
    weights, keys = batch
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(block_sums_torch(weights, keys, 0, N_RAGGED, "cpu", block_size=BLOCK))
    finally:
        torch.set_num_threads(before)
    assert all(_same(a, b) for a, b in zip(*runs))


def test_torch_blocks_combine_like_the_reference(batch):
    weights, keys = batch
    blocks = [
        block_sums_torch(weights[:1], keys[:1], b, N_RAGGED, "cpu", block_size=BLOCK)[0] for b in range(3)
    ]
    whole = philox.combine_in_order(blocks)
    units = [philox.combine_in_order(blocks[:2]), blocks[2]]
    assert _same(philox.combine_in_order(units), whole) and whole.count == N_RAGGED


def test_units_of_a_torch_bake_combine_to_the_whole_bit_for_bit(batch):
    weights, keys = batch
    whole = _sample_layer_sums_torch(weights, keys, N_RAGGED, "cpu", block_size=BLOCK)
    units = [
        _sample_layer_sums_torch(weights, keys, N_RAGGED, "cpu", block_range=r, block_size=BLOCK)
        for r in philox.unit_block_ranges(N_RAGGED, 2, block_size=BLOCK)
    ]
    for m in range(len(keys)):
        assert _same(philox.combine_in_order([u[m] for u in units]), whole[m])


def test_layer1_means_match_the_exact_value_within_five_standard_errors(batch):
    weights, keys = batch
    n = 16 * BLOCK
    sums = _sample_layer_sums_torch(weights, keys, n, "cpu", block_size=BLOCK)
    for m, s in enumerate(sums):
        sigma = np.linalg.norm(weights[m, 0].astype(np.float64), axis=0)  # (width,)
        exact = sigma / np.sqrt(2 * np.pi)
        se = sigma * np.sqrt(0.5 - 1 / (2 * np.pi)) / np.sqrt(n)
        assert np.all(np.abs(s.sums[0] / n - exact) < 5 * se)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_sums_match_cpu_on_the_same_samples_and_ignore_chunking(batch):
    weights, keys = batch
    cpu = block_sums_torch(weights, keys, 2, N_RAGGED, "cpu", block_size=BLOCK, engine="torch")
    runs = [
        block_sums_torch(weights, keys, 2, N_RAGGED, "cuda", block_size=BLOCK, chunk_size=chunk)
        for chunk in (64, 1024)
    ]
    assert all(_same(a, b) for a, b in zip(*runs))
    for a, b in zip(runs[0], cpu):  # same samples: arithmetic differences only (see above)
        np.testing.assert_allclose(a.sums / a.count, b.sums / b.count, rtol=1e-6, atol=1e-8)


# --- arguments ----------------------------------------------------------------------------------


def test_one_key_per_mlp_is_required(batch):
    weights, keys = batch
    with pytest.raises(ValueError, match="one key per MLP"):
        block_sums_torch(weights, keys[:2], 0, N_RAGGED, "cpu", block_size=BLOCK)


def test_weights_must_be_a_float32_batch(batch):
    weights, keys = batch
    with pytest.raises(ValueError, match="float32"):
        block_sums_torch(weights.astype(np.float64), keys, 0, N_RAGGED, "cpu", block_size=BLOCK)


def test_the_numba_engine_is_cpu_only():
    with pytest.raises(ValueError, match="CPU only"):
        normals_torch(KEY, 0, 4, 8, "meta", engine="numba")


def test_kernel_name_separates_what_changes_the_numbers():
    names = {pt.kernel_name("cpu", "numba"), pt.kernel_name("cpu", "torch"), pt.kernel_name("mps", "torch")}
    assert len(names) == 3
    assert pt.kernel_name("cpu").endswith("-numba2-fp32-fp64acc") and "fp32acc" in pt.kernel_name("mps")


def test_numba_load_kernels_compiles_the_specialisations_a_cpu_bake_then_uses():
    """``philox_numba.load_kernels`` (run by a bake before its units start) must load what the units
    call, or they would compile again, silently, on a cold cache."""
    from whestbench.compute.philox import numba_kernels as pn

    pn.load_kernels()
    kernels = (pn._normals_rows, pn._relu_tree_plain, pn._relu_tree_sq)
    loaded = [list(k.signatures) for k in kernels]
    weights = np.stack([weights_for_seed(s, WIDTH, DEPTH) for s in (1, 2)])
    _sample_layer_sums_torch(weights, np.array([[1, 2], [3, 4]], dtype=np.uint32), N_RAGGED, "cpu",
                             block_size=BLOCK, engine="numba")
    assert [list(k.signatures) for k in kernels] == loaded
    assert all(loaded)
