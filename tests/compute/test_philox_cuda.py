"""The plain CUDA path (compute/philox/cuda_engine.py) computes the specification's batch sums: the same
words, the same normals, the same tree over the same GEMMs; and no setting but its GEMM row count
changes a byte.

Without a GPU its Triton kernels run in Triton's interpreter on CPU tensors and its GEMMs are torch's
CPU ``mm`` (``tests/helpers/triton_interp.py`` switches the interpreter on for this module only): the same code
a CUDA bake runs, at tiny shapes. On a CUDA machine the same tests run the compiled kernels and cuBLAS;
the ``gpu``-marked ones run only there.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401
from whestbench.compute.philox import spec as philox  # noqa: E402
from whestbench.compute.mlp import weights_for_seed  # noqa: E402
from precision_emulation import float32_ulps  # noqa: E402
from whestbench.compute.seeds import spawn_streams  # noqa: E402
from philox_kat import KEY  # noqa: E402  (tests/philox_kat.py)
from helpers.device_faults import batch_dependent_mm, first_word_flipped  # noqa: E402

ce = kernel_module("whestbench.compute.philox.cuda_engine", "_relu_tree_kernel")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KEYS = [KEY, (1, 2), (0xFFFFFFFF, 0)]
WIDTH, DEPTH = 37, 3  # 37: masked columns in every kernel and a ragged last Philox group
BLOCK, ROWS = 256, 512  # a GEMM of 512 rows over blocks of 256: every chunk padded with zero rows
N_RAGGED = 3 * BLOCK + 77  # four blocks, the last one ragged


@pytest.fixture(scope="module", autouse=True)
def interpreter_sized_programs():
    """The interpreter runs a kernel program by program in Python, so fewer, larger programs keep this
    module fast (speed only: ``test_calls_and_tiles_never_change_a_byte``). On a GPU, the defaults."""
    if torch.cuda.is_available():
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ce, "SAMPLER_ROWS", 512)
        mp.setattr(ce, "TILE_ROWS", 256)
        mp.setattr(ce, "TILE_COLS", 64)
        yield


def _mlps(seeds, width=WIDTH, depth=DEPTH):
    weights = np.stack([weights_for_seed(s, width, depth) for s in seeds])
    keys = np.array([philox.philox_key(spawn_streams(s)[1]) for s in seeds], dtype=np.uint32)
    return weights, keys


@pytest.fixture(scope="module")
def batch():
    return _mlps([101, 202, 303])


@pytest.fixture(scope="module")
def baseline(batch):
    """All three MLPs' batch sums over the whole ragged range, in one call."""
    weights, keys = batch
    engine = ce.CudaEngine(weights, keys, DEVICE, rows=ROWS, block_size=BLOCK)
    return engine.batches_host(0, 4, N_RAGGED)


# --- the sampler --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("n0", [0, 2**32 - 40, 2**63 - 81])  # the start, hi32(n) = 1 reached, the last samples
def test_words_are_bit_identical_to_the_specification(key, n0):
    got = ce.sampler_words(key, n0, n0 + 80, WIDTH, DEVICE)
    assert got.dtype == np.uint32 and np.array_equal(got, philox.philox_words(key, n0, n0 + 80, WIDTH))


def test_normals_are_within_a_few_ulp_of_the_specification():
    got = ce.sampler_normals(KEY, 5, 200, WIDTH, DEVICE)
    want = philox.normals(KEY, 5, 200, WIDTH)
    # Uniforms are bit-exact; log/cos/sin are the platform's (libdevice on a GPU, numpy here).
    assert got.shape == want.shape and got.dtype == np.float32
    assert float32_ulps(got, want).max() <= 4


def test_one_launch_draws_a_chunk_for_every_mlp_with_zero_rows_past_the_data():
    launches = []

    class Record:
        def __init__(self, launch):
            launches.append(launch)

        def __enter__(self):
            return True

        def __exit__(self, *exc):
            return False

    keys = ce._key_tensor(KEYS, DEVICE)
    out = torch.full((3, 64, WIDTH), float("nan"), device=DEVICE)
    with ce.observe(Record):
        ce._sampler(out, keys, 1000, 50, WIDTH, False)
    assert [(la.kernel, la.writes) for la in launches] == [("sampler", 3 * 64 * WIDTH * 4)]
    got = out.cpu().numpy()
    for b, key in enumerate(KEYS):
        assert float32_ulps(got[b, :50], philox.normals(key, 1000, 1050, WIDTH)).max() <= 4
        assert np.all(got[b, 50:] == 0.0)


