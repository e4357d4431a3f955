"""Fetch a dataset from the Hugging Face Hub: ``pull_dataset`` (``whest dataset pull``).

It resolves the revision to a commit first (one metadata call that also sizes the download and
catches a ``--split`` that matches nothing), downloads into ``.<output>.pull-staging`` beside
``--output`` (kept on a network failure so re-running resumes), checks the checksums, and renames.
Its events are docs/hub.md's; references are ``hub/ref.py``, the retry policy and the Hub's errors
``hub/client.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from whestbench.atomic import fsync_dir, fsync_tree, read_regular
from whestbench.errors import HubError, InvalidDatasetError, UsageError
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.format.checksums import checksums_block, verify_checksums
from whestbench.format.reader import (CARD_FILE, DATA_DIR, METADATA_FILE, PREPARED_DIR, is_shard_of, parse_shard,
                                      read_metadata_file)
from whestbench.format.schema import check_name, validate_metadata
from whestbench.format.trail import audit_path
from whestbench.hub.client import call, check_token, hub_client, not_a_dataset, repo_info
from whestbench.hub.ref import REPO_TYPE, parse_ref
from whestbench.hubenv import import_hub
from whestbench.paths import check_new_output
from whestbench.text import format_bytes, plural, sanitize

_STAGING_MARK = ".whestbench-pull.json"
_PROGRESS_SECONDS = 1.0  # how often a pull reports the bytes on disk


@dataclass(frozen=True)
class PullResult:
    repo_id: str
    revision: str | None  # as asked (None: the default branch)
    commit: str  # the commit the files came from
    path: Path  # --output, or the snapshot in the Hugging Face cache
    files: tuple[str, ...]
    bytes: int
    verified: int  # data files checked against metadata.json checksums (0: the dataset has none)
    cached: bool  # True: no --output, the files live in the Hugging Face cache
    split: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def split_files(paths: Sequence[str], split: str) -> list[str]:
    """The repo files a one-split download needs: the split's shards, its prepared Arrow copy, its audit
    trail, the metadata and the card. Shards are matched exactly, so split ``round`` never takes ``round-one``'s."""
    keep = []
    for p in paths:
        head, _, name = p.rpartition("/")
        if ((head == DATA_DIR and is_shard_of(name, split)) or p.startswith(f"{PREPARED_DIR}/{split}/") or p in (METADATA_FILE, CARD_FILE)
                or p == audit_path(split)):
            keep.append(p)
    return keep


def staging_path(output: Path) -> Path:
    return output.parent / f".{output.name}.pull-staging"


def pull_dataset(
    repo: str,
    *,
    revision: str | None = None,
    output: str | Path | None = None,
    split: str | None = None,
    token: str | None = None,
    on_event: EventSink | None = None,
) -> PullResult:
    """Download the Hub dataset ``repo`` (any form of ``hub.ref.parse_ref``'s grammar) and check it.

    With ``output``: into that new directory (refused up front if it exists), atomically — it
    appears complete or not at all. Without: into the Hugging Face cache (reruns are free).
    ``split``: only that split's shards (and its prepared Arrow copy), metadata.json and README.md.
    Data files are checked against metadata.json's checksums when it has them.
    Events: ``preflight`` (files, bytes, commit; progress total = the bytes to fetch), ``progress``
    (bytes on disk, about once a second, from a watcher thread), ``downloaded``, ``verified``.
    """
    sink, lock = on_event or ignore, threading.Lock()  # a pull emits from its own thread and from the progress watcher

    def emit(event: Event) -> None:
        with lock:
            sink(event)

    ref = parse_ref(repo, revision)
    check_token(token)
    if split is not None:
        try:
            check_name(split)
        except InvalidDatasetError as e:
            raise UsageError.from_error(e, where="--split") from None
    out = check_new_output(output) if output is not None else None
    huggingface_hub = hub_client()

    where = ref.uri
    what = f"pulling {where}"
    info = repo_info(ref, token=token, files_metadata=True, what=what, on_event=emit)
    commit = info.sha
    sizes = {s.rfilename: (s.size or 0) for s in (info.siblings or [])}
    if METADATA_FILE not in sizes:
        raise not_a_dataset(where)
    wanted = sorted(sizes) if split is None else split_files(list(sizes), split)
    if split is not None and not any(p.startswith(DATA_DIR + "/") for p in wanted):
        shards = (parse_shard(p[len(DATA_DIR) + 1 :]) for p in sizes if p.startswith(DATA_DIR + "/"))
        raise InvalidDatasetError(f"--split {split!r} matched no parquet files in {where}; its splits are "
                                  f"{[sanitize(s) for s in sorted({sh[0] for sh in shards if sh is not None})]}.",
                                  fix="Pass one of them, or omit --split for the whole dataset.")
    # allow_patterns entries that match exactly each path (fnmatch metacharacters escaped); None: every file
    patterns = None if split is None else [re.sub(r"([\[\]*?])", r"[\1]", p) for p in wanted]
    total = sum(sizes[p] for p in wanted)
    emit(Event("preflight", message=f"Preflight: {plural(len(wanted), 'file')}, {format_bytes(total)} at commit "
                                    f"{commit[:12]}.",
               progress=Progress("bytes", 0, total),
               data={"files": len(wanted), "bytes": total, "commit": commit, "repo_id": ref.repo_id}))

    def download(watched: Path, **where_to: Any) -> str:
        with _DiskProgress(watched, total, emit):
            return call(lambda: huggingface_hub.snapshot_download(
                ref.repo_id, repo_type=REPO_TYPE, revision=commit, allow_patterns=patterns, token=token, **where_to),
                what=what, ref=ref, token=token, on_event=emit)

    if out is None:
        cache = Path(import_hub("huggingface_hub.constants").HF_HUB_CACHE)  # what a pull without --output fills
        path = Path(download(cache / ("datasets--" + ref.repo_id.replace("/", "--"))))
        emit(Event("downloaded", message=f"Cached {where} in {path}", progress=Progress("bytes", total, total),
                   data={"path": str(path), "cached": True}))
        try:
            md, verified = _check_download(path, split, where, emit)
        except InvalidDatasetError as e:
            raise InvalidDatasetError.from_error(e, fix=f"If the dataset on the Hub is intact, the cached copy in {path} "
                                                 "is damaged: remove it with `hf cache delete` and re-run.") from e
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = _fresh_staging(out, {"repo_id": ref.repo_id, "commit": commit, "files": wanted})
        try:
            download(staging, local_dir=str(staging))
        except HubError as e:
            raise HubError.from_error(e, fix=f"The files downloaded so far are kept in {staging}; re-running the "
                                      "same command resumes.") from e
        emit(Event("downloaded", message=f"Downloaded {where} into {staging}",
                   progress=Progress("bytes", total, total), data={"path": str(staging), "cached": False}))
        try:
            shutil.rmtree(staging / ".cache", ignore_errors=True)  # huggingface_hub's resume state
            (staging / _STAGING_MARK).unlink(missing_ok=True)
            md, verified = _check_download(staging, split, where, emit)
            if out.exists():
                raise UsageError(f"--output {out} appeared while downloading; the download is in {staging}.",
                                 fix="Move that directory aside or choose another --output, and re-run.")
            fsync_tree(staging)
            os.rename(staging, out)
            fsync_dir(out.parent)
        except InvalidDatasetError:
            shutil.rmtree(staging, ignore_errors=True)  # bad content: resuming would keep it
            raise
        path = out
    return PullResult(repo_id=ref.repo_id, revision=ref.revision, commit=commit, path=path, files=tuple(wanted),
                      bytes=total, verified=verified, cached=out is None, split=split, metadata=md)


