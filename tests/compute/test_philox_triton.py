"""The fused Triton kernel computes the philox reference's tile sums: same samples, same tree, fp32
arithmetic; its split precisions pass the precision gate; and no launch knob changes a byte.

Without a GPU the kernel runs in Triton's interpreter (numpy underneath), switched on for this
module's import of the kernel module and for its tests only (``tests/helpers/triton_interp.py``). The
interpreter is slow, so the kernel tests use tiny shapes; the precision gate runs the split
arithmetic in numpy (``emulate_matmul``), which is what the interpreter computes too. On a CUDA
machine the same tests run the compiled kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401
from whestbench.compute.philox import spec as philox  # noqa: E402
from whestbench.compute.mlp import weights_for_seed  # noqa: E402
from whestbench.compute.seeds import spawn_streams  # noqa: E402
from whestbench.compute import precision as prec  # noqa: E402

ptt = kernel_module()

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
from philox_kat import KEY  # noqa: E402  (tests/philox_kat.py)
from philox_reference import sample_layer_sums_philox  # noqa: E402  (tests/philox_reference.py)
import precision_emulation as emu  # noqa: E402  (tests/precision_emulation.py)


def tiny(rows: int = 32, precision: str = "ieee", **kw) -> ptt.KernelConfig:
    """The smallest blocks tl.dot accepts: many K and N steps even at width 37."""
    return ptt.KernelConfig(
        rows=rows, block_n=16, block_k=16, group_block=4, sum_block=16, precision=precision, num_warps=4, **kw
    )


def reference_tile_sums(weights, key, n0, rows, n_end, matmul) -> np.ndarray:
    """(2·depth, width) fp64: one tile through numpy -- philox.normals, ``matmul`` per layer, ReLU,
    and philox.pairwise_colsum over the tile's rows of every layer, then of its squares (rows past
    ``n_end`` are zero inputs)."""
    depth, width, _ = weights.shape
    x = np.zeros((rows, width), dtype=np.float32)
    valid = max(0, min(rows, n_end - n0))
    x[:valid] = philox.normals(key, n0, n0 + valid, width)
    out = np.empty((2 * depth, width))
    for layer in range(depth):
        x = np.maximum(matmul(x, weights[layer]), np.float32(0.0))  # (rows, width) float32
        out[layer] = philox.pairwise_colsum(x.astype(np.float64))
        out[depth + layer] = philox.pairwise_colsum(x.astype(np.float64) ** 2)
    return out


# Tolerance of the fp32 comparisons below. Kernel and numpy compute the same fp32 dot products of the
# same inputs in different summation orders (the kernel in BLOCK_K steps), so an activation may differ
# by a few ulps of sum|a_k w_k| (the bound is ~K * 2**-24 ~ 4e-6 relative for K <= 64, typically
# 1e-7); after at most three layers and fp64 sums of non-negative values, 2e-5 relative is ample,
# while a wrong sample, a wrong row or a dropped split term would miss by 1e-3 or more.
RTOL, ATOL = 2e-5, 1e-6


# --- one tile ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "width,depth,rows", [(8, 2, 16), (16, 3, 32), (37, 3, 64)], ids=["w8-d2-r16", "w16-d3-r32", "w37-d3-r64"]
)
def test_tile_sums_are_the_reference_tree_of_the_same_tile(width, depth, rows):
    weights = weights_for_seed(7, width, depth)
    n_first, n_tiles = 2 * rows, 3
    n_end = n_first + 2 * rows + rows // 2 + 3  # the last tile is ragged
    got = ptt.tile_sums_triton(weights[None], [KEY], n_first, n_tiles, n_end, config=tiny(rows), device=DEVICE)
    got = got.cpu().numpy()
    assert got.shape == (1, n_tiles, 2 * depth, width) and got.dtype == np.float64
    for t in range(n_tiles):
        want = reference_tile_sums(weights, KEY, n_first + t * rows, rows, n_end, np.matmul)
        np.testing.assert_allclose(got[0, t], want, rtol=RTOL, atol=ATOL)


def test_samples_past_the_end_are_zero_rows():
    weights = weights_for_seed(3, 16, 2)
    cfg = tiny(32)
    whole = ptt.tile_sums_triton(weights[None], [KEY], 0, 1, 32, config=cfg, device=DEVICE).cpu().numpy()
    head = ptt.tile_sums_triton(weights[None], [KEY], 0, 1, 20, config=cfg, device=DEVICE).cpu().numpy()
    want = reference_tile_sums(weights, KEY, 0, 32, 20, np.matmul)
    np.testing.assert_allclose(head[0, 0], want, rtol=RTOL, atol=ATOL)
    # Zeroing leaves of a tree of non-negative values can only lower it (rounding is monotone).
    assert np.all(head[0, 0] <= whole[0, 0]) and np.any(head[0, 0] < whole[0, 0])


@pytest.mark.parametrize("precision", ["3xtf32", "4xtf32", "3xfp16", "4xfp16"])
def test_split_precisions_compute_their_emulated_arithmetic(precision):
    # In the interpreter tl.dot multiplies the parts in fp32 (exact products) and accumulates in fp32:
    # what emulate_matmul does, up to the order. A dropped or mis-scaled part would be off by 1e-4.
    width, depth, rows = 37, 3, 32
    weights = weights_for_seed(11, width, depth)
    got = ptt.tile_sums_triton(weights[None], [KEY], 0, 2, 2 * rows, config=tiny(rows, precision), device=DEVICE)
    got = got.cpu().numpy()
    for t in range(2):
        want = reference_tile_sums(
            weights, KEY, t * rows, rows, 2 * rows, lambda a, b: emu.emulate_matmul(a, b, precision)
        )
        np.testing.assert_allclose(got[0, t], want, rtol=RTOL, atol=ATOL)


# --- invariance -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch():
    """Two MLPs of width 37, depth 2, with their keys: the unit of the invariance tests."""
    seeds = [101, 202]
    weights = np.stack([weights_for_seed(s, 37, 2) for s in seeds])
    keys = [philox.philox_key(spawn_streams(s)[1]) for s in seeds]
    return weights, keys


@pytest.fixture(scope="module")
def baseline(batch):
    """Both MLPs' sums over three tiles of 16 rows, the last one ragged, in one launch."""
    weights, keys = batch
    return ptt.tile_sums_triton(weights, keys, 0, 3, 40, config=tiny(16), device=DEVICE).cpu().numpy()


