"""Thread counts a bake's numbers or speed depend on: BLAS at one thread, torch at one intra-op thread per worker."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from whestbench.optional import require


@contextlib.contextmanager
def one_blas_thread(held: threading.Event | None = None) -> Iterator[None]:
    """BLAS at one thread for the duration (an sgemm's float32 result depends on its thread count;
    a bake's numbers must not), with ``held`` set for exactly as long. Units check ``held`` before
    they save a checkpoint or a result, so what a unit computes after the limit is lifted — a bake
    leaving on an error while a unit thread still runs — is never kept."""
    from threadpoolctl import threadpool_limits

    held = held if held is not None else threading.Event()  # None: nobody watches
    with threadpool_limits(limits=1, user_api="blas"):
        held.set()
        try:
            yield
        finally:
            held.clear()  # before the limit goes: a unit that sees it set computed under the limit


@contextlib.contextmanager
def one_torch_thread(pin: bool) -> Iterator[None]:
    """torch on the CPU (``pin``): one intra-op thread for the duration (the worker threads give the parallelism)."""
    if not pin:
        yield
        return
    torch = require("torch", needed_for="the torch backend")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def pin_torch_threads_here() -> None:
    """Apply torch's thread count to the calling worker thread too.

    ``torch.set_num_threads`` sets OpenMP's and MKL's counts for the thread that calls it only. A
    worker thread starts from the defaults (all cores), so each of its CPU matmuls would start an
    OpenMP team of its own: two workers with two threads each on two cores ran 14% slower.
    """
    torch = require("torch", needed_for="the torch backend")
    torch.set_num_threads(torch.get_num_threads())