# --- the sums: the specification's tree over the same GEMMs ---------------------------------------------


def tree_of_the_same_gemms(weights, key, block, n_samples, rows=ROWS, block_size=BLOCK, z2sq=True):
    """``spec.batch_raw``'s rows for each batch of a block, computed as the engine must: the engine's
    normals padded with zero rows to ``rows``, torch's ``mm`` at that shape per layer, ReLU, then
    ``spec.pairwise_colsum`` over each batch's rows of the fp64 leaves."""
    depth, width, _ = weights.shape
    start, end = philox.block_bounds(block, n_samples, block_size)
    batch, chunk = min(philox.BATCH, block_size), min(rows, block_size)
    out = []
    for c0 in range(start, end, chunk):
        valid = min(chunk, end - c0)
        x = np.zeros((rows, width), dtype=np.float32)
        x[:valid] = ce.sampler_normals(key, c0, c0 + valid, width, DEVICE)
        h = torch.from_numpy(x).to(DEVICE)
        raw = np.zeros((-(-valid // batch), 2 * depth + 1, width))
        for layer in range(depth):
            z = torch.mm(h, torch.from_numpy(weights[layer]).to(DEVICE))
            h = torch.clamp(z, min=0.0)
            zs, hs = z.cpu().numpy().astype(np.float64), h.cpu().numpy().astype(np.float64)
            for k, g0 in enumerate(range(0, valid, batch)):
                if layer == 1 and z2sq:
                    raw[k, 2 * depth] = philox.pairwise_colsum(zs[g0 : g0 + batch] ** 2)
                raw[k, layer] = philox.pairwise_colsum(hs[g0 : g0 + batch])
                raw[k, depth + layer] = philox.pairwise_colsum(hs[g0 : g0 + batch] ** 2)
        out.append(raw)
    return np.concatenate(out) + 0.0


@pytest.mark.parametrize("z2sq", [True, False])
def test_batches_are_the_specifications_tree_over_the_same_gemms_bit_for_bit(batch, z2sq):
    weights, keys = batch[0][:2], batch[1][:2]
    engine = ce.CudaEngine(weights, keys, DEVICE, rows=ROWS, block_size=BLOCK, z2sq=z2sq)
    raw, counts = engine.batches_host(0, 4, N_RAGGED)
    assert raw.shape == (2, 4, 2 * DEPTH + 1, WIDTH) and raw.dtype == np.float64
    assert counts.tolist() == [BLOCK, BLOCK, BLOCK, 77]
    for b in range(2):
        key = tuple(int(v) for v in keys[b])
        want = np.concatenate([tree_of_the_same_gemms(weights[b], key, blk, N_RAGGED, z2sq=z2sq) for blk in range(4)])
        assert raw[b].tobytes() == want.tobytes()
    if not z2sq:
        assert not raw[:, :, 2 * DEPTH].any()


# The engine's and the specification's matmuls are fp32 dot products of the same inputs summed in
# different orders (BLAS kernels picked by shape: 512-row GEMMs against numpy's per-batch ones), so an
# activation may differ by a few ulps of sum|a_k w_k| (~K·2**-24 relative, K = 37); through three layers
# and fp64 sums of non-negative values that is below 1e-6 relative, while a wrong sample, row, batch or
# layer would miss by 1e-3 or more.
RTOL, ATOL = 1e-5, 1e-6


def test_batches_equal_the_specification_within_matmul_arithmetic(baseline, batch):
    weights, keys = batch
    raw, counts = baseline
    for b in range(len(keys)):
        key = tuple(int(v) for v in keys[b])
        parts = [philox.block_batches(weights[b], key, blk, N_RAGGED, block_size=BLOCK) for blk in range(4)]
        assert np.concatenate([c for _, c in parts]).tolist() == counts.tolist()
        np.testing.assert_allclose(raw[b], np.concatenate([r for r, _ in parts]), rtol=RTOL, atol=ATOL)


def test_batches_of_4096_inside_a_block_of_a_chunk_of_8192():
    """The production layout, scaled down in width: a chunk holds two batches, a block two chunks
    (here tiles of 1,024 rows, 4 to a batch); the tree over the same GEMMs, bit for bit."""
    weights, keys = _mlps([7], width=8, depth=2)
    n = 4 * 4096 + 4096 + 1000  # a second block, ragged: a whole batch and 1,000 samples of the next
    engine = ce.CudaEngine(weights, keys, DEVICE, rows=8192, block_size=16384, tile_rows=1024, sampler_rows=2048)
    raw, counts = engine.batches_host(0, 2, n)
    assert counts.tolist() == [4096] * 5 + [1000]
    want = np.concatenate([tree_of_the_same_gemms(weights[0], tuple(int(v) for v in keys[0]), blk, n, rows=8192,
                                                  block_size=16384) for blk in range(2)])
    assert raw[0].tobytes() == want.tobytes()


def test_block_parts_are_the_tree_of_their_batches_bit_for_bit(batch, baseline):
    """A plain bake's units take whole blocks (summed over their batches on the device): the same bits
    as pushing every batch into the pairwise tree, the ragged last block included."""
    weights, keys = batch
    blocks, sizes = ce.CudaEngine(weights, keys, DEVICE, rows=ROWS, block_size=BLOCK).batches_host(
        0, 4, N_RAGGED, per_block=True)
    assert sizes.tolist() == [BLOCK, BLOCK, BLOCK, 77] and blocks.shape == (3, 4, 2 * DEPTH + 1, WIDTH)
    raw, counts = baseline
    by_batches, by_blocks = philox.PairwiseStack(), philox.PairwiseStack()
    for k, c in enumerate(counts):
        by_batches.push(raw[:, k], philox.level_of(int(c)))
    for k, c in enumerate(sizes):
        by_blocks.push(blocks[:, k], philox.level_of(int(c)))
    assert (by_blocks.value() + 0.0).tobytes() == (by_batches.value() + 0.0).tobytes()


# --- no setting changes a byte ------------------------------------------------------------------------------


def test_mlps_per_batch_never_change_a_byte(batch, baseline):
    weights, keys = batch
    for sl in (slice(0, 1), slice(1, 3)):
        alone = ce.CudaEngine(weights[sl], keys[sl], DEVICE, rows=ROWS, block_size=BLOCK).batches_host(0, 4, N_RAGGED)
        assert alone[0].tobytes() == baseline[0][sl].tobytes()


def test_calls_and_tiles_never_change_a_byte(batch, baseline):
    weights, keys = batch
    engine = ce.CudaEngine(weights[:1], keys[:1], DEVICE, rows=ROWS, block_size=BLOCK, tile_rows=64, tile_cols=16,
                           sampler_rows=128)  # three column blocks, four tiles to a batch
    parts = [engine.batches_host(b0, b1, N_RAGGED) for b0, b1 in [(0, 1), (1, 3), (3, 4)]]
    assert np.concatenate([p[0] for p in parts], axis=1).tobytes() == baseline[0][:1].tobytes()
    assert np.concatenate([p[1] for p in parts]).tolist() == baseline[1].tolist()


def test_units_of_any_cut_and_batch_give_identical_sums():
    """Through ``steps.run_unit`` as a bake runs it: units of 1, 2 or 4 blocks, of 1 or 3 MLPs: identical
    bytes, combining to the whole. (No chunk size reaches the engine: ``tests/work/test_cuda_plan.py``.)"""
    from whestbench.work.steps import Compute, run_unit
    from whestbench.work.units import Unit, WorkSpec

    seeds = (11, 22, 33)
    spec = WorkSpec(seeds=seeds, n_samples=N_RAGGED, width=WIDTH, depth=DEPTH, mlp_range=(0, 3), sampler="philox",
                    block_size=BLOCK, unit_blocks=4, mlps_per_unit=3)
    whole = run_unit(spec, Compute("cuda", DEVICE, ROWS), Unit(0, 0, 4, 3))
    for blocks, mlps in [(1, 1), (2, 3)]:
        per_mlp = []
        for m0 in range(0, 3, mlps):
            units = [run_unit(dataclasses.replace(spec, unit_blocks=blocks, mlps_per_unit=mlps),
                              Compute("cuda", DEVICE, ROWS), Unit(m0, b0, min(b0 + blocks, 4), mlps))
                     for b0 in range(0, 4, blocks)]
            per_mlp += [philox.combine_in_order([u.mlp(j) for u in units]) for j in range(mlps)]
        for m in range(3):
            got, want = per_mlp[m], whole.mlp(m)
            assert (got.count, got.sums.tobytes(), got.sumsq.tobytes()) == (want.count, want.sums.tobytes(),
                                                                            want.sumsq.tobytes())


# --- arguments --------------------------------------------------------------------------------------------


def test_gemm_rows_are_a_function_of_the_width_alone():
    assert ce.gemm_rows(256) == 16384 and ce.gemm_rows(1024) == 4096 and ce.gemm_rows(8) == 65536
    assert ce.gemm_rows(4096) == 4096  # never below a batch
    assert ce.gemm_rows(8, block_size=1024) == 1024


def test_bad_arguments_are_refused(batch):
    weights, keys = batch
    with pytest.raises(ValueError, match="power of two of at least 256"):
        ce.CudaEngine(weights, keys, DEVICE, rows=128, block_size=BLOCK)
    with pytest.raises(ValueError, match="power of two"):
        ce.CudaEngine(weights, keys, DEVICE, rows=768, block_size=BLOCK)
    with pytest.raises(ValueError, match="one key per MLP"):
        ce.CudaEngine(weights, keys[:2], DEVICE, rows=ROWS, block_size=BLOCK)
    with pytest.raises(ValueError, match="float32"):
        ce.CudaEngine(weights.astype(np.float64), keys, DEVICE, rows=ROWS, block_size=BLOCK)
    engine = ce.CudaEngine(weights, keys, DEVICE, rows=ROWS, block_size=BLOCK)
    with pytest.raises(ValueError, match="inside the data"):
        engine.batches(3, 5, N_RAGGED)


# --- the device check on this engine ------------------------------------------------------------------------


def _check_spec(estimator="plain"):
    from whestbench.compute.estimation import Estimation
    from whestbench.work.units import WorkSpec

    return WorkSpec(seeds=(), n_samples=10_000, width=16, depth=3, mlp_range=(0, 2), sampler="philox",
                    block_size=1024, unit_blocks=1, mlps_per_unit=2, estimation=Estimation(estimator))


@pytest.mark.parametrize("estimator", ["plain", "control-variate"])
def test_the_device_check_passes_on_this_engine(estimator):
    from whestbench.work import device_check as dc
    from whestbench.work.steps import Compute

    result = dc.check_device(_check_spec(estimator), Compute("cuda", DEVICE, 1024))
    assert result.passed, [c.detail for c in result.checks if not c.passed]
    assert "every GEMM is 1,024 rows by construction" in result.checks[2].detail


def test_the_device_check_fails_a_wrong_word_and_a_gemm_that_depends_on_the_batch(monkeypatch):
    from whestbench.work import device_check as dc
    from whestbench.work.steps import Compute

    compute = Compute("cuda", DEVICE, 1024)
    with monkeypatch.context() as m:
        m.setattr(ce, "sampler_words", first_word_flipped(ce.sampler_words))
        assert [c.passed for c in dc.check_device(_check_spec(), compute).checks] == [False, True, True]
    with monkeypatch.context() as m:
        m.setattr(torch, "mm", batch_dependent_mm())
        assert [c.passed for c in dc.check_device(_check_spec(), compute).checks] == [True, True, False]


# --- on a GPU ---------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: compiled kernels and cuBLAS")
@pytest.mark.parametrize("shape", [(256, 8), (1024, 16)])
def test_on_a_gpu_mlps_per_batch_and_calls_never_change_a_byte(shape):
    """The invariance the old path lacked on the H200 (1024×16 at 16 and 2 MLPs per batch): every GEMM
    is one shape, so 1, 2, 4 or 16 MLPs per batch and any cut into calls give identical bytes."""
    width, depth = shape
    weights, keys = _mlps(range(1, 17), width, depth)
    n = 2 * philox.BLOCK_SIZE + 12345
    base = ce.CudaEngine(weights, keys, "cuda").batches_host(0, 3, n)[0]
    for mlps in (1, 2, 4):
        for m0 in range(0, 16, 4 * mlps):
            engine = ce.CudaEngine(weights[m0 : m0 + mlps], keys[m0 : m0 + mlps], "cuda")
            got = np.concatenate([engine.batches_host(b, b + 1, n)[0] for b in range(3)], axis=1)
            assert got.tobytes() == base[m0 : m0 + mlps].tobytes(), (mlps, m0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_identity_names_the_gpu_and_cublas():
    from whestbench.work.torch_env import kernel_identity

    ident = kernel_identity("cuda", "cuda", 256)
    props = torch.cuda.get_device_properties(0)
    config = ident["config"]
    assert config["gpu"] == props.name and config["sm_count"] == props.multi_processor_count
    assert config["cublas"][0].isdigit(), config["cublas"]  # a version, not "unavailable"
    assert config["gemm_rows"] == 16384
    # torch's cublas_workspace_size sets it; an older torch reads the variable the engine sets
    assert config["cublas_workspace"] in (ce.CUBLAS_WORKSPACE, ":4096:8")
