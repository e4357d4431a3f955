"""A torch bake on CUDA plans the plain CUDA path (compute/philox/cuda_engine.py): every GEMM one shape
whatever --chunk-size and --mlps-per-batch say, and a kernel identity naming the GPU, its SM count and
cuBLAS. Checked on the CPU with the CUDA device faked where the plan asks for it."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401

ce = kernel_module("whestbench.compute.philox.cuda_engine", "_relu_tree_kernel")

from whestbench.bake import plan  # noqa: E402
from whestbench.bake.plan import BakeConfig, plan_bake  # noqa: E402
from whestbench.compute.philox.numba_engine import resolve_engine  # noqa: E402
from whestbench.work import torch_env  # noqa: E402

MAPS = """\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000100000-7f0000200000 r-xp 00000000 08:01 5678   /site-packages/nvidia/cublas/lib/libcublasLt.so.12
7f0000300000-7f0000400000 r-xp 00000000 08:01 5679   /site-packages/nvidia/cublas/lib/libcublas.so.12
7f0000500000-7f0000501000 rw-p 00000000 00:00 0
"""


def test_each_device_gets_its_engine():
    assert [resolve_engine("auto", torch.device(d)) for d in ("cpu", "cuda", "mps")] == ["numba", "cuda", "torch"]
    assert resolve_engine("torch", torch.device("cuda")) == "torch"  # the old path, still there when asked for


def test_the_loaded_cublas_is_found_in_the_process_map():
    assert torch_env.loaded_library(MAPS, "libcublas.so") == "/site-packages/nvidia/cublas/lib/libcublas.so.12"
    assert torch_env.loaded_library(MAPS, "libcudart.so") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only answer")
def test_without_cuda_the_cublas_version_says_why_it_is_unknown():
    assert torch_env.cublas_version() == "unavailable: no CUDA device"


def test_the_identity_records_the_gemm_shape_cublas_and_the_device():
    ident = torch_env.kernel_identity("cpu", "cuda", 256)
    config = ident["config"]
    assert ident["name"] == "philox-cuda" and json.loads(ident["precision_class"]) == config
    assert config["gemm_rows"] == 16384 and config["matmul"] == "fp32" and config["accumulation"] == "fp64"
    assert {"gpu", "sm_count", "capability", "cublas", "cublas_workspace", "torch", "version"} <= set(config)
    assert torch_env.kernel_identity("cpu", "cuda", 1024)["config"]["gemm_rows"] == 4096


@pytest.fixture
def fake_cuda(monkeypatch):
    """``--device cuda`` resolves; the identity is taken on the CPU (no GPU to ask)."""
    real = torch_env.kernel_identity
    for module in (torch_env, plan):  # bake.plan binds both at import
        monkeypatch.setattr(module, "resolve_device", lambda name: "cuda")
        monkeypatch.setattr(module, "kernel_identity", lambda where, engine, width, rows=None: real(
            "cpu", engine, width, rows))


@pytest.mark.parametrize("width", [256, 1024])
def test_no_chunk_size_or_batch_reaches_a_gemm(fake_cuda, width):
    plans = [plan_bake(BakeConfig(n_mlps=20, n_samples=10**6, width=width, depth=2, output=None, seed=1,
                                  backend="torch", device="cuda", **kw), probe=False)
             for kw in ({}, {"chunk_size": 1024}, {"mlps_per_batch": 2, "chunk_size": 1 << 16})]
    assert {p.compute.engine for p in plans} == {"cuda"}
    assert {p.compute.step_rows for p in plans} == {ce.gemm_rows(width)}
    assert {p.spec.arithmetic for p in plans} == {plans[0].kernel_md["precision_class"]}
    assert {p.kernel_md["chunk_size"] for p in plans} == {ce.gemm_rows(width)}
    assert not any("--chunk-size" in n for n in plans[0].notes)
    assert any(n.startswith("--chunk-size is not used on CUDA") for n in plans[1].notes)


def test_without_triton_cuda_keeps_the_torch_ops_path_and_says_so(fake_cuda, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    assert resolve_engine("auto", torch.device("cuda")) == "torch"
    plan = plan_bake(BakeConfig(n_mlps=2, n_samples=10**5, width=16, depth=2, output=None, seed=1, backend="torch",
                                device="cuda"), probe=False)
    assert plan.compute.engine == "torch"
    assert any(n.startswith("triton is not installed") for n in plan.notes)
