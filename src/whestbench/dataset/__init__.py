"""whestbench 0.16's ``whestbench.dataset`` names, kept working; the code lives in the packages
``format``, ``hub``, ``bake``, ``verify`` and ``assemble`` (docs/architecture.md).

Public face kept from whestbench 0.16: ``whestbench.dataset.create_dataset``, ``load_dataset``,
``metadata``, ``iter_mlps``, ``mlp_at``, and the names 0.16's module also carried (``MLP``,
``InvalidDatasetError``, ``SCHEMA_VERSION``, ``DEFAULT_SPLIT``). They resolve lazily; nothing in
src imports from here. No public name may equal a submodule's name (importing the submodule
would replace it on the package): ``tests/test_api.py`` checks.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_dataset": "whestbench.bake.pipeline",
    "load_dataset": "whestbench.hub.loader",
    "metadata": "whestbench.hub.loader",
    "iter_mlps": "whestbench.hub.loader",
    "mlp_at": "whestbench.hub.loader",
    "MLP": "whestbench.compute.mlp",
    "InvalidDatasetError": "whestbench.errors",
    "SCHEMA_VERSION": "whestbench.format.schema",
    "DEFAULT_SPLIT": "whestbench.format.schema",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'whestbench.dataset' has no attribute {name!r}")