def test_mlps_per_launch_never_change_a_byte(batch, baseline):
    weights, keys = batch
    alone = ptt.tile_sums_triton(weights[1:], keys[1:], 0, 3, 40, config=tiny(16), device=DEVICE)
    assert alone.cpu().numpy().tobytes() == baseline[1:].tobytes()


@pytest.mark.parametrize("n_programs", [1, 5])
def test_grid_size_never_changes_a_byte(batch, baseline, n_programs):
    weights, keys = batch
    got = ptt.tile_sums_triton(weights, keys, 0, 3, 40, config=tiny(16), n_programs=n_programs, device=DEVICE)
    assert got.cpu().numpy().tobytes() == baseline.tobytes()


def test_splitting_the_tiles_over_launches_never_changes_a_byte(batch, baseline):
    weights, keys = batch
    first = ptt.tile_sums_triton(weights, keys, 0, 1, 40, config=tiny(16), device=DEVICE).cpu().numpy()
    rest = ptt.tile_sums_triton(weights, keys, 16, 2, 40, config=tiny(16), device=DEVICE).cpu().numpy()
    assert np.concatenate([first, rest], axis=1).tobytes() == baseline.tobytes()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: compiled kernels only")
@pytest.mark.parametrize("knob", [{"num_warps": 8}, {"num_stages": 3}, {"rows": 32}, {"block_n": 32}])
def test_speed_knobs_never_change_a_byte_on_a_gpu(batch, knob):
    # If rows or block_n pass here, they can leave KernelConfig.identity().
    import dataclasses

    weights, keys = batch
    base = tiny(16)
    one = ptt.range_sums_triton(weights, keys, (0, 4), 100, config=base, block_size=32, device=DEVICE)
    other = ptt.range_sums_triton(
        weights, keys, (0, 4), 100, config=dataclasses.replace(base, **knob), block_size=32, device=DEVICE
    )
    for a, b in zip(one, other):
        assert a.sums.tobytes() == b.sums.tobytes() and a.sumsq.tobytes() == b.sumsq.tobytes()


