"""Write a dataset directory: Parquet shards + ``metadata.json`` + card, staged and renamed atomically.

Shards: ``data/{split}-NNNNN-of-MMMMM.parquet`` of at most ``MAX_SHARD_BYTES``, row groups of at most
``MAX_ROW_GROUP_BYTES`` (the Hub's viewer reads row groups whole), written with the HF ``Features``
schema so ``datasets`` and whestbench 0.16 read them. Rows stream in: memory holds one row group.

The shards are built with pyarrow alone (``shard_schema``, ``rows_table``): importing ``datasets``
costs about a second, the largest part of a small bake's start-up. The schema, and so the files, are
the ones ``datasets`` writes for ``schema.make_features`` (both read ``schema.COLUMN_DOCS``; tests/format/test_writer.py compares them
byte for byte).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from whestbench.atomic import staged_dir, write_file_atomic
from whestbench.errors import InvalidDatasetError
from whestbench.format.card import UNREADABLE, configs_block, read_configs, render_card
from whestbench.format.card_rules import CARD_KEY, combine_card
from whestbench.format.checksums import bind_checksums, dataset_checksums
from whestbench.format.reader import CARD_FILE, DATA_DIR, METADATA_FILE, metadata_bytes, shard_name
from whestbench.format.schema import COLUMNS, column_type, columns_for, hf_features
from whestbench.format.trail import TrailWriter

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

MAX_SHARD_BYTES = 2 * 1024**3
MAX_ROW_GROUP_BYTES = 256 * 1024**2
# What ``datasets`` records for an Array2D/Array3D column (its extension type's name and serialised
# shape and dtype): readers that import ``datasets`` get the extension type back, others the lists.
_EXTENSION_NAME = "datasets.features.features.Array{}DExtensionType"


def row_bytes(width: int, depth: int) -> int:
    """Upper estimate of one row's size (weights dominate: depth*width*width float32)."""
    return 4 * depth * width * width + 4 * depth * width + 4 * width + 4096


