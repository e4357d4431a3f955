"""The device check on the fused kernel's path (``engine="triton"``): without a GPU it runs in
Triton's interpreter (switched on for the kernel module's import and this module's tests only:
``tests/helpers/triton_interp.py``), at a tiny shape and a 64-sample stretch, so the check's fused-kernel
branch has at least run somewhere; on a CUDA machine the compiled kernel is checked by
tests/work/test_device_check.py's gpu-marked tests."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401
from whestbench.work import device_check as dc  # noqa: E402
from whestbench.work.steps import Compute  # noqa: E402
from whestbench.work.units import WorkSpec  # noqa: E402

ptt = kernel_module()
ok = kernel_module("whestbench.compute.philox.ozaki", "_ozaki_tile_kernel")
ce = kernel_module("whestbench.compute.philox.cuda_engine", "_relu_tree_kernel")  # the sampler stages' kernel


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter run; CUDA machines check the compiled kernel")
@pytest.mark.parametrize("precision", ["ieee", "4xfp16"])
def test_every_check_passes_on_the_fused_kernel_in_the_interpreter(monkeypatch, precision):
    monkeypatch.setattr(dc, "MIN_STRETCH", 64)
    monkeypatch.setattr(dc, "MAX_STRETCH", 64)
    monkeypatch.setattr(dc.judge, "CHECK_COUNTERS", ((0, 16), (2**32 - 8, 2**32 + 8), (2**63 - 17, 2**63 - 1)))
    config = ptt.KernelConfig(rows=16, block_n=16, block_k=16, group_block=4, sum_block=16, precision=precision,
                              num_warps=4)
    spec = WorkSpec(seeds=(), n_samples=64, width=8, depth=2, mlp_range=(0, 2), sampler="philox",
                    arithmetic="fused", block_size=65536, unit_blocks=1, mlps_per_unit=2)
    result = dc.check_device(spec, Compute("triton", "cpu", None, config))
    assert [c.name for c in result.checks] == ["philox-words", "block-sums", "row-invariance"]
    assert result.passed, [c.detail for c in result.checks if not c.passed]
    assert "fixed by construction" in result.checks[2].detail


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter run; CUDA machines check the compiled kernel")
def test_every_check_passes_on_the_integer_kernel_in_the_interpreter(monkeypatch):
    monkeypatch.setattr(dc, "MIN_STRETCH", 64)
    monkeypatch.setattr(dc, "MAX_STRETCH", 64)
    monkeypatch.setattr(dc.judge, "CHECK_COUNTERS", ((0, 16), (2**32 - 8, 2**32 + 8), (2**63 - 17, 2**63 - 1)))
    config = ok.OzakiConfig(rows=16, block_n=32, block_k=32, group_block=4, sum_block=16)
    spec = WorkSpec(seeds=(), n_samples=64, width=8, depth=2, mlp_range=(0, 2), sampler="philox",
                    arithmetic="ozaki", block_size=65536, unit_blocks=1, mlps_per_unit=2)
    result = dc.check_device(spec, Compute("triton", "cpu", None, config))
    assert result.passed, [c.detail for c in result.checks if not c.passed]
    assert "fixed by construction" in result.checks[2].detail
