"""whestbench: bake, verify and publish ground-truth datasets for the WhestBench benchmark.

    import whestbench
    ds = whestbench.load_dataset("./my-dataset")          # or "org/name" on the Hub
    md = whestbench.metadata(ds)
    for mlp in whestbench.iter_mlps(ds): ...

Names resolve lazily so that ``import whestbench`` (and ``whest --help``) stay fast. No public name
may equal a submodule's name (importing the submodule would replace it): ``tests/test_api.py`` checks.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_dataset": "whestbench.hub.loader",
    "metadata": "whestbench.hub.loader",
    "iter_mlps": "whestbench.hub.loader",
    "mlp_at": "whestbench.hub.loader",
    "arrays": "whestbench.hub.tables",
    "neuron_frame": "whestbench.hub.tables",
    "MLP": "whestbench.compute.mlp",
    "create_dataset": "whestbench.bake.pipeline",
    "combine_split_datasets": "whestbench.assemble.combine",
    "merge_datasets": "whestbench.assemble.merge",
    "InvalidDatasetError": "whestbench.errors",
    "publish_dataset": "whestbench.hub.push",
    "SCHEMA_VERSION": "whestbench.format.schema",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> object:  # no typing import: start-up stays short (a Ctrl-C then meets no handler)
    if name == "__version__":
        return importlib.import_module("whestbench.work.machine").whestbench_version()
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'whestbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
