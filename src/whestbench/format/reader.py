"""Read a dataset directory's raw parts: metadata.json, a split's Parquet shards, and their checksums.

The low-level read side that the loader, merge, combine, verify and the Hub share. Nothing here
validates the metadata's meaning (``schema.validate_metadata`` does) or builds ``datasets`` objects
(the loader does); every failure is an ``InvalidDatasetError`` that names the path and what to do.

The layout read is docs/format.md's (schema 3.0, as whestbench 0.16 and the ``datasets`` library lay
it out). A split's name always comes from metadata; file names are only matched against it, never parsed
into one (0.16 cut names at the first hyphen, so ``round-one`` became ``round``).

**Checksums** live here too, in one implementation: ``checksum_state`` judges a dataset's files
against its ``checksums`` block and reports; ``verify_checksums`` raises on what it reports as a
mismatch (the loader, merge, combine, push and pull call it); ``bind_checksums`` writes the block.
The block is bound to the facts of metadata.json it was written for (``checksums_written_for``),
so a block that another program carried into other metadata (whestbench 0.16's merge copies its
first partial's) is recognised as stale, while a file or a fact changed after the dataset was
written is still refused. See docs/format.md, "Checksums".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping

from whestbench.format.schema import DIGEST_RE, DatasetMeta, is_positive_int
from whestbench.atomic import read_regular
from whestbench.errors import REDO, FileTooLarge, InvalidDatasetError, MergeCorruptError
from whestbench.text import show_value
from whestbench.values import is_int

if TYPE_CHECKING:
    import pyarrow as pa

METADATA_FILE = "metadata.json"
CARD_FILE = "README.md"  # the dataset card: YAML front matter (configs) and prose, made from the metadata
DATA_DIR = "data"
AUDIT_DIR = "audit"  # the audit trail's side files (format/trail.py), outside data/ so 0.16 and datasets skip them
PREPARED_DIR = "prepared"
CHECKSUMS = "checksums"
WRITTEN_FOR = "checksums_written_for"
_HASH_BLOCK = 1 << 22  # 4 MiB reads: files can be GBs, memory stays flat


def metadata_bytes(md: dict[str, Any]) -> bytes:
    """``metadata.json`` as whestbench 0.16 writes it: indent 2, insertion order, no trailing newline."""
    return json.dumps(md, indent=2).encode("utf-8")


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
    if os.path.lexists(path) and not path.is_file():
        raise InvalidDatasetError(
            f"{path} exists but is not a regular file (a directory, a dangling link or a special file); "
            "a dataset's metadata.json is a JSON file: restore the file the bake wrote, or re-bake."
        )
    if not path.is_file():
        raise InvalidDatasetError(
            f"missing metadata.json at {path}; this is not a WhestBench dataset directory "
            "(bake one with `whest dataset bake`, or merge partials with `whest dataset merge`)."
        )
    return read_metadata_file(path)


class DatasetDir(os.PathLike):
    """One dataset directory, read once: what a command opens and passes to its checks instead of a path.

    ``metadata`` is ``metadata.json`` parsed on first use and kept (an error reading it is kept too
    and raised again, so every caller sees the same words at the same point); ``meta`` validates it
    once; ``checksum_state`` judges the files once per scope; ``shards`` lists a split's files once.
    A handle is path-like (``os.fspath``), so code that takes a path takes a handle. The dataset is
    not locked: a handle describes the directory as it was when first read, within one command.
    """

    def __init__(self, path: str | os.PathLike):
        self._given = os.fspath(path)  # as given: Path("") would turn an empty argument into "."
        self.path = Path(os.fsdecode(self._given))
        self._md: dict[str, Any] | None = None
        self._error: InvalidDatasetError | None = None
        self._valid: dict[bool, DatasetMeta] = {}
        self._states: dict[str | None, ChecksumState] = {}
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
                self._md = read_metadata(self.path)
            except InvalidDatasetError as e:
                self._error = e
                raise
        return self._md

    def meta(self, *, allow_partial: bool = False) -> DatasetMeta:
        """The metadata validated (``schema.validate_metadata``), once per ``allow_partial``."""
        if allow_partial not in self._valid:
            self._valid[allow_partial] = DatasetMeta.validated(self.metadata, allow_partial=allow_partial)
        return self._valid[allow_partial]

    def checksum_state(self, *, split: str | None = None) -> "ChecksumState":
        """``checksum_state(path, metadata, split=split)``, each file hashed once: a split's state
        after the whole dataset's is read off the whole's (unless that was a mismatch, which may lie
        in another split)."""
        if split not in self._states:
            whole = self._states.get(None)
            if whole is not None and whole.state != "mismatch":  # a split's scope is part of the whole
                n = sum(_in_scope(rel, split) for rel in _listed(self.metadata) or ())
                self._states[split] = ChecksumState("ok", _ok_detail(n)) if whole.state == "ok" else whole
            else:
                self._states[split] = checksum_state(self.path, self.metadata, split=split)
        return self._states[split]

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
    try:
        raw = read_regular(path, METADATA_MAX_BYTES, "metadata.json")
    except FileTooLarge as e:
        raise InvalidDatasetError.from_error(e, fix=REDO) from None
    try:
        md = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidDatasetError(f"{path} is not valid JSON ({e}). {REDO}") from e
    except RecursionError:  # a document nested deeper than the parser's stack (no dataset writes one)
        raise InvalidDatasetError(f"{path} is nested too deeply to be a dataset's metadata. {REDO}") from None
    if not isinstance(md, dict):
        raise InvalidDatasetError(
            f"{path} must hold a JSON object; got {type(md).__name__}. {REDO}"
        )
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
    directory = Path(directory)
    data = directory / DATA_DIR
    found: list[tuple[int, int, Path]] = []
    if data.is_dir():
        for p in data.iterdir():
            shard = parse_shard(p.name)
            if shard is not None and shard[0] == split and p.is_file():
                found.append((shard[1], shard[2], p))
    if not found:
        raise InvalidDatasetError(
            f"no Parquet shards for split {split!r} in {data} (expected "
            f"{DATA_DIR}/{split}-00000-of-00001.parquet). {REDO}"
        )
    found.sort()
    totals = {total for _, total, _ in found}
    indices = [i for i, _, _ in found]
    total = max(totals)
    if len(totals) != 1 or indices != list(range(total)):
        want = [shard_name(split, i, total) for i in range(total)]
        have = sorted(p.name for _, _, p in found)
        raise InvalidDatasetError(
            f"split {split!r} in {data} has an incomplete or mixed shard set: found {have}, "
            f"expected {want}. {REDO}"
        )
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
            raise InvalidDatasetError(
                f"{path} has no column(s) {missing} (it holds {pf.schema_arrow.names}). "
                f"{REDO}"
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
            f"schemas ({e}). {REDO}"
        ) from e


def _unreadable(path: str | Path, e: Exception) -> InvalidDatasetError:
    return InvalidDatasetError(
        f"{path} is not a readable Parquet file (truncated or corrupt?): {e}. {REDO}"
    )


# ---------------------------------------------------------------------------------------------
# Checksums: computing them, binding them to the metadata, and the one verification


class StaleChecksumsWarning(UserWarning):
    """A dataset's ``checksums`` were carried into it by another program and describe other files."""


