"""The precision gate (SPEC §3) for the torch backend's arithmetic, on identical samples.

Gate: against an fp64-matmul reference fed the very same philox normals, at width 256 depth 8 and
width 1024 depth 16 with N >= 2**16: max |Δ mean| <= 1e-6 and, per layer, |mean over neurons of Δ|
<= 1e-7. At N = 1e9 the Monte-Carlo standard error of a mean is ~2.5e-5, so the gate keeps
arithmetic bias below 1/25 of it. The CPU arithmetic runs in CI; the CUDA arithmetic where a GPU is.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from whestbench.compute.philox import spec as philox  # noqa: E402
from whestbench.compute.mlp import sample_weights  # noqa: E402
from philox_reference import block_sums_torch, normals_torch  # noqa: E402  (tests/philox_reference.py)
from whestbench.compute.precision import GATE_MAX_ABS as MAX_ABS  # noqa: E402
from whestbench.compute.precision import GATE_MAX_BIAS as MAX_LAYER_BIAS  # noqa: E402
from whestbench.compute.precision import gate_figures  # noqa: E402
from whestbench.compute.seeds import spawn_streams  # noqa: E402

N = 1 << 16  # one canonical block


def fp64_reference_means(weights: np.ndarray, key, n: int) -> np.ndarray:
    """(depth, width) means with float64 matmuls on the very normals the CPU fast path draws."""
    depth, width, _ = weights.shape
    sums = torch.zeros((depth, width), dtype=torch.float64)
    w64 = torch.from_numpy(weights).double()
    for c0 in range(0, n, 4096):
        h = normals_torch(key, c0, min(c0 + 4096, n), width, "cpu").double()  # (rows, width)
        for layer in range(depth):
            h = torch.clamp_min(h @ w64[layer], 0.0)
            sums[layer] += h.sum(0)
    return (sums / n).numpy()


def _mlp(seed: int, width: int, depth: int):
    weight_ss, sample_ss, _ = spawn_streams(seed)
    return sample_weights(weight_ss, width, depth), philox.philox_key(sample_ss)


def _check_gate(device: str, width: int, depth: int) -> tuple[float, float]:
    weights, key = _mlp(2026, width, depth)
    sums = block_sums_torch(weights[None], np.array([key], dtype=np.uint32), 0, N, device)[0]
    fast = sums.sums / N
    max_abs, layer_bias = gate_figures(fast, fp64_reference_means(weights, key, N))
    assert max_abs <= MAX_ABS, f"{device} {width}x{depth}: max |Δ mean| = {max_abs:.3e} > {MAX_ABS}"
    assert layer_bias <= MAX_LAYER_BIAS, f"{device} {width}x{depth}: per-layer |mean Δ| = {layer_bias:.3e} > {MAX_LAYER_BIAS}"
    return max_abs, layer_bias


def test_one_bf16_pass_fails_the_gate():
    # The gate has teeth: rounding the activations to bf16 before each matmul (one bf16 pass) must fail.
    weights, key = _mlp(7, 64, 4)
    depth, width, _ = weights.shape
    n = 1 << 14
    sums = np.zeros((depth, width))
    for c0 in range(0, n, 4096):
        h = normals_torch(key, c0, min(c0 + 4096, n), width, "cpu")
        for layer in range(depth):
            h = torch.clamp_min(h.bfloat16().float() @ torch.from_numpy(weights[layer]).bfloat16().float(), 0.0)
            sums[layer] += h.double().sum(0).numpy()
    max_abs, _ = gate_figures(sums / n, fp64_reference_means(weights, key, n))
    assert max_abs > MAX_ABS


def test_cpu_arithmetic_passes_the_gate_at_256x8():
    _check_gate("cpu", 256, 8)


@pytest.mark.slow
def test_cpu_arithmetic_passes_the_gate_at_1024x16():
    _check_gate("cpu", 1024, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("width, depth", [(256, 8), (1024, 16)])
def test_cuda_arithmetic_passes_the_gate(width, depth):
    _check_gate("cuda", width, depth)