def _bytes_under(root: Path) -> int:
    """The size of the regular files under ``root`` (downloads in progress included; links not followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):  # renamed or removed while we looked
                st = os.lstat(os.path.join(dirpath, name))
                total += 0 if stat.S_ISLNK(st.st_mode) else st.st_size
    return total


class _DiskProgress:
    """While a download runs, report the bytes that reached ``root`` as ``Progress("bytes", done, total)``.

    Counts what appeared under ``root`` since it started (files a resumed pull already had are not
    fetched again, so the count can end short of ``total``; the ``downloaded`` event then says
    ``total``). Works for any huggingface_hub release without hooking its progress bars.
    """

    def __init__(self, root: Path, total: int, emit: EventSink, interval: float = _PROGRESS_SECONDS):
        self.root, self.total, self.emit, self.interval = root, total, emit, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="whestbench-pull-progress", daemon=True)

    def __enter__(self) -> "_DiskProgress":
        self.start = _bytes_under(self.root)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = -1
        while not self._stop.wait(self.interval):
            grown = max(0, _bytes_under(self.root) - self.start)
            done = min(self.total, grown)
            if done != last:
                last = done
                self.emit(Event("progress", progress=Progress("bytes", done, self.total)))


def _fresh_staging(out: Path, mark: dict[str, Any]) -> Path:
    """The staging directory for ``out``: the one an interrupted pull of the same files left, else new."""
    staging = staging_path(out)
    marker = staging / _STAGING_MARK
    if staging.exists():
        try:
            # the repo, the commit and the files to fetch (~60 bytes each): 16 MiB is 250,000 files
            same = json.loads(read_regular(marker, 16 << 20, "pull marker")) == mark
        except (OSError, ValueError, RecursionError):
            same = False
        if not same:
            shutil.rmtree(staging)
    staging.mkdir(exist_ok=True)
    marker.write_text(json.dumps(mark))
    return staging


def _check_download(path: Path, split: str | None, where: str, emit: EventSink) -> tuple[dict[str, Any], int]:
    md = read_metadata_file(path / METADATA_FILE)
    try:
        validate_metadata(md, allow_partial=True)
        verify_checksums(path, md, split=split)
    except InvalidDatasetError as e:
        raise InvalidDatasetError.from_error(e, where=f"the files downloaded from {where} are not a valid dataset") from e
    listed = checksums_block(md) or {}
    verified = len(listed) if split is None else sum(
        1 for rel in listed if rel.startswith(DATA_DIR + "/") and is_shard_of(rel.split("/", 1)[1], split))
    emit(Event("verified", message=f"{plural(verified, 'data file')} verified", data={"files": verified}))
    return md, verified
