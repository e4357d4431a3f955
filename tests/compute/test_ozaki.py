"""The integer (Ozaki) arithmetic: its numpy specification (``compute/philox/ozaki_spec.py``) against
fp64 and the precision gate, under both accumulator models; and its Triton kernel
(``compute/philox/ozaki.py``) against the specification, byte for byte, in Triton's interpreter
without a GPU (``tests/helpers/triton_interp.py``), with the column sums invariant to batch, tile and grid.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401
from whestbench.compute import precision as prec  # noqa: E402
from whestbench.compute.mlp import weights_for_seed  # noqa: E402
from whestbench.compute.philox import ozaki_spec as oz  # noqa: E402
from whestbench.compute.philox import spec as philox  # noqa: E402
import precision_emulation as emu  # noqa: E402  (tests/precision_emulation.py)

ok = kernel_module("whestbench.compute.philox.ozaki", "_ozaki_tile_kernel")
ce = kernel_module("whestbench.compute.philox.cuda_engine", "_relu_tree_kernel")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# --- the specification ---------------------------------------------------------------------------


def test_digits_are_signed_int8_centred_and_rebuild_the_value_to_28_bits():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 200)) * np.exp(rng.uniform(-8, 8, (64, 1)))).astype(np.float32)
    x[3] = 0.0
    x[5, :7] = 0.0
    e = oz.exponents(x, axis=1)
    d = oz.digits(x, e)
    assert d.dtype == np.int8 and np.abs(d).max() <= 64
    rebuilt = sum(d[i].astype(np.float64) * 128.0**-i for i in range(4)) * np.ldexp(1.0, e - 6).astype(np.float64)
    bound = np.ldexp(1.0, e - 6) * 0.5 * 128.0**-3  # half a unit of the last digit
    assert np.all(np.abs(rebuilt - x) <= bound)
    top = np.abs(x).max(axis=1, keepdims=True)
    live = top > 0
    assert np.all(top < np.ldexp(1.0, e)) and np.all(top[live] >= np.ldexp(1.0, e - 1)[live])  # the tightest scale
    assert np.all(d[:, 3] == 0)  # a zero row has zero digits
    # after the first, the digits are centred: their mean is ~0 even for all-positive values (ReLU)
    pos = oz.digits(np.abs(x), oz.exponents(np.abs(x), axis=1))
    assert abs(pos[1:].astype(np.float64).mean()) < 1.0


def test_rne_rounds_ties_to_even():
    y = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 63.49, -63.5, 1e-30], dtype=np.float32)
    assert oz.rne(y).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 63.0, -64.0, 0.0]


@pytest.mark.parametrize("n_digits", [3, 4])
def test_the_fast_block_integer_is_the_pairwise_definition(n_digits):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((24, 96)).astype(np.float32)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    da = oz.digits(a, oz.exponents(a, axis=1), n_digits)
    dw, _ = oz.split_weights(w, n_digits)
    want = oz.pair_sum(da, dw, n_digits)
    assert np.array_equal(oz.block_integer(da, dw, n_digits), want.astype(np.float64))
    assert np.abs(want).max() < 2**53


def test_the_accumulator_model_cannot_change_a_bit_of_the_integer_arithmetic():
    # Integer sums (|partial sums| < 2**24 per pair within a scale block) leave the truncating,
    # round-toward-zero accumulator nothing to drop: the hardware model gives the same bytes, so the
    # gate's verdict is the same under both models.
    weights = weights_for_seed(12345, 256, 8)
    x = np.random.default_rng(1).standard_normal((32, 256), dtype=np.float32)
    exact = oz.layer_means(weights, x, oz.DEFAULT_SCALE_K)
    hard = oz.layer_means(weights, x, oz.DEFAULT_SCALE_K, block_integer=emu.hardware_block_integer)
    assert np.array_equal(exact.view(np.int64), hard.view(np.int64))


def _gate(width, depth, n, **kw):
    weights = weights_for_seed(12345, width, depth)
    x = np.random.default_rng(1).standard_normal((n, width), dtype=np.float32)
    return prec.gate_figures(oz.layer_means(weights, x, **kw), emu.layer_means(weights, x, "fp64"))


def test_four_digits_pass_the_gate_at_256x8_and_three_fail():
    # identical samples; 4096 rows (the arithmetic's deviation, not Monte-Carlo noise, is measured).
    # Measured: 4 digits 3.2e-8 (max) / 1.0e-9 (bias); 3 digits 7.1e-6 / 1.6e-7.
    four = _gate(256, 8, 1 << 12, scale_k=oz.DEFAULT_SCALE_K)
    assert prec.gate_passes(*four) and four[0] < prec.GATE_MAX_ABS / 10, four
    three = _gate(256, 8, 1 << 12, scale_k=oz.DEFAULT_SCALE_K, n_digits=3)
    assert not prec.gate_passes(*three) and three[0] > 3 * prec.GATE_MAX_ABS, three


@pytest.mark.slow  # minutes: 1024x16 in numpy
def test_four_digits_pass_the_gate_at_1024x16_with_scale_blocks():
    four = _gate(1024, 16, 1 << 10, scale_k=oz.DEFAULT_SCALE_K)
    assert prec.gate_passes(*four) and four[0] < prec.GATE_MAX_ABS / 5, four


# --- the kernel against the specification ---------------------------------------------------------


def _tiny(width):
    """Small blocks: several scale blocks and K steps even at tiny widths; big enough for the interpreter."""
    block_n = 32 if width <= 64 else 128
    return ok.OzakiConfig(rows=16, block_n=block_n, block_k=32, group_block=4 if width <= 64 else 16,
                          sum_block=16 if width <= 64 else 128)


def _spec_tiles(weights, key, n_first, n_tiles, n_end, config):
    """The specification's per-tile sums on the kernel's own inputs (``cuda_engine.sampler_normals``: the
    same Box-Muller code; the sampler is checked against numpy in test_philox_cuda.py)."""
    width = weights.shape[2]
    rows = config.rows
    x = np.zeros((n_tiles * rows, width), dtype=np.float32)
    live = max(0, min(n_tiles * rows, n_end - n_first))
    x[:live] = ce.sampler_normals(key, n_first, n_first + live, width, DEVICE)
    layers = [oz.split_weights(w, config.digits) for w in weights]
    return oz.forward_sums(x, layers, config.block_n, rows, n_digits=config.digits)


KEYS = [(1, 2), (0xDEADBEEF, 7)]


@pytest.mark.parametrize("width, depth", [(37, 3), (256, 2)])
def test_kernel_tiles_equal_the_specification_byte_for_byte(width, depth):
    config = _tiny(width)
    weights = np.stack([weights_for_seed(s, width, depth) for s in (3, 4)])
    n_end = 2 * config.rows - 5  # a ragged tail: zero rows
    got = ok.tile_sums_ozaki(weights, KEYS, 0, 2, n_end, config=config, device=DEVICE).cpu().numpy()
    for b in range(2):
        want = _spec_tiles(weights[b], KEYS[b], 0, 2, n_end, config)
        assert np.array_equal(got[b].view(np.int64), want.view(np.int64)), np.abs(got[b] - want).max()


def test_a_three_digit_kernel_equals_its_specification_too():
    config = ok.OzakiConfig(rows=16, block_n=32, block_k=32, group_block=4, sum_block=16, digits=3)
    weights = weights_for_seed(5, 37, 2)[None]
    got = ok.tile_sums_ozaki(weights, KEYS[:1], 16, 1, 32, config=config, device=DEVICE).cpu().numpy()
    assert np.array_equal(got[0].view(np.int64), _spec_tiles(weights[0], KEYS[0], 16, 1, 32, config).view(np.int64))


def _block_sums(weights, config, setting, n_samples):
    """Block sums of every MLP under a batch/tile/grid ``setting``: (mlps per launch, rows, programs)."""
    per_launch, rows, programs = setting
    cfg = ok.OzakiConfig(**{**config.__dict__, "rows": rows})
    out = []
    for b0 in range(0, weights.shape[0], per_launch):
        sums = ok.range_sums_ozaki(weights[b0 : b0 + per_launch], KEYS[b0 : b0 + per_launch], (0, 1), n_samples,
                                   config=cfg, n_programs=programs, device=DEVICE)
        out += [philox.pack(s) for s in sums]
    return np.stack(out)


SETTINGS = [(2, 16, 4), (1, 32, 1), (2, 16, 1)]  # MLPs per launch, rows per tile, programs


def test_block_sums_are_invariant_to_batch_tile_and_grid_and_equal_the_specification():
    width, depth, n = 37, 3, 40
    config = _tiny(width)
    weights = np.stack([weights_for_seed(s, width, depth) for s in (3, 4)])
    results = [_block_sums(weights, config, s, n) for s in SETTINGS]
    for r in results[1:]:
        assert np.array_equal(r.view(np.int64), results[0].view(np.int64))
    for b in range(2):  # the specification's tree over the same 40 samples (a 64-sample subtree, zero-padded)
        x = np.zeros((64, width), dtype=np.float32)
        x[:n] = ce.sampler_normals(KEYS[b], 0, n, width, DEVICE)
        tiles = oz.forward_sums(x, [oz.split_weights(w) for w in weights[b]], config.block_n, 64)[0] + 0.0
        assert np.array_equal(results[0][b][:2 * depth].view(np.int64), tiles.view(np.int64))


def test_config_identity_is_the_arithmetic_only():
    a = ok.OzakiConfig(rows=16, block_n=32, block_k=32)
    b = ok.OzakiConfig(rows=64, block_n=32, block_k=32, num_warps=8)
    assert a.identity() == b.identity() and a.identity()["scale_k"] == 32
    assert ok.OzakiConfig(block_n=64).identity() != a.identity()
    for bad in ({"block_k": 16}, {"block_k": 256, "block_n": 128}, {"digits": 5}, {"rows": 24}):
        with pytest.raises(ValueError):
            ok.OzakiConfig(**bad)


def test_the_kernel_refuses_weights_prepared_for_another_config():
    weights = weights_for_seed(1, 37, 1)[None]
    prepared = ok.prepare_weights(weights, ok.OzakiConfig(rows=16, block_n=32, block_k=32), DEVICE)
    for other in (ok.OzakiConfig(rows=16, block_n=32, block_k=32, digits=3), ok.OzakiConfig(rows=16, block_n=128)):
        with pytest.raises(ValueError, match="another OzakiConfig"):
            ok.tile_sums_ozaki(prepared, KEYS[:1], 0, 1, 16, config=other)
