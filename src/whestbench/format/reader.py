"""Read a dataset directory's raw parts: metadata.json and a split's Parquet shards.

The low-level read side that the loader, merge, combine, verify and the Hub share. Nothing here
validates the metadata's meaning (``schema.validate_metadata`` does) or builds ``datasets`` objects
(the loader does); every failure is an ``InvalidDatasetError`` that names the path and what to do.

The layout read is docs/format.md's (schema 3.0, as whestbench 0.16 and the ``datasets`` library lay
it out). A split's name always comes from metadata; file names are only matched against it, never parsed
into one (0.16 cut names at the first hyphen, so ``round-one`` became ``round``). The checksums are
``format/checksums.py``'s.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whestbench.atomic import read_regular
from whestbench.errors import REDO, FileTooLarge, InvalidDatasetError
from whestbench.format.schema import DatasetMeta

if TYPE_CHECKING:
    import pyarrow as pa

METADATA_FILE = "metadata.json"
CARD_FILE = "README.md"  # the dataset card: YAML front matter (configs) and prose, made from the metadata
DATA_DIR = "data"
AUDIT_DIR = "audit"  # the audit trail's side files (format/trail.py), outside data/ so 0.16 and datasets skip them
PREPARED_DIR = "prepared"


def metadata_bytes(md: dict[str, Any]) -> bytes:
    """``metadata.json`` as whestbench 0.16 writes it: indent 2, insertion order, no trailing newline."""
    return json.dumps(md, indent=2).encode("utf-8")


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """The parsed ``metadata.json`` of ``directory`` (not validated): ``metadata_path``'s checks, then
    ``read_metadata_file``'s."""
    return read_metadata_file(metadata_path(directory))


def metadata_path(directory: str | Path) -> Path:
    """``directory/metadata.json``, refused (InvalidDatasetError) for a path that does not exist, a file given
    where a directory belongs (a legacy ``.npz``, or ``metadata.json`` itself), a directory without metadata."""
    directory = Path(directory)
    if not directory.exists():
        raise InvalidDatasetError(f"no such dataset directory: {directory}.", fix="Pass the directory that holds "
                                  "metadata.json and data/ (as written by `whest dataset bake`).")
    if not directory.is_dir():
        raise InvalidDatasetError(
            f"{directory} is a file, not a directory. Schema 3.0 datasets are directories holding "
            "metadata.json and data/;", fix="pass the directory, or re-bake a legacy .npz file with `whest dataset bake`.")
    path = directory / METADATA_FILE
    if os.path.lexists(path) and not path.is_file():
        raise InvalidDatasetError(
            f"{path} exists but is not a regular file (a directory, a dangling link or a special file); "
            "a dataset's metadata.json is a JSON file:", fix="restore the file the bake wrote, or re-bake.")
    if not path.is_file():
        raise InvalidDatasetError(
            f"missing metadata.json at {path}; this is not a WhestBench dataset directory",
            fix="(bake one with `whest dataset bake`, or merge partials with `whest dataset merge`).")
    return path


class DatasetDir(os.PathLike):
    """One dataset directory, read once: what a command opens and passes to its checks instead of a path.

    ``metadata`` is ``metadata.json`` parsed on first use and kept (an error reading it is kept too
    and raised again, so every caller sees the same words at the same point); ``meta`` validates it
    once; ``checksums.checksum_state(handle)`` judges the files once per scope (kept in
    ``checksum_states``); ``shards`` lists a split's files once.
    A handle is path-like (``os.fspath``), so code that takes a path takes a handle. The dataset is
    not locked: a handle describes the directory as it was when first read, within one command.
    """

    def __init__(self, path: str | os.PathLike):
        self._given = os.fspath(path)  # as given: Path("") would turn an empty argument into "."
        self.path = Path(os.fsdecode(self._given))
        self._md: dict[str, Any] | None = None
        self.metadata_bytes: bytes | None = None  # metadata.json as read (push publishes these bytes)
        self._error: InvalidDatasetError | None = None
        self._valid: dict[bool, DatasetMeta] = {}
        self.checksum_states: dict = {}  # split (None: the whole) -> checksums.ChecksumState
        self._shards: dict[str, list[Path]] = {}

    def __fspath__(self):
        return self._given

    def __str__(self) -> str:
        return str(self.path) if self._given else ""

    def __repr__(self) -> str:
        return f"DatasetDir({str(self)!r})"

    @property
    def metadata(self) -> dict[str, Any]:
        """``read_metadata(path)``, read the first time only (not validated)."""
        if self._md is None:
            if self._error is not None:
                raise self._error
            try:
                path = metadata_path(self.path)
                self.metadata_bytes = read_metadata_bytes(path)
                self._md = parse_metadata(self.metadata_bytes, path)
            except InvalidDatasetError as e:
                self._error = e
                raise
        return self._md

    def meta(self, *, allow_partial: bool = False) -> DatasetMeta:
        """The metadata validated (``schema.validate_metadata``), once per ``allow_partial``."""
        if allow_partial not in self._valid:
            self._valid[allow_partial] = DatasetMeta.validated(self.metadata, allow_partial=allow_partial)
        return self._valid[allow_partial]

    def shards(self, split: str) -> list[Path]:
        """``data_files(path, split)``, listed once."""
        if split not in self._shards:
            self._shards[split] = data_files(self.path, split)
        return list(self._shards[split])


def open_dataset(path: "str | os.PathLike | DatasetDir") -> DatasetDir:
    """A ``DatasetDir`` for ``path`` (the handle itself when given one). Reads nothing yet."""
    return path if isinstance(path, DatasetDir) else DatasetDir(path)


