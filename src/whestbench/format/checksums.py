"""A dataset's checksums: computing them, binding them to the metadata, and the one verification.

``checksum_state`` judges a dataset's files against its ``checksums`` block and reports (a
``DatasetDir`` hashes each file once); ``verify_checksums`` raises on what it reports as a mismatch
(the loader, merge, combine, push and pull call it); ``bind_checksums`` writes the block. The block is
bound to the facts of metadata.json it was written for (``checksums_written_for``), so a block that
another program carried into other metadata (whestbench 0.16's merge copies its first partial's) is
recognised as stale, while a file or a fact changed after the dataset was written is still refused.
See docs/format.md, "Checksums".
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from whestbench.errors import REDO, InvalidDatasetError, MergeCorruptError
from whestbench.format.reader import AUDIT_DIR, DATA_DIR, PREPARED_DIR, DatasetDir, is_shard_of
from whestbench.format.schema import DIGEST_RE, DatasetMeta, is_positive_int
from whestbench.text import show_value
from whestbench.values import is_int

CHECKSUMS = "checksums"
WRITTEN_FOR = "checksums_written_for"
_HASH_BLOCK = 1 << 22  # 4 MiB reads: files can be GBs, memory stays flat
_REDO_AFTER = f"{REDO[0].lower()}{REDO[1:]}"  # REDO after "Restore it, or"


class StaleChecksumsWarning(UserWarning):
    """A dataset's ``checksums`` were carried into it by another program and describe other files."""


