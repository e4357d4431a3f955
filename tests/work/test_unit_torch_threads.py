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
from whestbench.dataset.bake import torch_threads  # noqa: E402
from whestbench.work.runner import run_units  # noqa: E402
from whestbench.work.units import WorkSpec, plan_units, run_unit_philox  # noqa: E402

SPEC = WorkSpec(
    seeds=tuple(derived_seeds(3, 4)), n_samples=200, width=8, depth=2, mlp_range=(0, 4),
    sampler="philox",
    extra={"device": "cpu", "mlps_per_batch": 1, "chunk_size": None, "block_size": 128, "unit_blocks": 1,
           "method": "numba"},
)  # fmt: skip


def _openmp_threads_here() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "openmp"]


def test_each_worker_thread_runs_torch_with_the_bakes_thread_count():
    if not _openmp_threads_here():
        pytest.skip("threadpoolctl sees no OpenMP runtime in this torch build")
    if (os.cpu_count() or 1) == 1 or os.environ.get("OMP_NUM_THREADS") == "1":
        pytest.skip("one thread is OpenMP's default here, so a worker's count cannot differ")
    seen: list[list[int]] = []

    def unit_fn(spec, unit, on_samples):
        out = run_unit_philox(spec, unit, on_samples)
        seen.append(_openmp_threads_here())  # read in the worker thread, after its matmuls
        return out

    with torch_threads(1):
        run_units(SPEC, plan_units(SPEC), workers=2, unit_fn=unit_fn)
    assert len(seen) == len(plan_units(SPEC))
    assert all(counts and set(counts) == {1} for counts in seen), seen
