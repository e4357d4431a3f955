"""Read a dataset directory's raw parts: metadata.json, a split's Parquet shards, and their checksums.

The low-level read side that the loader, merge, combine and verify share. Nothing here validates the
metadata's meaning (``schema.validate_metadata`` does) or builds ``datasets`` objects (the loader
does); every failure is an ``InvalidDatasetError`` that names the path and what to do.

Layout read here (schema 3.0, as whestbench 0.16 and the ``datasets`` library lay it out)::

    <dir>/metadata.json
    <dir>/data/<split>-NNNNN-of-MMMMM.parquet     # one or more shards per split

A split's name always comes from metadata; file names are only matched against it, never parsed
into one (0.16 cut names at the first hyphen, so ``round-one`` became ``round``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from whestbench.dataset.errors import InvalidDatasetError, MergeCorruptError

if TYPE_CHECKING:
    import pyarrow as pa

METADATA_FILE = "metadata.json"
DATA_DIR = "data"
_HASH_BLOCK = 1 << 22  # 4 MiB reads: files can be GBs, memory stays flat
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REDO = "Re-download the dataset or re-bake it with `whest dataset bake`."


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """The parsed ``metadata.json`` of ``directory`` (not validated).

    Guards against: a path that does not exist, a file given where a directory belongs (a legacy
    ``.npz``, or ``metadata.json`` itself), a directory without metadata, and unreadable JSON.
    """
    directory = Path(directory)
    if not directory.exists():
        raise InvalidDatasetError(
            f"no such dataset directory: {directory}. Pass the directory that holds "
            "metadata.json and data/ (as written by `whest dataset bake`)."
        )
    if not directory.is_dir():
        raise InvalidDatasetError(
            f"{directory} is a file, not a directory. Schema 3.0 datasets are directories holding "
            "metadata.json and data/; pass the directory, or re-bake a legacy .npz file with "
            "`whest dataset bake`."
        )
    path = directory / METADATA_FILE
    if not path.is_file():
        raise InvalidDatasetError(
            f"missing metadata.json at {path}; this is not a WhestBench dataset directory "
            "(bake one with `whest dataset bake`, or merge partials with `whest dataset merge`)."
        )
    return read_metadata_file(path)


def read_metadata_file(path: str | Path) -> dict[str, Any]:
    """The parsed JSON object in ``path`` (a ``metadata.json``, local or fetched from the Hub)."""
    path = Path(path)
    try:
        md = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidDatasetError(f"{path} is not valid JSON ({e}). {_REDO}") from e
    if not isinstance(md, dict):
        raise InvalidDatasetError(
            f"{path} must hold a JSON object; got {type(md).__name__}. {_REDO}"
        )
    return md


def _shard_re(split: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(split)}-(\d{{5,}})-of-(\d{{5,}})\.parquet$")


def is_shard_of(name: str, split: str) -> bool:
    """Whether file name ``name`` is one of ``split``'s shards (``round`` never claims ``round-one-…``)."""
    return _shard_re(split).match(name) is not None


def data_files(directory: str | Path, split: str) -> list[Path]:
    """``split``'s Parquet shards under ``directory/data``, in shard order.

    Guards against a split with no files and a shard set with holes (``00001-of-00003`` missing, or
    shards from two different writes mixed), which would silently load fewer rows.
    """
    directory = Path(directory)
    data = directory / DATA_DIR
    pattern = _shard_re(split)
    found: list[tuple[int, int, Path]] = []
    if data.is_dir():
        for p in data.iterdir():
            m = pattern.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), int(m.group(2)), p))
    if not found:
        raise InvalidDatasetError(
            f"no Parquet shards for split {split!r} in {data} (expected "
            f"{DATA_DIR}/{split}-00000-of-00001.parquet). {_REDO}"
        )
    found.sort()
    totals = {total for _, total, _ in found}
    indices = [i for i, _, _ in found]
    total = max(totals)
    if len(totals) != 1 or indices != list(range(total)):
        want = [f"{split}-{i:05d}-of-{total:05d}.parquet" for i in range(total)]
        have = sorted(p.name for _, _, p in found)
        raise InvalidDatasetError(
            f"split {split!r} in {data} has an incomplete or mixed shard set: found {have}, "
            f"expected {want}. {_REDO}"
        )
    return [p for _, _, p in found]