def file_sha256(path: str | Path) -> str:
    """``"sha256:<hex>"`` of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def dataset_checksums(directory: str | Path) -> dict[str, str]:
    """``{"data/…" | "audit/…" | "prepared/…": "sha256:<hex>"}``: every file of the dataset's data, keys
    sorted. Hidden paths (a writer's ``.<name>.staging-*``, editor files) are never part of a dataset:
    ``datasets`` and the Hub skip them, so a checksum of one could never be verified elsewhere."""
    root = Path(directory)
    files = sorted(p.relative_to(root).as_posix() for sub in (DATA_DIR, AUDIT_DIR, PREPARED_DIR)
                   if (root / sub).is_dir() for p in (root / sub).rglob("*") if p.is_file())
    return {rel: file_sha256(root / rel) for rel in files if not _hidden(rel)}


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


# The facts a checksums block is written for: everything that decides which files a dataset holds and
# which rows must be in them. Provenance (hosts, times, commands, names) is left out, so editing it
# by hand does not make the checksums stale (SPEC: metadata.json is judged on its content).
_SPLIT_FACTS = ("n_mlps", "is_partial", "mlp_range", "total_n_mlps", "seed", "seed_list_digest")
_SHAPE_FACTS = ("width", "depth", "n_samples")
_SLICE_FACTS = ("is_partial", "mlp_range", "total_n_mlps")


def _facts(md: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of ``md`` that its checksums are bound to (``checksums_written_for``): each split's
    (its name when single) ``_SPLIT_FACTS``, the ``_SHAPE_FACTS`` and the seed protocol's name and version."""
    facts: dict[str, Any] = {}
    meta = DatasetMeta.of(md)
    if meta.is_multi:
        facts["splits"] = {name: {k: entry[k] for k in _SPLIT_FACTS if k in entry}
                           for name, entry in meta.blocks.items() if isinstance(entry, dict)}
    else:
        facts["split"] = meta.splits[0]
        facts.update({k: md[k] for k in _SPLIT_FACTS if k in md})
    facts.update({k: md[k] for k in _SHAPE_FACTS if k in md})
    sp = md.get("seed_protocol")
    if isinstance(sp, dict):
        facts["seed_protocol"] = {k: sp[k] for k in ("name", "version") if k in sp}
    return json.loads(json.dumps(facts))  # as it reads back from metadata.json (tuples become lists)


def bind_checksums(md: dict[str, Any], checksums: Mapping[str, str]) -> None:
    """Give ``md`` the block ``checksums`` bound to its facts as they are now: ``checksums_written_for``
    then ``checksums`` become its last two keys. Call it after every other key is final."""
    md.pop(WRITTEN_FOR, None)
    md.pop(CHECKSUMS, None)
    md[WRITTEN_FOR] = _facts(md)
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


def checksum_state(directory: "str | Path | DatasetDir", md: Mapping[str, Any] | None = None, *,
                   split: str | None = None) -> ChecksumState:
    """Judge the files of ``directory`` against ``md``'s checksums (an open ``DatasetDir``: its own
    metadata's, each file hashed once); never raises on a damaged dataset.

    Every listed file must exist with its digest, and no unlisted Parquet file may sit under
    ``data/`` (an extra shard would add rows nobody vouched for). With ``split``, only that
    split's shards are in scope: a one-split load need not hash the other splits.
    """
    if isinstance(directory, DatasetDir):
        return _handle_state(directory, split)
    return _judge(Path(directory), md if md is not None else {}, split)


def _handle_state(handle: DatasetDir, split: str | None) -> ChecksumState:
    """A handle's state for ``split``, judged once: a split's after the whole dataset's is read off the
    whole's (unless that was a mismatch, which may lie in another split)."""
    states = handle.checksum_states
    if split not in states:
        whole = states.get(None)
        if whole is not None and whole.state != "mismatch":  # a split's scope is part of the whole
            n = sum(_in_scope(rel, split) for rel in _listed(handle.metadata) or ())
            states[split] = ChecksumState("ok", _ok_detail(n)) if whole.state == "ok" else whole
        else:
            states[split] = _judge(handle.path, handle.metadata, split)
    return states[split]


def _judge(directory: Path, md: Mapping[str, Any], split: str | None) -> ChecksumState:
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
            problems.append((f"{rel} not listed (added after the dataset was written)", MergeCorruptError(
                f"{p} is not listed in metadata.json checksums: the dataset was modified after it was written.",
                fix=f"Remove the file, or {_REDO_AFTER}")))
    if problems:
        return ChecksumState("mismatch", "; ".join(short for short, _ in problems), problems[0][1])
    return ChecksumState("ok", _ok_detail(len(scope)))


def _ok_detail(n: int) -> str:
    return "1 file matches its sha256" if n == 1 else f"{n} files match their sha256"


def verify_checksums(directory: "str | Path | DatasetDir", md: Mapping[str, Any], *, split: str | None = None
                     ) -> ChecksumState:
    """``checksum_state``, raising its error on a mismatch (MergeCorruptError naming the file or the fact;
    InvalidDatasetError for a malformed block) and warning (``StaleChecksumsWarning``) when the
    checksums are stale. A dataset without checksums passes."""
    state = checksum_state(directory, md, split=split)
    state.raise_if_mismatch()
    if state.state == "stale":
        warnings.warn(f"{directory}: {state.detail}. Its files are used unchecked; `whest dataset verify {directory}` "
                      "checks their content.", StaleChecksumsWarning, stacklevel=2)
    return state


def checksums_block(md: Mapping[str, Any]) -> dict[str, str] | None:
    """The ``{path: digest}`` that vouch for this metadata's files, or None when none do (no block,
    as in 0.16 datasets, or a stale one). Raises InvalidDatasetError for a malformed block and
    MergeCorruptError when a fact it was written for has changed since."""
    listed = _listed(md)
    return None if listed is None or _stale(md) is not None else listed


def _listed(md: Mapping[str, Any]) -> dict[str, str] | None:
    """``md["checksums"]`` checked for shape (no path may leave the dataset directory), or None."""
    if CHECKSUMS not in md:
        return None
    block = md[CHECKSUMS]
    if not isinstance(block, dict):
        raise InvalidDatasetError(f"metadata 'checksums' must be an object mapping file paths to 'sha256:<hex>'; "
                                  f"got {type(block).__name__}.", fix=REDO)
    for rel, digest in block.items():
        parts = rel.split("/") if isinstance(rel, str) else []
        if not parts or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
            raise InvalidDatasetError(f"metadata 'checksums' has an invalid path {rel!r}: paths are relative to the "
                                      "dataset directory, like 'data/public-00000-of-00001.parquet'.", fix=REDO)
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise InvalidDatasetError(f"metadata 'checksums'[{rel!r}] is {digest!r}; expected 'sha256:' and 64 "
                                      "lowercase hex digits.", fix=REDO)
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
        raise InvalidDatasetError(f"metadata '{WRITTEN_FOR}' must be an object (the facts the checksums were written "
                                  f"for); got {type(recorded).__name__}.", fix=REDO)
    current = _facts(md)
    if recorded == current:
        return None
    if _carried_by_a_merge(recorded, current, md):
        a, b = recorded["mlp_range"]
        return (f"checksums are stale, written by another program: whestbench 0.16's merge copied them from the "
                f"partial holding MLPs [{a}, {b}) of {recorded['total_n_mlps']} into this merge of "
                f"{md['partials_count']} partials; they describe that partial's files, not these")
    changed = [k for k in {**recorded, **current} if recorded.get(k) != current.get(k)]
    key = next((k for k in changed if k not in (*_SLICE_FACTS, "n_mlps")), changed[0])  # a merge explains those
    raise MergeCorruptError(
        f"metadata.json says {key}={show_value(current.get(key), absent='absent')} but its checksums were written for "
        f"{key}={show_value(recorded.get(key), absent='absent')}: metadata.json was edited after the dataset was written.",
        fix=f"Restore it, or {_REDO_AFTER}")


def _carried_by_a_merge(recorded: dict[str, Any], current: dict[str, Any], md: Mapping[str, Any]) -> bool:
    """Whether ``md`` is exactly what whestbench 0.16's merge makes of the partial whose facts
    ``recorded`` holds: the slice facts dropped, ``n_mlps`` the whole bake's, ``partials_count`` and
    ``merged_at_utc`` added, every other fact unchanged. (Our merge writes a fresh block.)"""
    rng, total = recorded.get("mlp_range"), recorded.get("total_n_mlps")
    if recorded.get("is_partial") is not True or not (isinstance(rng, list) and len(rng) == 2
                                                      and all(is_int(v) for v in (*rng, total))):
        return False
    if any(k in current for k in _SLICE_FACTS) or current.get("n_mlps") != total:
        return False
    if not is_positive_int(md.get("partials_count")) or "merged_at_utc" not in md:
        return False
    rest = [k for k in {**recorded, **current} if k not in (*_SLICE_FACTS, "n_mlps")]
    return all(recorded.get(k) == current.get(k) for k in rest)


def _in_scope(rel: str, split: str | None) -> bool:
    if split is None:
        return True
    head, _, name = rel.rpartition("/")
    return head == DATA_DIR and is_shard_of(name, split)


def _file_problem(directory: Path, rel: str, digest: str) -> tuple[str, MergeCorruptError] | None:
    """``(short, error)``: what is wrong with listed file ``rel``, or None."""
    p = directory / rel
    if not p.is_file():
        return f"{rel} missing", MergeCorruptError(
            f"{p} is listed in metadata.json checksums but is missing: the dataset was modified or truncated.",
            fix=REDO)
    got = file_sha256(p)
    if got != digest:
        return f"{rel} modified or truncated", MergeCorruptError(
            f"{p} does not match its checksum in metadata.json (expected {digest}, got {got}): the file was "
            "modified or truncated.", fix=REDO)
    return None
