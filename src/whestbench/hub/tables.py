"""A loaded split as numpy arrays and pandas frames, in the dtypes and shapes the dataset stores.

``datasets`` gives the array columns back as nested Python lists (``ds[0]["weights"]``), as object
columns of arrays (``ds.to_pandas()``), or cast to float32 and int64 (``ds.with_format("numpy")``
turns the float64 ``avg_variance`` into float32 and the int32 ``mlp_id`` into int64). These read the
Arrow columns directly instead:

    a = arrays(ds)          # {"weights": float32 (n, depth, width, width), "avg_variance": float64 (n,), ...}
    df = neuron_frame(ds)   # one row per (mlp_id, layer, neuron): mean, stderr, n_samples; numeric dtypes
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from whestbench.format.schema import N_USED_COLUMN, STDERR_COLUMN
from whestbench.hub.loader import _ATTACHED, _dict_message, _is_dict, _samples_used
from whestbench.hubenv import import_hub

__all__ = ["arrays", "neuron_frame"]


def arrays(ds: Any, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """``{column: ndarray}`` of one loaded split (``whestbench.load_dataset(..., split=...)`` or any
    ``datasets.Dataset`` of its rows), each with the stored dtype and the row count first: ``weights``
    float32 ``(n, depth, width, width)``, ``all_layer_means`` and ``all_layer_stderr`` float32
    ``(n, depth, width)``, ``final_means`` float32 ``(n, width)``, ``avg_variance`` float64, ``mlp_id``
    int32, ``mlp_seed`` and ``n_samples_used`` int64, ``mlp_name`` and ``sampling_budget_breakdown`` str.
    ``columns``: the ones wanted (default: all)."""
    datasets = import_hub("datasets")

    if _is_dict(ds):
        raise TypeError(_dict_message("arrays", ds))
    if not isinstance(ds, datasets.Dataset):
        raise TypeError(f"arrays needs a datasets.Dataset (not streamed); got {type(ds).__name__}.")
    names = list(ds.column_names if columns is None else columns)
    unknown = [c for c in names if c not in ds.column_names]
    if unknown:
        raise KeyError(f"no column(s) {unknown} in this split; it has {ds.column_names}.")
    table = ds.select_columns(names).with_format("arrow")[:]
    return {name: _column(table.column(name), ds.features[name], len(ds)) for name in names}


def _column(col: Any, feature: Any, n: int) -> np.ndarray:
    """One Arrow column as an ndarray of ``feature``'s dtype, shape ``(n, *feature's shape)``."""
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        arr = arr.flatten()  # honours the offsets of a sliced or selected table
    shape = tuple(getattr(feature, "shape", ()) or ())
    if not shape and getattr(feature, "length", -1) not in (-1, None):
        shape = (feature.length,)
    dtype = getattr(feature, "dtype", None) or getattr(getattr(feature, "feature", None), "dtype", None)
    if dtype == "string":
        return np.asarray(arr.to_pylist(), dtype=str).reshape((n, *shape))
    return arr.to_numpy(zero_copy_only=False).astype(np.dtype(dtype), copy=False).reshape((n, *shape))


def neuron_frame(ds: Any):
    """A ``pandas.DataFrame`` with one row per (MLP, layer, neuron) of one loaded split: ``mlp_id``
    (int32), ``layer`` (int16, 1 … depth), ``neuron`` (int32), ``mean`` (float32, ``all_layer_means``),
    ``stderr`` (float32, ``all_layer_stderr``; where the dataset has it) and ``n_samples`` (int64: the
    row's ``n_samples_used``, else the dataset's ``n_samples``; where known). Every column is numeric,
    so ``df.groupby("layer")["stderr"].median()`` and the like work directly."""
    import pandas as pd

    wanted = ["mlp_id", "all_layer_means"] + [c for c in (STDERR_COLUMN, N_USED_COLUMN) if c in ds.column_names]
    a = arrays(ds, wanted)
    n, depth, width = a["all_layer_means"].shape
    frame = {
        "mlp_id": np.repeat(a["mlp_id"], depth * width),
        "layer": np.tile(np.repeat(np.arange(1, depth + 1, dtype=np.int16), width), n),
        "neuron": np.tile(np.arange(width, dtype=np.int32), n * depth),
        "mean": a["all_layer_means"].reshape(-1),
    }
    if STDERR_COLUMN in a:
        frame["stderr"] = a[STDERR_COLUMN].reshape(-1)
    md = _ATTACHED.get(id(ds))
    used = a.get(N_USED_COLUMN)
    if used is None and md is not None and _samples_used({}, md) is not None:
        used = np.full(n, _samples_used({}, md), dtype=np.int64)
    if used is not None:
        frame["n_samples"] = np.repeat(used.astype(np.int64), depth * width)
    return pd.DataFrame(frame)