def shard_plan(n_rows: int, width: int, depth: int, max_shard_bytes: int) -> list[int]:
    """Row counts per shard: as few shards as keep each under ``max_shard_bytes``, sizes even."""
    per = max(1, max_shard_bytes // row_bytes(width, depth))
    n_shards = max(1, math.ceil(n_rows / per))
    base, extra = divmod(n_rows, n_shards)
    return [base + (1 if i < extra else 0) for i in range(n_shards)]


def write_parquet_shards(
    directory: Path,
    split: str,
    rows: Iterable[dict[str, Any]],
    n_rows: int,
    width: int,
    depth: int,
    *,
    columns: tuple[str, ...] = COLUMNS,
) -> list[Path]:
    """Stream ``rows`` (dicts holding ``columns``) into ``directory/data`` shards of at most
    ``MAX_SHARD_BYTES``; return their paths."""
    import pyarrow.parquet as pq

    schema = shard_schema(width, depth, columns)
    plan = shard_plan(n_rows, width, depth, MAX_SHARD_BYTES)
    group_rows = max(1, MAX_ROW_GROUP_BYTES // row_bytes(width, depth))
    data = Path(directory) / DATA_DIR
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
                writer.write_table(rows_table(batch, width, depth, schema, columns), row_group_size=take)
                left -= take
        paths.append(path)
    return paths


def shard_schema(width: int, depth: int, columns: tuple[str, ...] = COLUMNS) -> "pa.Schema":
    """The shards' Arrow schema without ``datasets``: the storage types of ``make_features(width,
    depth).arrow_schema``, its Array2D/3D columns marked with the extension name and metadata that
    ``datasets`` serialises, and its ``huggingface`` metadata. It serialises to the same bytes."""
    import pyarrow as pa

    def array_nd(shape: list[int]) -> tuple["pa.DataType", dict[str, str]]:
        storage = pa.float32()
        for _ in shape:
            storage = pa.list_(storage)
        return storage, {  # in the order pyarrow serialises an extension type's keys
            "ARROW:extension:metadata": json.dumps([shape, "float32"]),
            "ARROW:extension:name": _EXTENSION_NAME.format(len(shape)),
        }

    def field(name: str) -> "pa.Field":
        dtype, shape = column_type(name, width, depth)
        if len(shape) > 1:
            storage, extension = array_nd(shape)
            return pa.field(name, storage, metadata=extension)
        return pa.field(name, pa.list_(pa.type_for_alias(dtype), shape[0]) if shape else pa.type_for_alias(dtype))

    features = {"info": {"features": hf_features(width, depth, columns)}}
    return pa.schema([field(c) for c in columns], metadata={"huggingface": json.dumps(features)})


def rows_table(batch: list[dict[str, Any]], width: int, depth: int, schema: "pa.Schema | None" = None,
               columns: tuple[str, ...] = COLUMNS) -> "pa.Table":
    """One row group's table of ``batch`` (dicts holding ``columns``) in ``shard_schema``; ValueError
    names a column whose value has the wrong shape or type.

    Arrays are assembled from numpy buffers (``pa.Array.from_buffers``): ``pa.array`` would import
    pandas (~0.15 s) to ask whether its argument is a pandas object.
    """
    import numpy as np
    import pyarrow as pa

    schema = schema if schema is not None else shard_schema(width, depth, columns)
    n = len(batch)

    def buffer_array(kind: "pa.DataType", values: "np.ndarray") -> "pa.Array":
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])

    def numbers(name: str, dtype: type) -> "pa.Array":
        values = np.array([r[name] for r in batch])
        integral = np.issubdtype(dtype, np.integer)
        if values.shape != (n,) or values.dtype.kind not in ("iu" if integral else "iuf"):
            raise ValueError(f"column {name}: expected one {'integer' if integral else 'number'} per row.")
        if integral and n and not (np.iinfo(dtype).min <= values.min() and values.max() <= np.iinfo(dtype).max):
            raise ValueError(f"column {name}: values must fit {np.dtype(dtype).name}.")
        return buffer_array(pa.from_numpy_dtype(dtype), values.astype(dtype))

    def strings(name: str) -> "pa.Array":
        texts = [r[name] for r in batch]
        bad = next((t for t in texts if not isinstance(t, str)), None)
        if bad is not None:
            raise ValueError(f"column {name}: expected a str per row; got {type(bad).__name__}.")
        try:
            data = [t.encode("utf-8") for t in texts]
        except UnicodeEncodeError as e:
            raise ValueError(f"column {name}: not valid text ({e}).") from e
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise ValueError(f"column {name}: more than 2 GiB of text in one row group.")
        buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(pa.string(), n, buffers)

    def floats(name: str, shape: tuple[int, ...]) -> "np.ndarray":
        out = np.empty((n, *shape), dtype=np.float32)
        for i, r in enumerate(batch):
            value = np.asarray(r[name], dtype=np.float32)
            if value.shape != shape:
                raise ValueError(f"row {i}: {name} has shape {value.shape}; expected {shape}.")
            out[i] = value
        return out

    def nested(values: "np.ndarray") -> "pa.Array":
        """(n, d1, ..., dk) float32 -> n rows of list<...list<float>>, one list level per d, innermost first."""
        if values.size >= 2**31:  # (plan.MAX_ROW_FLOATS and MAX_ROW_GROUP_BYTES keep bakes far below)
            raise ValueError("more than 2**31 floats in one row group: Arrow lists cannot index them.")
        arr, count = buffer_array(pa.float32(), values.reshape(-1)), values.size
        for size in reversed(values.shape[1:]):
            count //= size
            offsets = np.arange(count + 1, dtype=np.int64) * size
            arr = pa.ListArray.from_arrays(buffer_array(pa.int32(), offsets.astype(np.int32)), arr)
        return arr

    def column(name: str) -> "pa.Array":
        """By the column's type in ``schema.COLUMN_DOCS``: a string, a number, a float32 list or array."""
        dtype, shape = column_type(name, width, depth)
        if dtype == "string":
            return strings(name)
        if not shape:
            return numbers(name, np.dtype(dtype).type)
        values = floats(name, tuple(shape))
        if len(shape) > 1:
            return nested(values)
        return pa.FixedSizeListArray.from_arrays(buffer_array(pa.float32(), values.reshape(-1)), width)

    return pa.Table.from_arrays([column(c) for c in columns], schema=schema)


