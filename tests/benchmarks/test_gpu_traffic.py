"""benchmarks/gpu_traffic.py: the plain CUDA path's counted global-memory traffic and launches at 256×8
stay within issue 33's budget, and the count is the path's own: the same counting over the same code,
run on CPU tensors with Triton's interpreter, gives the same figures as the count on ``meta``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from helpers.triton_interp import interpreter, kernel_module  # noqa: E402,F401

ce = kernel_module("whestbench.compute.philox.cuda_engine", "_relu_tree_kernel")

from benchmarks import gpu_traffic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_the_command_prints_the_budget_figures_within_the_budget():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_traffic.py"), "--json"], capture_output=True,
                         text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"bytes_per_sample", "launches_per_chunk_per_mlp"}
    assert doc["bytes_per_sample"] <= 40 * 1024  # issue 33: <= 40 KiB of global memory per sample
    assert doc["launches_per_chunk_per_mlp"] <= 25
    # what the design moves: the sampler writes 1 KiB, each layer's GEMM reads 1 KiB and writes 1 KiB and
    # the ReLU+tree kernel reads and writes them once more: 33 KiB and a little for weights and sums
    assert 33 * 1024 <= doc["bytes_per_sample"] <= 35 * 1024


@pytest.mark.parametrize("mlps", [1, 16])
def test_each_chunk_is_one_sampler_one_gemm_per_mlp_and_layer_one_tree_per_layer_and_one_finish(mlps):
    c = gpu_traffic.count_path(256, 8, mlps)
    chunks = c.chunks
    assert c.chunks == 16 * 4 and c.samples == 16 * 65536  # a call of 16 blocks, chunks of 16,384 rows
    # and per call: the four levels of each block's tree over its 16 batches, one copy to the host
    assert {k: t.launches for k, t in c.kinds.items()} == {"sampler": chunks, "mm": 8 * mlps * chunks,
                                                            "relu-tree": 8 * chunks, "batch-tree": chunks,
                                                            "add": 4, "to-host": 1}
    assert c.bytes_per_sample <= gpu_traffic.BUDGET_BYTES_PER_SAMPLE
    assert c.launches_per_chunk_per_mlp <= gpu_traffic.BUDGET_LAUNCHES_PER_CHUNK_PER_MLP


def test_a_call_waits_for_the_device_once_never_per_chunk():
    # "to-host" is the one copy of a call's sums to the host; nothing else reads the device back
    c = gpu_traffic.count_path(64, 2, 2, calls=3)
    assert c.kinds["to-host"].launches == 3
    assert not {"_local_scalar_dense", "item", "nonzero", "equal", "is_nonzero"} & set(c.kinds)


def test_counting_on_meta_counts_what_the_executed_path_does():
    """The same counting over the same code, run for real on CPU tensors with the kernels in Triton's
    interpreter: identical launches and bytes per kind (on the CPU a copy to the host is no op)."""
    kw = dict(width=16, depth=3, mlps=2, rows=256, block_size=256, blocks=2)
    meta = gpu_traffic.count_path(**kw)
    executed = gpu_traffic.count_path(**kw, device="cpu", run_triton=True)
    assert set(meta.kinds) - set(executed.kinds) == {"to-host"}
    for kind, t in executed.kinds.items():
        assert (t.launches, t.reads, t.writes) == (meta.kinds[kind].launches, meta.kinds[kind].reads,
                                                   meta.kinds[kind].writes), kind


def test_the_old_path_moved_ten_times_as_much():
    """Issue 33 counted ~358 KiB per sample and ~396 ops per chunk of 4 MLPs × 4,096 rows for the path
    CUDA bakes ran before (still MPS's); this counter finds the same order, far over the budget."""
    old = gpu_traffic.count_path(256, 8, 4, engine="torch", rows=4096)
    assert old.bytes_per_sample > 300 * 1024
    assert old.launches / old.chunks > 300


def test_the_counter_counts_reads_writes_and_launches_of_aten_ops():
    counter = gpu_traffic.make_counter("meta")
    a = torch.empty((64, 32), device="meta")
    w = torch.empty((32, 32), device="meta")
    y = torch.empty((2, 64, 32), device="meta")
    with counter:
        torch.mm(a, w, out=y[1])  # reads a and w, writes y[1] (not read: out=)
        y[1].clamp_(min=0.0)  # in place: reads and writes y[1]
        _ = y[:, 0::2]  # a view: no op
        _ = torch.empty((5,), device="meta")  # an allocation: no op
        _ = a.expand(3, 64, 32) + 1.0  # a broadcast input counts once; the output is new
        _ = y.cpu()  # a copy to the host: read on the device
    k = counter.kinds
    assert (k["mm"].launches, k["mm"].reads, k["mm"].writes) == (1, (64 * 32 + 32 * 32) * 4, 64 * 32 * 4)
    assert (k["clamp_"].reads, k["clamp_"].writes) == (64 * 32 * 4, 64 * 32 * 4)
    assert (k["add"].reads, k["add"].writes) == (64 * 32 * 4, 3 * 64 * 32 * 4)
    assert (k["to-host"].reads, k["to-host"].writes) == (2 * 64 * 32 * 4, 0)
    assert sum(t.launches for t in k.values()) == 4


def test_the_kernels_compile_for_hopper_and_ampere_without_spilling():
    """What the interpreter cannot show: the kernels compile (Triton, then ptxas) for sm_90 and sm_80.
    In a fresh process: this one imported triton for the interpreter."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_traffic.py"), "--ptxas"], capture_output=True,
                         text=True, timeout=300, cwd=REPO, env={k: v for k, v in __import__("os").environ.items()
                                                                if k != "TRITON_INTERPRET"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 6 and all(" 0 B spilled" in line for line in lines), out.stdout
