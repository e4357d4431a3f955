"""Shared fixtures: where the shared reference material lives, and how to read a dataset's columns.

CI clones the repository with ``shared/`` beside it (``<root>/main`` and ``<root>/shared``), so the
path is found relative to this file; tests that need it skip cleanly where it is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
GOLDEN = SHARED / "fixtures" / "whestbench-0.16" / "golden"

# Column name -> numpy dtype the arrays must have (the Parquet schema's leaf types).
COLUMN_DTYPES = {
    "mlp_id": np.int32,
    "mlp_seed": np.int64,
    "weights": np.float32,
    "all_layer_means": np.float32,
    "final_means": np.float32,
    "avg_variance": np.float64,
}


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared reference folder not found at {SHARED} (clone it beside the repository)")
    return SHARED


@pytest.fixture(scope="session")
def golden_dir(shared_dir: Path) -> Path:
    if not GOLDEN.is_dir():
        pytest.skip(f"whestbench 0.16 golden datasets not found at {GOLDEN}")
    return GOLDEN


def _read_columns(dataset_dir: Path) -> dict[str, Any]:
    """Every row of every ``data/*.parquet`` shard (in file-name order) as numpy arrays / lists.

    Read with pyarrow only (no ``datasets`` cache), so reading never writes anywhere.
    """
    import pyarrow.parquet as pq

    files = sorted((Path(dataset_dir) / "data").glob("*.parquet"))
    assert files, f"no parquet files under {dataset_dir}/data"
    rows: dict[str, list] = {}
    for f in files:
        for name, values in pq.read_table(f).to_pydict().items():
            rows.setdefault(name, []).extend(values)
    out: dict[str, Any] = {}
    for name, values in rows.items():
        out[name] = np.asarray(values, dtype=COLUMN_DTYPES[name]) if name in COLUMN_DTYPES else values
    return out


def _read_metadata(dataset_dir: Path) -> dict[str, Any]:
    return json.loads((Path(dataset_dir) / "metadata.json").read_text())


def _assert_bytes_equal(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    """Bit-for-bit equality (stricter than ==: -0.0 vs 0.0 and NaN payloads count)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    assert a.tobytes() == b.tobytes(), f"{what}: arrays differ (max |diff| {np.max(np.abs(a - b))})"


# The helpers are handed out as fixtures (not imported from conftest) so the suite works under any
# pytest import mode.
@pytest.fixture(scope="session")
def read_columns():
    return _read_columns


@pytest.fixture(scope="session")
def read_metadata():
    return _read_metadata


@pytest.fixture(scope="session")
def assert_bytes_equal():
    return _assert_bytes_equal
