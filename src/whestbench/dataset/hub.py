"""Publish a dataset to the Hugging Face Hub (``push``) and fetch one back (``pull``).

Push checks everything it can before the first network call: the directory is a complete
(non-partial), valid dataset whose data files match ``metadata.json``'s checksums. It then sends
the files in a few ordinary commits of at most ``MAX_COMMIT_BYTES`` each, skipping every file the
branch already holds with the same content, and puts ``metadata.json``, the card and the removal
of stale shards into the **last** commit. So:

* an interrupted push is resumed by re-running it: finished commits are on the Hub and their files
  are skipped; blobs of an unfinished commit that already reached the Hub's storage are not sent
  again either (the Hub deduplicates LFS/Xet content);
* the published ``metadata.json`` never lists data that is not there yet;
* a small dataset (one batch) goes up in one atomic commit.

Between the commits of a multi-commit push the branch can hold new shards beside the previous
``metadata.json`` (a re-push that changes a shard of the same name); ``pull`` and the loader check
checksums, so a reader in that window gets a checksum error rather than mixed rows, and a ``--tag``
only ever names the finished dataset.

Why not ``HfApi.upload_large_folder``: it keeps its resume state in a ``.cache/`` folder inside the
dataset directory (it writes into the user's dataset), cannot upload a card rendered in memory,
cannot delete stale shards, cannot order ``metadata.json`` last, and ends in several commits with
no single one to tag (and not every supported huggingface_hub release has it).

The card is rendered for the real repo id and revision into the upload only; the local README.md
is never rewritten. Tags are created after the last commit landed, on that commit's id.

Pull resolves the revision to a commit first (one metadata call that also sizes the download and
catches a ``--split`` that matches nothing), downloads into ``.<output>.pull-staging`` beside
``--output`` (kept on a network failure so re-running resumes), checks the checksums, and renames.

Tokens are passed to huggingface_hub and nowhere else: they are never in results, events, errors
or files (errors are scrubbed of anything that looks like one).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from whestbench.atomic import fsync_dir, fsync_tree
from whestbench.dataset.errors import InvalidDatasetError
from whestbench.dataset.reader import (
    checksums_block,
    data_files,
    file_sha256,
    is_shard_of,
    read_metadata,
    read_metadata_file,
    verify_checksums,
)
from whestbench.dataset.schema import check_split_name, split_names, validate_metadata
from whestbench.errors import UsageError, WorkFailed

REPO_TYPE = "dataset"
DEFAULT_BRANCH = "main"
DEFAULT_MESSAGE = "Upload whestbench dataset"
# A commit is the unit that survives an interruption; the writer's shards are <= 2 GiB, so two per commit.
MAX_COMMIT_BYTES = 4 * 1024**3
# The Hub processes a commit's files in one request: keep it small (its own guidance is ~100s of files).
MAX_COMMIT_FILES = 100
HUB_URL = "https://huggingface.co"

METADATA = "metadata.json"
CARD = "README.md"
DATA = "data"
PREPARED = "prepared"
_PUBLISHED_DIRS = (DATA, PREPARED)  # remote files under these that the local dataset lacks are stale
_STAGING_MARK = ".whestbench-pull.json"

Event = Callable[[dict[str, Any]], None]


class HubError(WorkFailed):
    """A call to the Hugging Face Hub failed; the message names the fix (login, repo id, revision, network)."""


# --------------------------------------------------------------------------------------------------
# Repo ids and revisions


_REPO_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def check_repo_id(repo_id: object) -> str:
    """``repo_id`` if it is a Hub dataset id ``ORG/NAME``, else UsageError.

    Guards against ids the Hub would reject only after the local checks (and, for push, a bare
    ``NAME`` that would silently land in the token owner's namespace).
    """
    ok = isinstance(repo_id, str) and repo_id.count("/") == 1 and len(repo_id) <= 96
    if ok:
        parts = repo_id.split("/")
        ok = all(_REPO_PART.match(p) and "--" not in p and ".." not in p for p in parts)
        ok = ok and not repo_id.endswith(".git")
    if not ok:
        raise UsageError(
            f"repo id {repo_id!r} is not a Hub dataset id: use ORG/NAME (letters, digits, '-', '_', '.'), "
            "for example aicrowd/whestbench-public."
        )
    return repo_id


def parse_repo_ref(text: str, revision: str | None = None) -> tuple[str, str | None]:
    """``ORG/NAME``, ``hf://ORG/NAME`` or ``hf://ORG/NAME@REV`` (as push prints it) -> (repo id, revision).

    An ``@REV`` that disagrees with an explicit ``revision`` is a UsageError.
    """
    ref = text[len("hf://"):] if text.startswith("hf://") else text
    if ref.startswith("datasets/"):
        ref = ref[len("datasets/"):]
    embedded = None
    if "@" in ref:
        ref, embedded = ref.split("@", 1)
        if not embedded:
            raise UsageError(f"{text!r} ends in '@' with no revision; write ORG/NAME@REV or pass --revision.")
    if embedded and revision and embedded != revision:
        raise UsageError(
            f"{text!r} names revision {embedded!r} but --revision is {revision!r}; give the revision once."
        )
    return check_repo_id(ref), revision or embedded


def hf_ref(repo_id: str, revision: str) -> str:
    return f"hf://{repo_id}@{revision}"


def tree_url(repo_id: str, revision: str) -> str:
    return f"{HUB_URL}/datasets/{repo_id}/tree/{revision}"


# --------------------------------------------------------------------------------------------------
# The local side of a push (no network)


@dataclass(frozen=True)
class LocalFile:
    """One file to publish: its repo path, where its bytes come from, and its identity."""

    path: str  # repo-relative, POSIX
    size: int
    sha256: str  # hex digest (no "sha256:" prefix), as the Hub reports LFS objects
    source: Path | None = None  # a file on disk, or
    content: bytes | None = None  # bytes rendered in memory (the card)

    def git_blob_id(self) -> str:
        """git's object id of the content: how the Hub identifies a file it stores outside LFS."""
        h = hashlib.sha1(b"blob %d\0" % self.size)
        if self.content is not None:
            h.update(self.content)
        else:
            with open(self.source, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
        return h.hexdigest()

    def payload(self) -> str | bytes:
        return self.content if self.content is not None else str(self.source)


def _memory_file(path: str, content: bytes) -> LocalFile:
    return LocalFile(path=path, size=len(content), sha256=hashlib.sha256(content).hexdigest(), content=content)


@dataclass(frozen=True)
class PushPlan:
    """What a push publishes, decided locally: the checked dataset and the card for ``repo_id@revision``."""

    directory: Path
    repo_id: str
    revision: str  # the card's revision: the tag if one is made, else the branch
    metadata: dict[str, Any]
    data: tuple[LocalFile, ...]  # data/ and prepared/ files, in upload order
    metadata_file: LocalFile
    card: LocalFile
    ignored: tuple[str, ...]  # local paths that are not part of the dataset and are not uploaded

    @property
    def files(self) -> tuple[LocalFile, ...]:
        return (*self.data, self.metadata_file, self.card)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _walk(root: Path) -> Iterator[Path]:
    """Files under ``root``, sorted; hidden directories and directory symlinks are yielded, not entered."""
    for dirpath, dirs, files in os.walk(root):
        base = Path(dirpath)
        entered = []
        for name in sorted(dirs):
            if name.startswith(".") or (base / name).is_symlink():
                yield base / name
            else:
                entered.append(name)
        dirs[:] = entered
        for name in sorted(files):
            yield base / name


def plan_push(directory: str | Path, repo_id: str, *, tag: str | None = None) -> PushPlan:
    """Check ``directory`` and decide what a push to ``repo_id`` publishes. Makes no network call.

    Refuses (InvalidDatasetError): a partial dataset (merge it first), metadata that fails
    ``validate_metadata``, data files that do not match their checksums, a split without shards,
    symlinks or files the checksums do not vouch for under ``data/`` — everything that would
    otherwise be discovered by whoever downloads the published dataset.
    """
    check_repo_id(repo_id)
    if tag is not None:
        _check_tag(tag)
    directory = Path(directory)
    md = read_metadata(directory)
    if isinstance(md, dict) and md.get("is_partial"):
        raise InvalidDatasetError(
            f"{directory} is a partial dataset (mlp_range={md.get('mlp_range')}, "
            f"total_n_mlps={md.get('total_n_mlps')}); only complete datasets are published. Merge the "
            f"partials first: `whest dataset merge <partials> --output <dir>`, then push <dir>."
        )
    validate_metadata(md)
    verify_checksums(directory, md)
    for split in split_names(md):
        data_files(directory, split)  # raises when a split has no shards or holes in its shard set
    listed = checksums_block(md)

    prepared_dirs = set()
    for entry in (md.get("prepared_splits") or {}).values():
        prepared_dirs.add(entry["path"].strip("/"))

    data: list[LocalFile] = []
    ignored: list[str] = []
    for p in _walk(directory):
        rel = p.relative_to(directory).as_posix()
        if rel in (METADATA, CARD):
            continue  # sent from memory: the metadata as read, the card rendered for the repo
        hidden = any(part.startswith(".") for part in rel.split("/"))
        published = rel.startswith(DATA + "/") or any(rel.startswith(d + "/") for d in prepared_dirs)
        if hidden or not published:
            ignored.append(rel)
            continue
        if p.is_symlink() or not p.is_file():
            raise InvalidDatasetError(
                f"{p} is a symlink or not a regular file; push publishes regular files only. Replace "
                "it with a copy of what it points to and push again."
            )
        if rel.startswith(DATA + "/") and listed is not None and rel not in listed:
            raise InvalidDatasetError(
                f"{p} is not listed in metadata.json checksums, so nothing vouches for it; remove it "
                "(or re-bake the dataset) before pushing."
            )
        digest = listed[rel] if listed is not None and rel in listed else file_sha256(p)
        data.append(LocalFile(path=rel, size=p.stat().st_size, sha256=digest.split(":", 1)[1], source=p))
    for d in sorted(prepared_dirs):
        if not any(f.path.startswith(d + "/") for f in data):
            raise InvalidDatasetError(
                f"metadata.json declares prepared Arrow files in {d}/ but {directory / d} has none; "
                f"re-create them with `whest dataset prepare-arrow {directory}`."
            )
    # data/ before prepared/, so prepared copies never reach the Hub before the shards they mirror
    data.sort(key=lambda f: (f.path.split("/", 1)[0] != DATA, f.path))

    from whestbench.dataset.card import render_card

    revision = tag or DEFAULT_BRANCH
    card = render_card(md, repo_id=repo_id, revision=revision).encode("utf-8")
    return PushPlan(
        directory=directory,
        repo_id=repo_id,
        revision=revision,
        metadata=md,
        data=tuple(data),
        metadata_file=_memory_file(METADATA, (directory / METADATA).read_bytes()),
        card=_memory_file(CARD, card),
        ignored=tuple(ignored),
    )


_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


def _check_tag(tag: str) -> None:
    if not _TAG_RE.match(tag) or ".." in tag or tag.endswith((".", "/", ".lock")) or "//" in tag:
        raise UsageError(f"--tag {tag!r} is not a valid git tag name; use something like v1 or v1.0.0.")


# --------------------------------------------------------------------------------------------------
# Push


@dataclass(frozen=True)
class Commit:
    oid: str
    files: int
    bytes: int
    deleted: int


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    revision: str  # the tag, or the branch
    commit: str  # the commit that holds the whole dataset (tagged when a tag was asked for)
    url: str
    commits: tuple[Commit, ...]  # empty when the Hub already held exactly this dataset
    uploaded: tuple[str, ...]
    unchanged: tuple[str, ...]
    deleted: tuple[str, ...]
    tag: str | None = None


def _same_content(local: LocalFile, remote: Any) -> bool:
    """Whether the Hub's file (a ``RepoSibling``/``RepoFile``) already has ``local``'s bytes."""
    size = getattr(remote, "size", None)
    if size is not None and size != local.size:
        return False
    lfs = getattr(remote, "lfs", None)
    if lfs is not None:
        sha = lfs.get("sha256") if isinstance(lfs, Mapping) else getattr(lfs, "sha256", None)
        return sha == local.sha256
    blob = getattr(remote, "blob_id", None)
    return blob is not None and size is not None and blob == local.git_blob_id()


def _remote_files(info: Any) -> dict[str, Any]:
    return {s.rfilename: s for s in (getattr(info, "siblings", None) or [])}


def _batches(files: Sequence[LocalFile], max_bytes: int, max_files: int) -> list[list[LocalFile]]:
    """Consecutive groups of at most ``max_files`` files and ``max_bytes`` (a bigger file goes alone)."""
    out: list[list[LocalFile]] = []
    cur: list[LocalFile] = []
    size = 0
    for f in files:
        if cur and (size + f.size > max_bytes or len(cur) >= max_files):
            out.append(cur)
            cur, size = [], 0
        cur.append(f)
        size += f.size
    if cur:
        out.append(cur)
    return out


def push_dataset(
    directory: str | Path,
    repo_id: str,
    *,
    tag: str | None = None,
    message: str | None = None,
    private: bool = False,
    token: str | None = None,
    on_event: Event | None = None,
    max_commit_bytes: int = MAX_COMMIT_BYTES,
    max_commit_files: int = MAX_COMMIT_FILES,
) -> PushResult:
    """Publish the dataset at ``directory`` to the Hub dataset repo ``repo_id`` (branch ``main``).

    ``token``: a Hub token, or None for HF_TOKEN / the stored ``hf auth login``. ``tag``: created on
    the final commit once it has landed (refused up front if it already exists). ``private``: create
    the repo private; an existing public repo is refused rather than silently published to.
    Events (``on_event``): ``planned`` (local totals, before any network call), ``compared``
    (what the Hub already holds), ``commit`` (after each commit), ``tagged``.
    """
    emit = on_event or (lambda _e: None)
    plan = plan_push(directory, repo_id, tag=tag)
    emit({"event": "planned", "files": len(plan.files), "bytes": plan.total_bytes, "ignored": list(plan.ignored),
          "repo_id": repo_id, "revision": plan.revision})

    import huggingface_hub

    api = huggingface_hub.HfApi(token=token)
    branch = DEFAULT_BRANCH
    with _hub_errors(f"pushing to {hf_ref(repo_id, plan.revision)}", repo_id, branch, token):
        extra = {"private": True} if private else {}
        api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True, token=token, **extra)
        info = _branch_info(api, repo_id, branch, token)
        if private and info is not None and getattr(info, "private", None) is False:
            raise UsageError(
                f"{repo_id} already exists and is public; --private does not change an existing repo. "
                f"Make it private in its settings ({HUB_URL}/datasets/{repo_id}/settings) or push to a new repo."
            )
        if tag is not None:
            refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE, token=token)
            if any(t.name == tag for t in getattr(refs, "tags", None) or []):
                raise UsageError(
                    f"tag {tag!r} already exists in {repo_id}; choose a new --tag (tags name one "
                    "published version and are never moved)."
                )

        remote = _remote_files(info)
        head = getattr(info, "sha", None) if info is not None else None
        todo = [f for f in plan.data if not (f.path in remote and _same_content(f, remote[f.path]))]
        finals = [f for f in (plan.metadata_file, plan.card)
                  if not (f.path in remote and _same_content(f, remote[f.path]))]
        local_paths = {f.path for f in plan.files}
        stale = sorted(p for p in remote if p.split("/", 1)[0] in _PUBLISHED_DIRS and p not in local_paths)
        sent = {f.path for f in todo + finals}
        unchanged = sorted(f.path for f in plan.files if f.path not in sent)

        batches = _batches(todo, max_commit_bytes, max_commit_files)
        if finals or stale:
            if not batches:
                batches.append([])
            batches[-1] = batches[-1] + finals
        emit({"event": "compared", "upload_files": len(todo) + len(finals),
              "upload_bytes": sum(f.size for f in todo + finals), "unchanged": len(unchanged),
              "stale": stale, "commits": len(batches)})

        commits: list[Commit] = []
        parent = head
        for i, batch in enumerate(batches, 1):
            last = i == len(batches)
            ops: list[Any] = [huggingface_hub.CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=f.payload())
                              for f in batch]
            if last:
                ops += [huggingface_hub.CommitOperationDelete(path_in_repo=p) for p in stale]
            text = message or DEFAULT_MESSAGE
            if len(batches) > 1:
                text = f"{text} ({i}/{len(batches)})"
            kwargs = {"parent_commit": parent} if parent else {}
            done = api.create_commit(repo_id, ops, commit_message=text, repo_type=REPO_TYPE,
                                     revision=branch, token=token, **kwargs)
            parent = done.oid
            c = Commit(oid=done.oid, files=len(batch), bytes=sum(f.size for f in batch),
                       deleted=len(stale) if last else 0)
            commits.append(c)
            emit({"event": "commit", "index": i, "total": len(batches), "oid": c.oid, "files": c.files,
                  "bytes": c.bytes, "deleted": c.deleted})
        final = parent
        if final is None:  # nothing to commit and no head: cannot happen (the card is always new then)
            raise HubError(f"the Hub reported no commit on {repo_id}@{branch}; re-run the push.")
        if tag is not None:
            api.create_tag(repo_id, tag=tag, revision=final, repo_type=REPO_TYPE, token=token)
            emit({"event": "tagged", "tag": tag, "oid": final})
    return PushResult(
        repo_id=repo_id, revision=plan.revision, commit=final, url=tree_url(repo_id, plan.revision),
        commits=tuple(commits), uploaded=tuple(f.path for f in todo + finals), unchanged=tuple(unchanged),
        deleted=tuple(stale), tag=tag,
    )


