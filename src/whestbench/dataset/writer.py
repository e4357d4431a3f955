"""Write a dataset directory: Parquet shards + ``metadata.json`` + card, staged and renamed atomically.

Shards: ``data/{split}-NNNNN-of-MMMMM.parquet`` of at most ``MAX_SHARD_BYTES``, row groups of at most
``MAX_ROW_GROUP_BYTES`` (the Hub's viewer reads row groups whole), written with the HF ``Features``
schema so ``datasets`` and whestbench 0.16 read them. Rows stream in: memory holds one row group.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from whestbench.atomic import staged_dir
from whestbench.dataset.reader import bind_checksums, data_checksums
from whestbench.dataset.schema import COLUMNS, columns_for, make_features

MAX_SHARD_BYTES = 2 * 1024**3
MAX_ROW_GROUP_BYTES = 256 * 1024**2


def row_bytes(width: int, depth: int) -> int:
    """Upper estimate of one row's size (weights dominate: depth*width*width float32)."""
    return 4 * depth * width * width + 4 * depth * width + 4 * width + 4096


def shard_plan(n_rows: int, width: int, depth: int, max_shard_bytes: int = MAX_SHARD_BYTES) -> list[int]:
    """Row counts per shard: as few shards as keep each under ``max_shard_bytes``, sizes even."""
    per = max(1, max_shard_bytes // row_bytes(width, depth))
    n_shards = max(1, math.ceil(n_rows / per))
    base, extra = divmod(n_rows, n_shards)
    return [base + (1 if i < extra else 0) for i in range(n_shards)]


def shard_name(split: str, i: int, n: int) -> str:
    return f"{split}-{i:05d}-of-{n:05d}.parquet"


def write_metadata_json(directory: Path, md: dict[str, Any]) -> None:
    """``metadata.json`` as whestbench 0.16 writes it: indent 2, insertion order, no trailing newline."""
    (Path(directory) / "metadata.json").write_text(json.dumps(md, indent=2))


def write_parquet_shards(
    directory: Path,
    split: str,
    rows: Iterable[dict[str, Any]],
    n_rows: int,
    width: int,
    depth: int,
    *,
    max_shard_bytes: int = MAX_SHARD_BYTES,
    max_row_group_bytes: int = MAX_ROW_GROUP_BYTES,
    columns: tuple[str, ...] = COLUMNS,
) -> list[Path]:
    """Stream ``rows`` (dicts holding ``columns``) into ``directory/data`` shards; return their paths."""
    import datasets
    import pyarrow.parquet as pq

    features = make_features(width, depth, columns)
    schema = features.arrow_schema
    plan = shard_plan(n_rows, width, depth, max_shard_bytes)
    group_rows = max(1, max_row_group_bytes // row_bytes(width, depth))
    data = Path(directory) / "data"
    data.mkdir(parents=True, exist_ok=True)
    it: Iterator[dict[str, Any]] = iter(rows)
    paths = []
    for i, count in enumerate(plan):
        path = data / shard_name(split, i, len(plan))
        with pq.ParquetWriter(path, schema, compression="snappy") as writer:
            left = count
            while left:
                take = min(left, group_rows)
                batch = [next(it) for _ in range(take)]
                cols = {name: [r[name] for r in batch] for name in features}
                # datasets builds the extension arrays (Array2D/3D) exactly as it does for its own writes
                table = datasets.Dataset.from_dict(cols, features=features).data.table
                writer.write_table(table, row_group_size=take)
                left -= take
        paths.append(path)
    return paths


def write_dataset(
    output: Path,
    split: str,
    rows: Iterable[dict[str, Any]],
    n_rows: int,
    width: int,
    depth: int,
    md: dict[str, Any],
    *,
    render_card: Callable[[dict[str, Any]], str] | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Write a complete dataset directory at ``output`` atomically; ``md`` gains ``checksums``."""
    with staged_dir(Path(output)) as stage:
        write_parquet_shards(stage, split, rows, n_rows, width, depth, max_shard_bytes=max_shard_bytes,
                             columns=columns_for(md))
        finish_dataset_dir(stage, md, data_checksums(stage), render_card=render_card)
    return Path(output)


def finish_dataset_dir(
    directory: Path,
    md: dict[str, Any],
    checksums: dict[str, str],
    *,
    render_card: Callable[[dict[str, Any]], str] | None = None,
) -> None:
    """The last step of every dataset we write (bake, merge, combine): ``md`` gains ``checksums``
    bound to its facts (``reader.bind_checksums``), then ``metadata.json`` and the dataset card are
    written beside the data."""
    if render_card is None:
        from whestbench.dataset.card import render_card
    bind_checksums(md, checksums)
    write_metadata_json(directory, md)
    (Path(directory) / "README.md").write_text(render_card(md))