N_SAMPLES, BLOCK = 100, 32  # four blocks of two tiles, the last block ragged (one tile of 4 samples)


def test_block_ranges_combine_to_the_whole_bit_for_bit(batch):
    weights, keys = batch[0][:1], batch[1][:1]
    kw = {"config": tiny(16), "block_size": BLOCK, "device": DEVICE}
    whole = ptt.range_sums_triton(weights, keys, (0, 4), N_SAMPLES, **kw)[0]
    halves = [ptt.range_sums_triton(weights, keys, r, N_SAMPLES, **kw)[0] for r in [(0, 2), (2, 4)]]
    blocks = [ptt.range_sums_triton(weights, keys, (b, b + 1), N_SAMPLES, **kw)[0] for b in range(4)]
    for parts in (halves, blocks):
        got = philox.combine_in_order(parts)
        assert got.count == whole.count == N_SAMPLES
        assert got.sums.tobytes() == whole.sums.tobytes()
        assert got.sumsq.tobytes() == whole.sumsq.tobytes()


def test_combined_tiles_equal_the_numpy_sampler_within_arithmetic_error(batch):
    weights, keys = batch
    got = ptt.range_sums_triton(weights, keys, (0, 4), N_SAMPLES, config=tiny(16), block_size=BLOCK, device=DEVICE)
    for m, seed in enumerate([101, 202]):
        want = sample_layer_sums_philox(weights[m], spawn_streams(seed)[1], N_SAMPLES, block_size=BLOCK)
        assert got[m].count == want.count
        np.testing.assert_allclose(got[m].sums, want.sums, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got[m].sumsq, want.sumsq, rtol=RTOL, atol=ATOL)


# --- arguments --------------------------------------------------------------------------------------


def test_tiles_must_start_on_a_multiple_of_rows(batch):
    weights, keys = batch
    with pytest.raises(ValueError, match="multiple of rows"):
        ptt.tile_sums_triton(weights, keys, 8, 1, 40, config=tiny(16), device=DEVICE)


def test_one_key_per_mlp_is_required(batch):
    weights, keys = batch
    with pytest.raises(ValueError, match="one key per MLP"):
        ptt.tile_sums_triton(weights, keys[:1], 0, 1, 40, config=tiny(16), device=DEVICE)


@pytest.mark.parametrize(
    "field,value,match", [("rows", 24, "power of two"), ("block_k", 8, ">= 16"), ("precision", "tf32", "one of")]
)
def test_kernel_config_rejects_shapes_the_kernel_cannot_run(field, value, match):
    kw = {"rows": 32, "block_n": 16, "block_k": 16, "group_block": 4, "sum_block": 16, field: value}
    with pytest.raises(ValueError, match=match):
        ptt.KernelConfig(**kw)


def test_padded_width_is_a_multiple_of_every_block():
    cfg = ptt.default_config(37)
    assert cfg.padded_width(37) % cfg.quantum == 0 and cfg.padded_width(37) >= 37
    assert ptt.default_config(256).padded_width(256) == 256
    assert ptt.default_config(1024).padded_width(1024) == 1024