def _branch_info(api: Any, repo_id: str, branch: str, token: str | None) -> Any:
    """The branch's head commit and files (with sizes and hashes), or None for a repo without it."""
    try:
        return api.dataset_info(repo_id, revision=branch, files_metadata=True, token=token)
    except _hub_exception("RevisionNotFoundError"):
        return None


# --------------------------------------------------------------------------------------------------
# Pull


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


def _literal(path: str) -> str:
    """An ``allow_patterns`` entry that matches exactly ``path`` (fnmatch metacharacters escaped)."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def split_files(paths: Sequence[str], split: str) -> list[str]:
    """The repo files a one-split download needs: the split's shards, its prepared Arrow copy, the
    metadata and the card. Shards are matched exactly, so split ``round`` never takes ``round-one``'s."""
    keep = []
    for p in paths:
        head, _, name = p.rpartition("/")
        if (head == DATA and is_shard_of(name, split)) or p.startswith(f"{PREPARED}/{split}/") or p in (METADATA, CARD):
            keep.append(p)
    return keep


def _remote_splits(paths: Sequence[str]) -> list[str]:
    found = set()
    for p in paths:
        m = re.match(rf"^{DATA}/(.+)-\d{{5,}}-of-\d{{5,}}\.parquet$", p)
        if m:
            found.add(m.group(1))
    return sorted(found)


