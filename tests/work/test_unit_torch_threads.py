"""Torch CPU units run single-threaded inside each worker thread.

``torch.set_num_threads`` sets OpenMP's (and MKL's) thread count for the calling thread only. The
bake pins torch to one thread and runs one unit per worker thread; if a worker kept OpenMP's
default (all cores), every matmul in it would start a team of its own and two workers would run
four busy threads on two cores (measured 14% slower). The unit applies the setting in its thread.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
threadpoolctl = pytest.importorskip("threadpoolctl")

from whestbench.compute.seeds import derived_seeds  # noqa: E402
from whestbench.work import executor  # noqa: E402
from whestbench.work.executor import Job, LocalExecutor  # noqa: E402
from whestbench.work.steps import Compute, run_unit  # noqa: E402
from whestbench.work.units import WorkSpec  # noqa: E402

SPEC = WorkSpec(
    seeds=tuple(derived_seeds(3, 4)), n_samples=200, width=8, depth=2, mlp_range=(0, 4),
    sampler="philox", block_size=128, unit_blocks=1,
)  # fmt: skip


def _openmp_threads_here() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "openmp"]


def test_each_worker_thread_runs_torch_with_the_bakes_thread_count(monkeypatch):
    if not _openmp_threads_here():
        pytest.skip("threadpoolctl sees no OpenMP runtime in this torch build")
    if (os.cpu_count() or 1) == 1 or os.environ.get("OMP_NUM_THREADS") == "1":
        pytest.skip("one thread is OpenMP's default here, so a worker's count cannot differ")
    seen: list[list[int]] = []

    def unit_fn(spec, compute, unit, ctx=None):
        out = run_unit(spec, compute, unit, ctx)
        seen.append(_openmp_threads_here())  # read in the worker thread, after its matmuls
        return out

    monkeypatch.setattr(executor, "run_unit", unit_fn)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # what the bake does around its executor
    try:
        LocalExecutor(2).run(Job(SPEC, Compute("numba")))
    finally:
        torch.set_num_threads(previous)
    assert len(seen) == len(SPEC.units())
    assert all(counts and set(counts) == {1} for counts in seen), seen