METADATA_MAX_BYTES = 64 << 20
"""The most a metadata.json holds: ~2 KiB for a bake, plus ~100 bytes of checksum per shard and ~1 KiB of
provenance per merged partial (a merge of 10,000 partials' 10,000 shards is ~11 MiB); beyond it the file
is no dataset's (it is refused before it is read, local or fetched from the Hub)."""


def read_metadata_file(path: str | Path) -> dict[str, Any]:
    """The parsed JSON object in ``path`` (a ``metadata.json``, local or fetched from the Hub).

    Guards against a file beyond ``METADATA_MAX_BYTES``, invalid JSON, a non-object, and nesting deep
    enough to exhaust the parser's stack.
    """
    path = Path(path)
    return parse_metadata(read_metadata_bytes(path), path)


def read_metadata_bytes(path: str | Path) -> bytes:
    """The bytes of ``path`` (a ``metadata.json``), refused beyond ``METADATA_MAX_BYTES``."""
    try:
        return read_regular(path, METADATA_MAX_BYTES, "metadata.json")
    except FileTooLarge as e:
        raise InvalidDatasetError.from_error(e, fix=REDO) from None


def parse_metadata(raw: bytes, path: str | Path) -> dict[str, Any]:
    """``raw``, the bytes of the metadata.json at ``path``, parsed (``read_metadata_file``'s checks)."""
    try:
        md = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidDatasetError(f"{path} is not valid JSON ({e}).", fix=REDO) from e
    except RecursionError:  # a document nested deeper than the parser's stack (no dataset writes one)
        raise InvalidDatasetError(f"{path} is nested too deeply to be a dataset's metadata.", fix=REDO) from None
    if not isinstance(md, dict):
        raise InvalidDatasetError(f"{path} must hold a JSON object; got {type(md).__name__}.", fix=REDO)
    return md


_SHARD_RE = re.compile(r"^(.+)-(\d{5,})-of-(\d{5,})\.parquet$")  # split, index, total: one way to cut a name


def shard_name(split: str, i: int, n: int) -> str:
    return f"{split}-{i:05d}-of-{n:05d}.parquet"


def shard_glob(split: str) -> str:
    """The pattern of a split's shards relative to the dataset (the card's ``configs`` ``path``)."""
    return f"{DATA_DIR}/{split}-*.parquet"


def holds_dataset(path: str | Path) -> bool:
    """Whether ``path`` (not a link) holds a ``metadata.json`` file; a path the OS refuses to look at (a
    name too long, a parent that is a file) holds none, and the output check says why."""
    try:
        return not os.path.islink(path) and (Path(path) / METADATA_FILE).is_file()
    except OSError:
        return False


def parse_shard(name: str) -> tuple[str, int, int] | None:
    """``(split, index, total)`` of a shard's file name, or None for any other name."""
    m = _SHARD_RE.match(name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def is_shard_of(name: str, split: str) -> bool:
    """Whether file name ``name`` is one of ``split``'s shards (``round`` never claims ``round-one-…``)."""
    shard = parse_shard(name)
    return shard is not None and shard[0] == split


def data_files(directory: "str | Path | DatasetDir", split: str) -> list[Path]:
    """``split``'s Parquet shards under ``directory/data``, in shard order (an open ``DatasetDir``
    lists them once: ``shards``).

    Guards against a split with no files and a shard set with holes (``00001-of-00003`` missing, or
    shards from two different writes mixed), which would silently load fewer rows.
    """
    if isinstance(directory, DatasetDir):
        return directory.shards(split)
    data = Path(directory) / DATA_DIR
    found = sorted((shard[1], shard[2], p) for p in (data.iterdir() if data.is_dir() else ())
                   if (shard := parse_shard(p.name)) is not None and shard[0] == split and p.is_file())
    if not found:
        raise InvalidDatasetError(f"no Parquet shards for split {split!r} in {data} (expected "
                                  f"{DATA_DIR}/{split}-00000-of-00001.parquet).", fix=REDO)
    totals = {total for _, total, _ in found}
    indices = [i for i, _, _ in found]
    total = max(totals)
    if len(totals) != 1 or indices != list(range(total)):
        want = [shard_name(split, i, total) for i in range(total)]
        have = sorted(p.name for _, _, p in found)
        raise InvalidDatasetError(f"split {split!r} in {data} has an incomplete or mixed shard set: found {have}, "
                                  f"expected {want}.", fix=REDO)
    return [p for _, _, p in found]


def parquet_footer(path: str | Path):
    """The ``pyarrow.parquet.FileMetaData`` of one shard (reads only the footer)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException by case
        raise _unreadable(path, e) from e


def read_table(directory: "str | Path | DatasetDir", split: str, columns: list[str] | None = None) -> "pa.Table":
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
            raise InvalidDatasetError(f"{path} has no column(s) {missing} (it holds {pf.schema_arrow.names}).", fix=REDO)
        try:
            tables.append(pf.read(columns=columns))
        except Exception as e:  # a corrupt page or bad compression deep inside the file
            raise _unreadable(path, e) from e
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise InvalidDatasetError(f"the shards of split {split!r} in {Path(directory) / DATA_DIR} have different "
                                  f"schemas ({e}).", fix=REDO) from e


def _unreadable(path: str | Path, e: Exception) -> InvalidDatasetError:
    return InvalidDatasetError(f"{path} is not a readable Parquet file (truncated or corrupt?): {e}.", fix=REDO)