def staging_path(output: Path) -> Path:
    return output.parent / f".{output.name}.pull-staging"


def pull_dataset(
    repo: str,
    *,
    revision: str | None = None,
    output: str | Path | None = None,
    split: str | None = None,
    token: str | None = None,
    on_event: Event | None = None,
) -> PullResult:
    """Download the Hub dataset ``repo`` (``ORG/NAME`` or ``hf://ORG/NAME@REV``) and check it.

    With ``output``: into that new directory (refused up front if it exists), atomically — it
    appears complete or not at all. Without: into the Hugging Face cache (reruns are free).
    ``split``: only that split's shards (and its prepared Arrow copy), metadata.json and README.md.
    Data files are checked against metadata.json's checksums when it has them.
    Events: ``preflight`` (files, bytes, commit), ``downloaded``, ``verified``.
    """
    emit = on_event or (lambda _e: None)
    repo_id, revision = parse_repo_ref(repo, revision)
    if split is not None:
        try:
            check_split_name(split)
        except InvalidDatasetError as e:
            raise UsageError(f"--split: {e}") from None
    out = Path(output) if output is not None else None
    if out is not None and out.exists():
        raise UsageError(f"--output {out} already exists; choose a new directory or remove it first.")

    import huggingface_hub

    where = hf_ref(repo_id, revision or DEFAULT_BRANCH)
    api = huggingface_hub.HfApi(token=token)
    with _hub_errors(f"pulling {where}", repo_id, revision, token):
        info = api.dataset_info(repo_id, revision=revision, files_metadata=True, token=token)
    commit = info.sha
    sizes = {s.rfilename: (s.size or 0) for s in (info.siblings or [])}
    if METADATA not in sizes:
        raise InvalidDatasetError(
            f"{where} has no metadata.json, so it is not a WhestBench dataset; check the repo id and --revision."
        )
    if split is not None:
        wanted = split_files(list(sizes), split)
        if not any(p.startswith(DATA + "/") for p in wanted):
            raise InvalidDatasetError(
                f"--split {split!r} matched no parquet files in {where}; its splits are "
                f"{_remote_splits(list(sizes))}. Pass one of them, or omit --split for the whole dataset."
            )
        patterns: list[str] | None = [_literal(p) for p in wanted]
    else:
        wanted = sorted(sizes)
        patterns = None
    total = sum(sizes[p] for p in wanted)
    emit({"event": "preflight", "files": len(wanted), "bytes": total, "commit": commit, "repo_id": repo_id})

    if out is None:
        with _hub_errors(f"pulling {where}", repo_id, revision, token):
            path = Path(huggingface_hub.snapshot_download(
                repo_id, repo_type=REPO_TYPE, revision=commit, allow_patterns=patterns, token=token))
        emit({"event": "downloaded", "path": str(path), "cached": True})
        try:
            md, verified = _check_download(path, split, where)
        except InvalidDatasetError as e:
            raise InvalidDatasetError(
                f"{e} If the dataset on the Hub is intact, the cached copy in {path} is damaged: "
                "remove it with `hf cache delete` and re-run."
            ) from e
        emit({"event": "verified", "files": verified})
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = _fresh_staging(out, {"repo_id": repo_id, "commit": commit, "files": wanted})
        try:
            with _hub_errors(f"pulling {where}", repo_id, revision, token):
                huggingface_hub.snapshot_download(
                    repo_id, repo_type=REPO_TYPE, revision=commit, allow_patterns=patterns, token=token,
                    local_dir=str(staging))
        except HubError as e:
            raise HubError(f"{e} The files downloaded so far are kept in {staging}; re-running the same "
                           "command resumes.") from e
        emit({"event": "downloaded", "path": str(staging), "cached": False})
        try:
            shutil.rmtree(staging / ".cache", ignore_errors=True)  # huggingface_hub's resume state
            (staging / _STAGING_MARK).unlink(missing_ok=True)
            md, verified = _check_download(staging, split, where)
            emit({"event": "verified", "files": verified})
            if out.exists():
                raise UsageError(f"--output {out} appeared while downloading; the download is in {staging}.")
            fsync_tree(staging)
            os.rename(staging, out)
            fsync_dir(out.parent)
        except InvalidDatasetError:
            shutil.rmtree(staging, ignore_errors=True)  # bad content: resuming would keep it
            raise
        path = out
    return PullResult(repo_id=repo_id, revision=revision, commit=commit, path=path, files=tuple(wanted),
                      bytes=total, verified=verified, cached=out is None, split=split, metadata=md)