def file_sha256(path: str | Path) -> str:
    """``"sha256:<hex>"`` of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def data_checksums(directory: str | Path) -> dict[str, str]:
    """``{"data/<file>" | "audit/<file>": "sha256:<hex>"}`` for every file under ``directory/data`` and
    ``directory/audit``, keys sorted."""
    return _hash_files(Path(directory), (DATA_DIR, AUDIT_DIR))


def dataset_checksums(directory: str | Path) -> dict[str, str]:
    """``{"data/…" | "audit/…" | "prepared/…": "sha256:<hex>"}``: every file of the dataset's data, keys sorted."""
    return _hash_files(Path(directory), (DATA_DIR, AUDIT_DIR, PREPARED_DIR))


def _hash_files(root: Path, subdirs: Iterable[str]) -> dict[str, str]:
    """Hidden paths (a writer's ``.<name>.staging-*``, editor files) are never part of a dataset:
    ``datasets`` and the Hub skip them, so a checksum of one could never be verified elsewhere."""
    files = sorted(
        p
        for sub in subdirs
        if (root / sub).is_dir()
        for p in (root / sub).rglob("*")
        if p.is_file() and not _hidden(p.relative_to(root).as_posix())
    )
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in files}


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


# The facts a checksums block is written for: everything that decides which files a dataset holds and
# which rows must be in them. Provenance (hosts, times, commands, names) is left out, so editing it
# by hand does not make the checksums stale (SPEC: metadata.json is judged on its content).
_SPLIT_FACTS = ("n_mlps", "is_partial", "mlp_range", "total_n_mlps", "seed", "seed_list_digest")
_SHAPE_FACTS = ("width", "depth", "n_samples")
_SLICE_FACTS = ("is_partial", "mlp_range", "total_n_mlps")


