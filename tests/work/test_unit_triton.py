"""The bake's philox unit on the fused Triton kernel agrees with the torch/numba unit on the same
samples. Without CUDA, Triton's interpreter runs the kernel logic on the CPU (tiny shapes only)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401
from whestbench.compute.seeds import derived_seeds  # noqa: E402
from whestbench.work.steps import Compute, UnitContext, run_unit  # noqa: E402
from whestbench.work.units import Unit, WorkSpec  # noqa: E402

kernel_module()  # decorated for the interpreter before the unit's lazy import finds it

SPEC = WorkSpec(
    seeds=tuple(derived_seeds(5, 2)), n_samples=300, width=8, depth=2, mlp_range=(0, 2),
    sampler="philox", block_size=128, unit_blocks=4, mlps_per_unit=2,
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_fused_unit_matches_the_torch_unit_on_the_same_samples():
    unit = Unit(0, 0, 3, mlp_count=2)  # 3 blocks of 128 = 300 samples, the last ragged
    seen = []
    fused = run_unit(SPEC, Compute("triton", DEVICE), unit, UnitContext(on_samples=seen.append))
    plain = run_unit(SPEC, Compute("torch" if torch.cuda.is_available() else "numba", DEVICE), unit)
    assert fused.sums.shape == plain.sums.shape == (2, 2, 8)
    assert fused.count == plain.count == 300
    # Same normals, same fp32 dot products; only the summation order inside a dot differs.
    np.testing.assert_allclose(fused.sums, plain.sums, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(fused.sumsq, plain.sumsq, rtol=2e-5, atol=1e-6)
    assert sum(seen) >= 2 * 300  # progress reported in samples