def write_dataset(
    output: Path,
    split: str,
    rows: Iterable[dict[str, Any]],
    n_rows: int,
    width: int,
    depth: int,
    md: dict[str, Any],
) -> Path:
    """Write a complete dataset directory at ``output`` atomically; ``md`` gains ``checksums``.

    With an ``audit`` block in ``md``, each row's ``_trail`` (``(SegmentTrail, bounds)``) goes to the
    side file ``audit/<split>.parquet`` (``format.trail``), which the checksums list."""
    audit = md.get("audit")
    with staged_dir(Path(output)) as stage:
        values = audit["values"] if audit is not None else ()
        trail = TrailWriter(stage / audit["file"], depth, width, "cv_means" in values,
                            "pcg64_state" in values) if audit is not None else None

        def strip(rows: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
            for row in rows:
                kept = row.pop("_trail", None)
                if trail is not None:
                    if kept is None:
                        raise ValueError(f"row {row['mlp_id']} has no audit trail, and the metadata has an audit block")
                    trail.add(int(row["mlp_id"]), *kept)
                yield row

        write_parquet_shards(stage, split, strip(rows), n_rows, width, depth, columns=columns_for(md))
        if trail is not None:
            trail.close()
        finish_dataset_dir(stage, md, dataset_checksums(stage))
    return Path(output)


def finish_dataset_dir(directory: Path, md: dict[str, Any], checksums: dict[str, str]) -> None:
    """The last step of every dataset we write (bake, merge, combine): ``md`` gains ``checksums``
    bound to its facts (``checksums.bind_checksums``), then ``metadata.json`` and the dataset card are
    written beside the data."""
    bind_checksums(md, checksums)
    (Path(directory) / METADATA_FILE).write_bytes(metadata_bytes(md))
    (Path(directory) / CARD_FILE).write_text(render_card(md))


def restore_card(root: Any, md: dict[str, Any]) -> bool:
    """Rewrite ``root``'s README.md (atomically) when it is missing or its ``configs`` block is not the
    one ``md`` implies; True when it did. A re-run of a bake, merge or combine calls this: the card
    decides which configs ``datasets`` can load, and it is no part of the checksummed numbers."""
    readme = Path(root) / CARD_FILE
    if readme.is_file() and not readme.is_symlink():
        try:
            if read_configs(readme) == configs_block(md):
                return False
        except UNREADABLE:
            pass
    elif readme.exists() or readme.is_symlink():
        raise InvalidDatasetError(f"{readme} is not a regular file;", fix="move it aside and re-run to write the card.")
    write_file_atomic(readme, render_card(md).encode("utf-8"))
    return True


def update_card(root: Any, md: dict[str, Any], given: dict[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """A re-run (bake, merge, combine-splits) given card fields (``given``: ``--card FILE`` and the card
    flags, checked) that differ from the recorded ``card`` block: record them and rewrite README.md
    (both atomically; the card is no part of the numbers, the checksums or the completion marker).
    Returns ``{field: (old, new)}`` for each field changed (new None: a field the given ones displace,
    ``card_rules.combine_card``); empty when nothing was. README.md is
    written first, so a stop between the two writes leaves metadata.json's old card, and the next
    re-run finds the difference again."""
    recorded = md.get(CARD_KEY) if isinstance(md.get(CARD_KEY), dict) else {}
    card = combine_card(recorded, given or {})
    changed = {k: (recorded.get(k), card.get(k)) for k in sorted({*recorded, *card}) if recorded.get(k) != card.get(k)}
    if not changed:
        return {}
    new_md = {**md, CARD_KEY: card}
    write_file_atomic(Path(root) / CARD_FILE, render_card(new_md).encode("utf-8"))
    write_file_atomic(Path(root) / METADATA_FILE, metadata_bytes(new_md))
    md[CARD_KEY] = card  # new_md, in place: the key keeps its place, or comes last as in new_md
    return changed