def checksum_facts(md: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of ``md`` that its checksums are bound to (``checksums_written_for``).

    Single split: its name, ``n_mlps``, the slice (``is_partial``, ``mlp_range``,
    ``total_n_mlps``), the seeds (``seed``, ``seed_list_digest``); multi-split: the same per split;
    both: ``width``, ``depth``, ``n_samples`` and the seed protocol's name and version.
    """
    facts: dict[str, Any] = {}
    meta = DatasetMeta.of(md)
    if meta.is_multi:
        facts["splits"] = {
            name: {k: entry[k] for k in _SPLIT_FACTS if k in entry}
            for name, entry in meta.blocks.items()
            if isinstance(entry, dict)
        }
    else:
        facts["split"] = meta.splits[0]
        facts.update({k: md[k] for k in _SPLIT_FACTS if k in md})
    facts.update({k: md[k] for k in _SHAPE_FACTS if k in md})
    sp = md.get("seed_protocol")
    if isinstance(sp, dict):
        facts["seed_protocol"] = {k: sp[k] for k in ("name", "version") if k in sp}
    return json.loads(json.dumps(facts))  # as it reads back from metadata.json (tuples become lists)


def bind_checksums(md: dict[str, Any], checksums: Mapping[str, str]) -> None:
    """Give ``md`` the checksums block ``checksums`` bound to its facts as they are now.

    ``checksums_written_for`` then ``checksums`` become the last two keys (earlier copies removed).
    Call it after every other key is final.
    """
    md.pop(WRITTEN_FOR, None)
    md.pop(CHECKSUMS, None)
    md[WRITTEN_FOR] = checksum_facts(md)
    md[CHECKSUMS] = dict(sorted(checksums.items()))


State = Literal["ok", "absent", "stale", "mismatch"]


@dataclass(frozen=True)
class ChecksumState:
    """What a dataset's checksums say about its files.

    ``state``: ``"ok"`` every listed file (in scope) matches; ``"absent"`` none recorded (whestbench
    0.16 writes none); ``"stale"`` a block another program carried over from other metadata, which
    vouches for nothing here; ``"mismatch"`` a file or a bound fact changed, or the block is
    malformed. ``detail``: one line for a report. ``error``: for a mismatch, what
    ``verify_checksums`` raises (naming the first problem in full).
    """

    state: State
    detail: str
    error: InvalidDatasetError | None = None

    def raise_if_mismatch(self) -> None:
        if self.error is not None:
            raise self.error


def checksum_state(directory: str | Path, md: Mapping[str, Any], *, split: str | None = None) -> ChecksumState:
    """Judge the files of ``directory`` against ``md``'s checksums; never raises on a damaged dataset.

    Every listed file must exist with its digest, and no unlisted Parquet file may sit under
    ``data/`` (an extra shard would add rows nobody vouched for). With ``split``, only that
    split's shards are in scope: a one-split load need not hash the other splits.
    """
    directory = Path(directory)
    try:
        listed = _listed(md)
        if listed is None:
            return ChecksumState("absent", "no checksums in metadata.json: a whestbench 0.16 dataset, or written by hand")
        stale = _stale(md)
    except InvalidDatasetError as e:
        return ChecksumState("mismatch", str(e), e)
    if stale is not None:
        return ChecksumState("stale", stale)
    scope = sorted(rel for rel in listed if _in_scope(rel, split))
    problems = [p for rel in scope if (p := _file_problem(directory, rel, listed[rel])) is not None]
    found = [p for sub in (DATA_DIR, AUDIT_DIR) if (directory / sub).is_dir() for p in sorted((directory / sub).rglob("*.parquet"))]
    for p in found:
        rel = p.relative_to(directory).as_posix()
        if rel not in listed and _in_scope(rel, split) and not _hidden(rel):
            problems.append((
                f"{rel} not listed (added after the dataset was written)",
                f"{p} is not listed in metadata.json checksums: the dataset was modified after it was "
                f"written. Remove the file, or {REDO[0].lower()}{REDO[1:]}",
            ))
    if problems:
        return ChecksumState("mismatch", "; ".join(short for short, _ in problems), MergeCorruptError(problems[0][1]))
    return ChecksumState("ok", _ok_detail(len(scope)))


def _ok_detail(n: int) -> str:
    return "1 file matches its sha256" if n == 1 else f"{n} files match their sha256"


def verify_checksums(directory: "str | Path | DatasetDir", md: Mapping[str, Any], *, split: str | None = None
                     ) -> ChecksumState:
    """``checksum_state`` (a ``DatasetDir``'s, computed once), raising its error on a mismatch (MergeCorruptError naming the file or
    the fact; InvalidDatasetError for a malformed block) and warning (``StaleChecksumsWarning``)
    when the checksums are stale. A dataset without checksums passes."""
    state = directory.checksum_state(split=split) if isinstance(directory, DatasetDir) else checksum_state(
        directory, md, split=split)
    state.raise_if_mismatch()
    if state.state == "stale":
        warnings.warn(
            f"{directory}: {state.detail}. Its files are used unchecked; `whest dataset verify "
            f"{directory}` checks their content.",
            StaleChecksumsWarning,
            stacklevel=2,
        )
    return state


def checksums_block(md: Mapping[str, Any]) -> dict[str, str] | None:
    """The ``{path: digest}`` that vouch for this metadata's files, or None when none do (no block,
    as in 0.16 datasets, or a stale one). Raises InvalidDatasetError for a malformed block and
    MergeCorruptError when a fact it was written for has changed since."""
    listed = _listed(md)
    if listed is None or _stale(md) is not None:
        return None
    return listed


def _listed(md: Mapping[str, Any]) -> dict[str, str] | None:
    """``md["checksums"]`` checked for shape (no path may leave the dataset directory), or None."""
    if CHECKSUMS not in md:
        return None
    block = md[CHECKSUMS]
    if not isinstance(block, dict):
        raise InvalidDatasetError(
            f"metadata 'checksums' must be an object mapping file paths to 'sha256:<hex>'; "
            f"got {type(block).__name__}. {REDO}"
        )
    for rel, digest in block.items():
        parts = rel.split("/") if isinstance(rel, str) else []
        if not parts or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
            raise InvalidDatasetError(
                f"metadata 'checksums' has an invalid path {rel!r}: paths are relative to the "
                f"dataset directory, like 'data/public-00000-of-00001.parquet'. {REDO}"
            )
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise InvalidDatasetError(
                f"metadata 'checksums'[{rel!r}] is {digest!r}; expected 'sha256:' and 64 lowercase "
                f"hex digits. {REDO}"
            )
    return block


def _stale(md: Mapping[str, Any]) -> str | None:
    """Why the checksums are stale (a one-line note), or None when they are bound to ``md``.

    Raises MergeCorruptError when a fact they were written for has changed in any other way: a
    hand edit (``n_mlps``, a slice, a seed list) must not turn checksums off. A block without
    ``checksums_written_for`` (written before blocks were bound) is taken as bound.
    """
    recorded = md.get(WRITTEN_FOR)
    if recorded is None:
        return None
    if not isinstance(recorded, dict):
        raise InvalidDatasetError(
            f"metadata '{WRITTEN_FOR}' must be an object (the facts the checksums were written for); "
            f"got {type(recorded).__name__}. {REDO}"
        )
    current = checksum_facts(md)
    if recorded == current:
        return None
    if _carried_by_a_merge(recorded, current, md):
        a, b = recorded["mlp_range"]
        return (
            f"checksums are stale, written by another program: whestbench 0.16's merge copied them "
            f"from the partial holding MLPs [{a}, {b}) of {recorded['total_n_mlps']} into this merge "
            f"of {md['partials_count']} partials; they describe that partial's files, not these"
        )
    changed = [k for k in {**recorded, **current} if recorded.get(k) != current.get(k)]
    key = next((k for k in changed if k not in (*_SLICE_FACTS, "n_mlps")), changed[0])  # a merge explains those
    raise MergeCorruptError(
        f"metadata.json says {key}={show_value(current.get(key), absent='absent')} but its checksums were written for "
        f"{key}={show_value(recorded.get(key), absent='absent')}: metadata.json was edited after the dataset was written. "
        f"Restore it, or {REDO[0].lower()}{REDO[1:]}"
    )


def _carried_by_a_merge(recorded: dict[str, Any], current: dict[str, Any], md: Mapping[str, Any]) -> bool:
    """Whether ``md`` is exactly what whestbench 0.16's merge makes of the partial whose facts
    ``recorded`` holds: the slice facts dropped, ``n_mlps`` the whole bake's, ``partials_count`` and
    ``merged_at_utc`` added, every other fact unchanged. (Our merge writes a fresh block.)"""
    rng, total = recorded.get("mlp_range"), recorded.get("total_n_mlps")
    if recorded.get("is_partial") is not True or not (isinstance(rng, list) and len(rng) == 2):
        return False
    if not all(is_int(v) for v in (*rng, total)):
        return False
    if any(k in current for k in _SLICE_FACTS) or current.get("n_mlps") != recorded.get("total_n_mlps"):
        return False
    count = md.get("partials_count")
    if not is_positive_int(count) or "merged_at_utc" not in md:
        return False
    rest = [k for k in {**recorded, **current} if k not in (*_SLICE_FACTS, "n_mlps")]
    return all(recorded.get(k) == current.get(k) for k in rest)


def _in_scope(rel: str, split: str | None) -> bool:
    if split is None:
        return True
    head, _, name = rel.rpartition("/")
    return head == DATA_DIR and is_shard_of(name, split)


def _file_problem(directory: Path, rel: str, digest: str) -> tuple[str, str] | None:
    """``(short, full)`` description of what is wrong with listed file ``rel``, or None."""
    p = directory / rel
    if not p.is_file():
        return (
            f"{rel} missing",
            f"{p} is listed in metadata.json checksums but is missing: the dataset was modified or "
            f"truncated. {REDO}",
        )
    got = file_sha256(p)
    if got != digest:
        return (
            f"{rel} modified or truncated",
            f"{p} does not match its checksum in metadata.json (expected {digest}, got {got}): the "
            f"file was modified or truncated. {REDO}",
        )
    return None
