"""The heavy libraries, imported only when a verb needs them, declared here and nowhere else.

``torch`` and ``triton`` (the ``gpu`` extra) and ``matplotlib`` (the ``plot`` extra) may be absent;
``numba``, ``datasets`` and ``huggingface_hub`` are installed with whestbench but take seconds to import,
so a verb that does not use them never pays for it. A module of whestbench that imports one of them at
its top (the torch, Triton and numba engines, the fused numba kernels) is itself loaded through ``engine_module``; every other
module calls ``require`` inside the function that needs the library. ``datasets`` and
``huggingface_hub`` go through ``hubenv.import_hub`` (settings they cannot parse set aside first).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from whestbench.errors import TorchMissingError, UsageError
from whestbench.hubenv import import_hub

HEAVY = {
    "torch": "pip install 'whestbench[gpu]'",
    "triton": "pip install 'whestbench[gpu]' (Linux only)",
    "matplotlib": "pip install 'whestbench[plot]'",
    "numba": "pip install whestbench (numba is one of its dependencies)",
    "datasets": "pip install whestbench (datasets is one of its dependencies)",
    "huggingface_hub": "pip install whestbench (huggingface_hub is one of its dependencies)",
}
"""Each heavy library (the top-level name) -> the command that installs it."""

ENGINES = {
    "torch": "whestbench.compute.philox.torch_engine",
    "cuda": "whestbench.compute.philox.cuda_engine",
    "triton": "whestbench.compute.philox.triton_kernel",
    "ozaki": "whestbench.compute.philox.ozaki",
    "numba": "whestbench.compute.philox.numba_engine",
    "numba_kernels": "whestbench.compute.philox.numba_kernels",
    "fused": "whestbench.compute.fused",
}
"""whestbench's modules that import torch, Triton or numba at their top, by short name."""


def require(name: str, *, needed_for: str | None = None) -> ModuleType:
    """The module ``name`` (``"torch"``, ``"matplotlib.pyplot"``, ``"torch.distributed"``...), imported
    now; a missing library is a ``UsageError`` (``TorchMissingError`` for torch) that names ``needed_for``
    and the install command."""
    top = name.split(".")[0]
    if top not in HEAVY:
        raise ValueError(f"{top!r} is not one of optional.HEAVY")
    if top in ("datasets", "huggingface_hub"):
        return import_hub(name)
    try:
        return importlib.import_module(name)
    except ImportError:
        cls = TorchMissingError if top == "torch" else UsageError
        exc = cls(f"{needed_for or 'this'} needs {top}", fix=f"{HEAVY[top]}.")
        exc.name = top
        raise exc from None


def engine_module(short: str) -> ModuleType:
    """One of whestbench's modules that import a heavy library at their top (``ENGINES``), loaded now."""
    return importlib.import_module(ENGINES[short])
