"""Dataset layer: schema, metadata, writer, loader, merge/combine, verify, hub, and the bake pipeline.

Public face kept from whestbench 0.16: ``whestbench.dataset.create_dataset``, ``load_dataset``,
``metadata``, ``iter_mlps``, ``mlp_at`` (resolved lazily; submodules import nothing from here).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_dataset": "whestbench.dataset.bake",
    "load_dataset": "whestbench.dataset.loader",
    "metadata": "whestbench.dataset.loader",
    "iter_mlps": "whestbench.dataset.loader",
    "mlp_at": "whestbench.dataset.loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'whestbench.dataset' has no attribute {name!r}")