def file_sha256(path: str | Path) -> str:
    """``"sha256:<hex>"`` of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def data_checksums(directory: str | Path) -> dict[str, str]:
    """``{"data/<file>": "sha256:<hex>"}`` for every file under ``directory/data``, keys sorted."""
    directory = Path(directory)
    files = sorted(p for p in (directory / DATA_DIR).rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): file_sha256(p) for p in files}


def checksums_block(md: Mapping[str, Any]) -> dict[str, str] | None:
    """``md["checksums"]`` checked for shape, or None when the dataset has none (made by 0.16).

    Guards against a hand-edited block whose paths would escape the dataset directory.
    """
    if "checksums" not in md:
        return None
    block = md["checksums"]
    if not isinstance(block, dict):
        raise InvalidDatasetError(
            f"metadata 'checksums' must be an object mapping file paths to 'sha256:<hex>'; "
            f"got {type(block).__name__}. {_REDO}"
        )
    for rel, digest in block.items():
        parts = rel.split("/") if isinstance(rel, str) else []
        if not parts or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
            raise InvalidDatasetError(
                f"metadata 'checksums' has an invalid path {rel!r}: paths are relative to the "
                f"dataset directory, like 'data/public-00000-of-00001.parquet'. {_REDO}"
            )
        if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
            raise InvalidDatasetError(
                f"metadata 'checksums'[{rel!r}] is {digest!r}; expected 'sha256:' and 64 lowercase "
                f"hex digits. {_REDO}"
            )
    return block


def verify_files(directory: str | Path, listed: Mapping[str, str], paths: Iterable[str]) -> None:
    """Check that each relative path in ``paths`` exists with the digest ``listed`` gives it."""
    directory = Path(directory)
    for rel in paths:
        p = directory / rel
        if not p.is_file():
            raise MergeCorruptError(
                f"{p} is listed in metadata.json checksums but is missing: the dataset was modified "
                f"or truncated. {_REDO}"
            )
        got = file_sha256(p)
        if got != listed[rel]:
            raise MergeCorruptError(
                f"{p} does not match its checksum in metadata.json (expected {listed[rel]}, "
                f"got {got}): the file was modified or truncated. {_REDO}"
            )


def verify_checksums(directory: str | Path, md: Mapping[str, Any], *, split: str | None = None) -> None:
    """Check the data files against ``md["checksums"]``; datasets without the block pass.

    Every listed file must exist with its digest, and no unlisted Parquet file may sit under
    ``data/`` (an extra shard would add rows the checksums never vouched for). With ``split``,
    only that split's shards are checked — a one-split load need not hash the other splits.
    Raises MergeCorruptError naming the file.
    """
    listed = checksums_block(md)
    if listed is None:
        return
    directory = Path(directory)

    def in_scope(rel: str) -> bool:
        if split is None:
            return True
        head, _, name = rel.rpartition("/")
        return head == DATA_DIR and is_shard_of(name, split)

    verify_files(directory, listed, sorted(rel for rel in listed if in_scope(rel)))
    for p in sorted((directory / DATA_DIR).rglob("*.parquet")):
        rel = p.relative_to(directory).as_posix()
        if rel not in listed and in_scope(rel):
            raise MergeCorruptError(
                f"{p} is not listed in metadata.json checksums: the dataset was modified after it "
                "was written. Remove the file, or re-download or re-bake the dataset."
            )


def parquet_footer(path: str | Path):
    """The ``pyarrow.parquet.FileMetaData`` of one shard (reads only the footer)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException by case
        raise _unreadable(path, e) from e


def read_table(directory: str | Path, split: str, columns: list[str] | None = None) -> "pa.Table":
    """``split``'s rows from all its shards as one ``pyarrow.Table`` (shard order).

    Does not check checksums: callers that need integrity call ``verify_checksums`` first.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path in data_files(directory, split):
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException by case
            raise _unreadable(path, e) from e
        missing = [c for c in columns or () if c not in pf.schema_arrow.names]
        if missing:
            raise InvalidDatasetError(
                f"{path} has no column(s) {missing}; a WhestBench shard has {pf.schema_arrow.names}. "
                f"{_REDO}"
            )
        try:
            tables.append(pf.read(columns=columns))
        except Exception as e:  # a corrupt page or bad compression deep inside the file
            raise _unreadable(path, e) from e
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise InvalidDatasetError(
            f"the shards of split {split!r} in {Path(directory) / DATA_DIR} have different "
            f"schemas ({e}). {_REDO}"
        ) from e


def _unreadable(path: str | Path, e: Exception) -> InvalidDatasetError:
    return InvalidDatasetError(
        f"{path} is not a readable Parquet file (truncated or corrupt?): {e}. {_REDO}"
    )
