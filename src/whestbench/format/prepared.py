"""Is a prepared Arrow copy (``prepared/<split>/``) the same table as its split's Parquet rows?

A multi-split dataset may carry, per split, the ``Dataset.save_to_disk`` copy whestbench 0.16's
loader reads instead of the Parquet shards (docs/format.md, "Prepared Arrow copies"). Checksums
only say the copy's bytes are the ones its writer listed; a copy edited and re-signed, or one in a
0.16 dataset that has no checksums, can say other numbers than the rows it stands for. ``compare``
reads both in row windows (memory stays flat) and compares every column bit for bit: the Arrow
schema (field metadata aside), the row count, and each column's values, with extension types
reduced to their storage, lists to their lengths and values, and floats compared as raw bits (so
a NaN payload or a -0.0 differs too).

``verify``, ``inspect``, ``push`` and ``prepare-arrow`` ask this module; our loader reads the
Parquet rows and never the copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from whestbench.errors import InvalidDatasetError
from whestbench.format.reader import data_files, parquet_footer, shard_glob
from whestbench.hubenv import import_hub

__all__ = ["PreparedVerdict", "compare", "prepared_verdict", "prepared_problem"]

_WINDOW_BYTES = 1 << 26  # rows compared per window: about 64 MiB of each side


@dataclass(frozen=True)
class PreparedVerdict:
    """``ok``: the copy holds the split's rows bit for bit; ``detail``: one line saying so, or the
    first difference (a column and a row)."""

    ok: bool
    detail: str


def prepared_verdict(root: Any, md: Mapping[str, Any], split: str) -> PreparedVerdict | None:
    """The verdict on ``split``'s declared prepared copy (None when none is declared; ``root`` a path or
    an open ``DatasetDir``). Never raises on a damaged dataset: a copy or shard that cannot be read is a
    failed verdict."""
    handle, root = root, Path(root)
    entry = md["prepared_splits"].get(split) if isinstance(md.get("prepared_splits"), dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not entry["path"]:
        return None
    target = root / entry["path"]
    rel = target.relative_to(root).as_posix()
    try:
        files = data_files(handle, split)
    except InvalidDatasetError as e:
        return PreparedVerdict(False, f"{rel}: its Parquet rows cannot be read ({e})")
    verdict = compare(target, files, what=rel, rows=shard_glob(split))
    if verdict.ok:
        return verdict
    return PreparedVerdict(False, f"{verdict.detail}; re-create it with `whest dataset prepare-arrow {root}`")


def prepared_problem(root: str | Path, md: Mapping[str, Any], split: str) -> str | None:
    """None when ``split``'s prepared copy is absent from ``md`` or bit-identical to its rows; else the first difference."""
    verdict = prepared_verdict(root, md, split)
    return None if verdict is None or verdict.ok else verdict.detail


def compare(copy_dir: Path, files: Sequence[Path], *, what: str, rows: str) -> PreparedVerdict:
    """Compare the ``save_to_disk`` copy at ``copy_dir`` with the Parquet ``files`` (in order).
    ``what`` and ``rows`` name the two sides in the detail."""
    datasets = import_hub("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(copy_dir).is_dir():
        return PreparedVerdict(False, f"{what} is missing (metadata.json declares it)")
    try:
        ds = datasets.Dataset.load_from_disk(str(copy_dir), keep_in_memory=False)
        copy_schema = ds.with_format("arrow")[:0].schema
    except Exception as e:  # any unreadable copy is a failed check, never a traceback
        return PreparedVerdict(False, f"{what} cannot be read as a saved Dataset: {type(e).__name__}: {e}")
    try:
        footers = [parquet_footer(f) for f in files]
    except InvalidDatasetError as e:
        return PreparedVerdict(False, f"{rows} cannot be read: {e}")
    n_rows = sum(f.num_rows for f in footers)
    parquet_schema = footers[0].schema.to_arrow_schema() if footers else pa.schema([])
    if len(ds) != n_rows:
        return PreparedVerdict(False, f"{what} holds {len(ds)} rows, {rows} {n_rows}")
    shape = _schema_difference(copy_schema, parquet_schema)
    if shape:
        return PreparedVerdict(False, f"{what} differs from {rows}: {shape}")
    names = parquet_schema.names
    view = ds.with_format("arrow")
    row_bytes = max(1, sum(f.row_group(i).total_byte_size for f in footers for i in range(f.num_row_groups)) // max(1, n_rows))
    window = max(1, _WINDOW_BYTES // row_bytes)
    start = 0
    try:
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=window, columns=names):
                theirs = view[start:start + batch.num_rows]
                for name in names:
                    a, b = _plain(theirs.column(name)), _plain(batch.column(name))
                    if not _same(a, b):
                        row = start + next(i for i in range(len(b)) if not _same(a.slice(i, 1), b.slice(i, 1)))
                        return PreparedVerdict(False, f"{what} differs from {rows}: column {name}, row {row}")
                start += batch.num_rows
    except (OSError, pa.ArrowException) as e:
        return PreparedVerdict(False, f"{what} or {rows} cannot be read: {e}")
    return PreparedVerdict(True, f"{what}: {n_rows:,} rows, {len(names)} columns bit-identical to {rows}")


def _schema_difference(copy: Any, parquet: Any) -> str | None:
    """Column names and Arrow types, field and schema metadata aside (extension types by storage)."""
    if copy.names != parquet.names:
        return f"columns {copy.names} vs {parquet.names}"
    for name in parquet.names:
        a, b = _storage_type(copy.field(name).type), _storage_type(parquet.field(name).type)
        if a != b:
            return f"column {name} is {a} in the copy, {b} in the rows"
    return None


def _storage_type(t: Any) -> Any:
    import pyarrow as pa

    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def _plain(column: Any) -> Any:
    """One Arrow array (chunks combined; extension arrays as their storage)."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _same(a: Any, b: Any) -> bool:
    """Equal values bit for bit (nulls in the same places; floats by their bits)."""
    import pyarrow as pa

    a, b = _plain(a), _plain(b)
    if len(a) != len(b) or _storage_type(a.type) != _storage_type(b.type):
        return False
    if not np.array_equal(np.asarray(a.is_null()), np.asarray(b.is_null())):
        return False
    t = a.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        la, lb = a.value_lengths().fill_null(-1), b.value_lengths().fill_null(-1)
        return np.array_equal(np.asarray(la), np.asarray(lb)) and _same(a.flatten(), b.flatten())
    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        va = a.fill_null(False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False)
        vb = b.fill_null(False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False)
        if va.dtype.kind == "f":
            bits = np.dtype(f"u{va.dtype.itemsize}")
            return np.array_equal(va.view(bits), vb.view(bits))
        return np.array_equal(va, vb)
    return a.to_pylist() == b.to_pylist()  # strings, binaries, anything else: by value
