"""Triton's interpreter for the fused-kernel tests on a machine without CUDA, scoped to those tests.

Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is decorated (so when
``compute/philox/triton_kernel.py`` is imported) and again inside the interpreter while a kernel runs.
A kernel test module therefore imports the kernel module through ``kernel_module()`` (the variable
set for the import only) and binds the module-scoped autouse fixture ``interpreter`` (the variable
set while that module's tests run)::

    from helpers.triton_interp import interpreter, kernel_module  # noqa: F401
    ptt = kernel_module()

Every other test, and every process a test starts, runs without it. On a CUDA machine neither sets
anything: the compiled kernel runs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")
INTERPRET = not torch.cuda.is_available()
KERNEL_MODULE = "whestbench.compute.philox.triton_kernel"


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    """``TRITON_INTERPRET=1`` for the duration (without CUDA), then whatever it was before."""
    if not INTERPRET:
        yield
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def _interpreted(function) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(function, InterpretedFunction)


def kernel_module(name: str = KERNEL_MODULE, kernel: str = "_fused_mlp_tile_kernel") -> ModuleType:
    """The module ``name`` (``compute/philox/triton_kernel`` unless told), its kernels (``kernel`` is
    one of them), the fused kernel module's (which every kernel module imports) and triton's own
    ``@triton.jit`` library (decorated when triton is first imported) built for the interpreter without
    CUDA. Call it at a test module's import, i.e. at collection, before any test has imported triton.
    Skips the module without triton."""
    with interpreting():
        triton_language = pytest.importorskip("triton.language")
        module = importlib.import_module(name)
        fused = importlib.import_module(KERNEL_MODULE)
    if INTERPRET and not (_interpreted(triton_language.standard._sum_combine)
                          and _interpreted(fused._fused_mlp_tile_kernel) and _interpreted(getattr(module, kernel))):
        pytest.fail(f"triton or {name} was imported without TRITON_INTERPRET=1 before this test "
                    "module (an import at collection time?): import it through tests/helpers/triton_interp.py "
                    "kernel_module()", pytrace=False)
    return module


@pytest.fixture(scope="module", autouse=True)
def interpreter() -> Iterator[None]:
    """``TRITON_INTERPRET=1`` while the binding module's tests run (without CUDA)."""
    with interpreting():
        yield
