"""Fixtures shared by the dataset tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from whestbench.dataset.reader import DATA_DIR, data_files, read_metadata
from whestbench.dataset.writer import write_dataset


def _rewrite(src: Path, dst: Path, *, edit_row=None, md_update: dict | None = None) -> Path:
    """Copy a single-split dataset through the writer, editing rows/metadata; checksums are recomputed,
    so only the content checks can notice the edit."""
    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    md.update(md_update or {})
    split = md["split"]
    rows = pq.read_table(data_files(src, split)[0]).to_pylist()
    for i, row in enumerate(rows):
        if edit_row is not None:
            edit_row(i, row)
    return write_dataset(dst, split, rows, len(rows), md["width"], md["depth"], md)


@pytest.fixture(scope="session")
def rewrite_dataset():
    """``rewrite_dataset(src, dst, edit_row=None, md_update=None)``: a single-split dataset copied
    through the writer with its rows or metadata edited (checksums recomputed)."""
    return _rewrite


def _as_0162_merge(partial: Path, whole: Path) -> dict:
    """Turn our ``partial`` into what whestbench 0.16.2's merge writes when it comes first: every
    key of the partial but five (so our checksums ride along), ``n_mlps`` the total, the merge keys
    appended, and the whole bake's data files (``whole``), which the carried checksums do not
    describe. Returns the metadata written."""
    md = read_metadata(partial)
    dropped = ("is_partial", "mlp_range", "total_n_mlps", "hardware", "created_at_utc")
    out = {k: v for k, v in md.items() if k not in dropped}
    out["n_mlps"] = md["total_n_mlps"]
    out |= {
        "created_at_utc": md["created_at_utc"],
        "merged_at_utc": "2026-01-01T00:00:00+00:00",
        "hardware_fingerprints": [md["hardware"]],
        "partials_count": 2,
    }
    shutil.rmtree(partial / DATA_DIR)
    shutil.copytree(whole / DATA_DIR, partial / DATA_DIR)
    (partial / "metadata.json").write_text(json.dumps(out, indent=2))
    return out


@pytest.fixture(scope="session")
def as_0162_merge():
    """``as_0162_merge(partial_dir, whole_dir) -> metadata``: our partial rewritten in place as
    whestbench 0.16.2's merge leaves it (see ``tests/reference`` for the real thing)."""
    return _as_0162_merge