def _fresh_staging(out: Path, mark: dict[str, Any]) -> Path:
    """The staging directory for ``out``: the one an interrupted pull of the same files left, else new."""
    staging = staging_path(out)
    marker = staging / _STAGING_MARK
    if staging.exists():
        try:
            same = json.loads(marker.read_text()) == mark
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(staging)
    staging.mkdir(exist_ok=True)
    marker.write_text(json.dumps(mark))
    return staging


def _check_download(path: Path, split: str | None, where: str) -> tuple[dict[str, Any], int]:
    md = read_metadata_file(path / METADATA)
    try:
        validate_metadata(md, allow_partial=True)
        verify_checksums(path, md, split=split)
    except InvalidDatasetError as e:
        raise InvalidDatasetError(f"the files downloaded from {where} are not a valid dataset: {e}") from e
    listed = checksums_block(md) or {}
    if split is None:
        verified = len(listed)
    else:
        verified = sum(1 for rel in listed if rel.startswith(DATA + "/") and is_shard_of(rel.split("/", 1)[1], split))
    return md, verified


# --------------------------------------------------------------------------------------------------
# Hub errors -> one line that names the fix


_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{8,}")
_LOGIN = "log in with `hf auth login`, set HF_TOKEN, or pass --token"


def scrub(text: str, token: str | None) -> str:
    """``text`` with the token (given, or from the environment) and anything token-shaped masked."""
    for secret in (token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")):
        if secret:
            text = text.replace(secret, "***")
    return _TOKEN_RE.sub("hf_***", text)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection/timeout error bases of the HTTP client huggingface_hub uses (whichever is loaded)."""
    found: list[type[BaseException]] = []
    for mod, names in (("requests", ("RequestException",)), ("httpx", ("TransportError", "HTTPError")),
                       ("httpx2", ("TransportError", "HTTPError")), ("urllib3.exceptions", ("HTTPError",))):
        m = sys.modules.get(mod)
        for name in names:
            cls = getattr(m, name, None) if m is not None else None
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


class _Absent(Exception):
    """Stands in for an exception class this huggingface_hub release does not define."""


def _hub_exception(name: str) -> type[BaseException]:
    """huggingface_hub's exception class ``name`` (``errors`` since 0.22, ``utils`` before), or _Absent."""
    import importlib

    for mod in ("huggingface_hub.errors", "huggingface_hub.utils"):
        try:
            cls = getattr(importlib.import_module(mod), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    return _Absent


def explain(exc: BaseException, *, repo_id: str, revision: str | None, token: str | None) -> Exception | None:
    """The exception to raise instead of ``exc`` (a Hub or network error), or None to let it through."""
    raw = " ".join(scrub(str(exc), token).split())
    url = f"{HUB_URL}/datasets/{repo_id}"
    if isinstance(exc, _hub_exception("HFValidationError")):
        return UsageError(f"invalid repo id or revision for the Hub: {raw}")
    if isinstance(exc, _hub_exception("GatedRepoError")):
        return HubError(f"{repo_id} is gated: accept its conditions at {url}, then {_LOGIN}.")
    if isinstance(exc, _hub_exception("DisabledRepoError")):
        return HubError(f"{repo_id} has been disabled on the Hub; use another repo.")
    if isinstance(exc, _hub_exception("RepositoryNotFoundError")):
        return HubError(
            f"dataset repo {repo_id!r} was not found or your token cannot access it: check the repo id "
            f"(ORG/NAME), and for a private repo {_LOGIN}."
        )
    if isinstance(exc, _hub_exception("RevisionNotFoundError")):
        return HubError(
            f"revision {revision!r} does not exist in {repo_id}: pass an existing branch, tag or commit "
            f"with --revision (see {url}/tree/main)."
        )
    if isinstance(exc, _hub_exception("EntryNotFoundError")):
        return HubError(f"a file is missing from {repo_id}: {raw}. Check --revision, or re-push the dataset.")
    if isinstance(exc, _hub_exception("LocalTokenNotFoundError")):
        return HubError(f"no Hugging Face token found: {_LOGIN}.")
    if isinstance(exc, _hub_exception("OfflineModeIsEnabled")):
        return HubError("HF_HUB_OFFLINE is set, so the Hub cannot be reached: unset it and re-run.")
    if isinstance(exc, _hub_exception("HfHubHTTPError")):
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        fixes = {
            401: f"the Hub rejected the credentials (401): {_LOGIN} with a valid token.",
            403: f"your token may not write to or read {repo_id} (403): use a token with write access to "
                 "that namespace (fine-grained tokens need it granted), or ask the org for access.",
            409: f"the Hub refused the change as a conflict (409): {raw}",
            412: f"{repo_id} changed while pushing (someone else committed): re-run the command; "
                 "finished files are skipped.",
            429: "the Hub is rate-limiting these requests (429): wait a few minutes and re-run; "
                 "finished files are skipped.",
        }
        if status in fixes:
            return HubError(fixes[status])
        if isinstance(status, int) and status >= 500:
            return HubError(f"the Hub failed with {status}: try again later; re-running resumes. ({raw})")
        return HubError(f"the Hub refused the request: {raw}")
    transport = _transport_errors()
    if (transport and isinstance(exc, transport)) or isinstance(exc, (ConnectionError, TimeoutError)):
        return HubError(
            f"could not reach the Hugging Face Hub ({raw or type(exc).__name__}): check the network "
            "connection (and HF_ENDPOINT / proxy settings), then re-run."
        )
    if type(exc).__module__.startswith("huggingface_hub"):
        return HubError(f"the Hugging Face Hub client failed: {raw}")
    return None


@contextlib.contextmanager
def _hub_errors(what: str, repo_id: str, revision: str | None, token: str | None) -> Iterator[None]:
    """Turn Hub and network failures inside the block into one-line HubError/UsageError."""
    try:
        yield
    except (UsageError, InvalidDatasetError, HubError):
        raise
    except Exception as exc:
        better = explain(exc, repo_id=repo_id, revision=revision, token=token)
        if better is None:
            raise
        if isinstance(better, HubError):
            better = HubError(f"{what}: {better}")
        raise better from exc
