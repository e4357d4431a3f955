"""Run a plan's units on a pool of worker threads, one unit per thread, saving each as it finishes.

Parallelism is across units only, and every worker's BLAS is pinned to one thread, so each unit's
arithmetic order is fixed by the data: results do not depend on the worker count. numpy's PCG64
draws, sgemm and the numba passes all release the GIL, so threads use every core without the
cost of processes. A stop request (SIGTERM/SIGUSR1) lets running units finish and starts no new one.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Callable, Sequence

from whestbench.compute.stats import LayerSums
from whestbench.work.ledger import Ledger
from whestbench.work.units import Unit, WorkSpec, run_unit_pcg64

Event = dict[str, Any]
UnitFn = Callable[[WorkSpec, Unit, Callable[[int], None]], LayerSums]


class BakeInterrupted(RuntimeError):
    """A stop was requested; finished units are saved and the same command resumes."""


def default_workers(n_units: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_units))


def run_units(
    spec: WorkSpec,
    units: Sequence[Unit],
    *,
    workers: int | None = None,
    ledger: Ledger | None = None,
    on_event: Callable[[Event], None] | None = None,
    stop: threading.Event | None = None,
    unit_fn: UnitFn = run_unit_pcg64,
    samples_of: Callable[[Unit], int] | None = None,
) -> dict[str, tuple[LayerSums, float]]:
    """Compute every unit not already in ``ledger``; return key -> (sums, wall seconds) for all."""
    emit = on_event or (lambda e: None)
    samples_of = samples_of or (lambda u: spec.n_samples)
    results: dict[str, tuple[LayerSums, float]] = {}
    if ledger is not None:
        wanted = {u.key for u in units}
        results = {k: v for k, v in ledger.load_done().items() if k in wanted}
    todo = [u for u in units if u.key not in results]
    total_samples = sum(samples_of(u) for u in units)
    lock = threading.Lock()
    state = {
        "samples_done": sum(samples_of(u) for u in units if u.key in results),
        "units_done": len(results),
    }
    base = {"units_total": len(units), "samples_total": total_samples}
    emit({"phase": "start", **base, **state, "recovered_units": len(results)})
    stop = stop or threading.Event()

    def add_samples(n: int) -> None:
        with lock:
            state["samples_done"] += n
            snapshot = dict(state)
        emit({"phase": "sampling", **base, **snapshot})

    def work(unit: Unit) -> None:
        if stop.is_set():
            return
        t0 = time.perf_counter()
        sums = unit_fn(spec, unit, add_samples)
        wall = time.perf_counter() - t0
        if ledger is not None:
            ledger.save(unit.key, sums, wall)
        with lock:
            results[unit.key] = (sums, wall)
            state["units_done"] += 1
            snapshot = dict(state)
        emit({"phase": "unit_done", **base, **snapshot, "unit": unit.key})

    n_workers = workers or default_workers(len(todo))
    if todo:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            if n_workers == 1:
                for u in todo:
                    work(u)
            else:
                with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="whest-unit") as pool:
                    futures = [pool.submit(work, u) for u in todo]
                    try:
                        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    except BaseException:
                        # Ctrl-C (KeyboardInterrupt) lands here: without the stop, leaving the pool
                        # would first run every queued unit, i.e. the rest of the bake
                        stop.set()
                        raise
                    for f in done:
                        if f.exception() is not None:
                            stop.set()
                            raise f.exception()
                    for f in futures:
                        f.result()
    missing = [u.key for u in units if u.key not in results]
    if missing:
        raise BakeInterrupted(
            f"stopped with {len(results)} of {len(units)} units done; re-run the same command to resume."
        )
    emit({"phase": "done", **base, **state})
    return results
