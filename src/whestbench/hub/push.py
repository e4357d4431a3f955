"""Publish a dataset to the Hugging Face Hub: ``plan_push`` (the local checks, no network),
``push_dataset`` and whestbench 0.16's ``publish_dataset``. What push refuses, its commits and its
events are docs/hub.md's; references are ``hub/ref.py``, the retry policy and the Hub's errors
``hub/client.py``, the fetch back ``hub/pull.py``.

Push sends the files in a few ordinary commits of at most ``MAX_COMMIT_BYTES`` each, skipping every
file the branch already holds with the same content (so re-running resumes), and puts
``metadata.json``, the card and the removal of stale shards into the **last** commit, so the
published ``metadata.json`` never lists data that is not there yet. Between the commits of a
multi-commit push the branch can hold new shards beside the previous ``metadata.json``; ``pull`` and
the loader check checksums, so a reader in that window gets a checksum error rather than mixed rows.

Why not ``HfApi.upload_large_folder``: it keeps its resume state in a ``.cache/`` folder inside the
dataset directory (it writes into the user's dataset), cannot upload a card rendered in memory,
cannot delete stale shards, cannot order ``metadata.json`` last, and ends in several commits with
no single one to tag (and not every supported huggingface_hub release has it).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from whestbench.errors import DatasetSourceError, HubError, InvalidDatasetError, UsageError, bad_value
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.format.card import render_card
from whestbench.format.card_rules import given_card, hidden_char
from whestbench.format.checksums import checksums_block, file_sha256, verify_checksums
from whestbench.format.prepared import prepared_problem
from whestbench.format.reader import (AUDIT_DIR, CARD_FILE, DATA_DIR, METADATA_FILE,
                                      PREPARED_DIR, DatasetDir, data_files, open_dataset)
from whestbench.format.shards import ShardSchema
from whestbench.format.schema import (DEVICE_CHECK_KEY, DatasetMeta, check_positive_int, columns_for,
                                      device_check_state)
from whestbench.hub.client import call, check_token, hub_client, hub_exception, require_settings
from whestbench.hub.ref import DEFAULT_BRANCH, HUB_URL, REPO_TYPE, HubRef, hf_ref, parse_ref, tree_url
from whestbench.paths import local_dataset_dir
from whestbench.text import format_bytes, plural, sanitize, scrub, show_value

DEFAULT_MESSAGE = "Upload whestbench dataset"
# A commit is the unit that survives an interruption; the writer's shards are <= 2 GiB, so two per commit.
MAX_COMMIT_BYTES = 4 * 1024**3
# The Hub processes a commit's files in one request: keep it small (its own guidance is ~100s of files).
MAX_COMMIT_FILES = 100

_PUBLISHED_DIRS = (DATA_DIR, AUDIT_DIR, PREPARED_DIR)  # remote files under these that the local dataset lacks are stale
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


# ------------------------------------------------------------ The local side of a push (no network)


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


def _require_schema(directory: "Path | DatasetDir", md: dict, split: str) -> bool:
    """The shards hold the columns, with their types, the metadata promises (``format.shards``): a target
    bake without its ``n_samples_used`` column, say, is refused before anything is sent. Only the footers
    are read (the checksums vouch for the bytes); whether all were readable is returned (an unreadable
    one is verify's business, not push's)."""
    import pyarrow.parquet as pq

    expected = ShardSchema(md["width"], md["depth"], columns_for(md))
    want, readable = list(expected.columns), True
    for shard in data_files(directory, split):
        try:
            schema = pq.read_schema(shard)
        except Exception:  # noqa: BLE001
            readable = False
            continue
        problems = expected.problems(schema, hf_metadata=False)
        if problems:
            names = list(schema.names)
            missing = [c for c in want if c not in names]
            what = f": {'; '.join(problems)}" if names == want else (
                (f" lacks {', '.join(missing)}" if missing else f" has columns {names}")
                + f", which its metadata.json promises ({', '.join(want)})")
            raise InvalidDatasetError(f"{shard.name}{what}; push publishes only datasets whose files match their metadata",
                                      where=sanitize(str(directory)), fix="(`whest dataset verify` shows every problem).")
    return readable


def _require_checked_device(directory: Path, md: dict) -> None:
    meta = DatasetMeta.of(md)
    for split in meta.splits:  # a single split's block is the top level
        block = meta.block(split).get(DEVICE_CHECK_KEY)
        state = device_check_state(block)
        if state in ("skipped", "accepted"):
            what = ("its device check was skipped (--skip-device-check)" if state == "skipped" else
                    f"its device check failed {', '.join(block.get('accepted', []))}, accepted (--accept-non-invariant)")
            raise InvalidDatasetError(
                f"{what}, so nothing vouches that the device computed the specification;",
                where=f"{sanitize(str(directory))} (split {split!r})", fix="re-bake on a device that passes, or push "
                "with --allow-unchecked-device (the card and metadata.json say so).")


@dataclass(frozen=True)
class PushConfig:
    """One push request. ``__post_init__`` refuses what no dataset could make valid (the repo, the tag)
    before any file is read; the CLI and ``push_dataset(directory, repo, **options)`` build it."""

    repo: str
    """``ORG/NAME`` or ``hf://[datasets/]ORG/NAME``, kept as ``ORG/NAME``. Push always commits to the main
    branch, so an ``@REV`` (which would suggest otherwise) is refused: name a version with ``tag``."""
    tag: str | None = None
    """A git tag created on the final commit once it has landed (refused up front if it exists)."""
    message: str | None = None
    """The commit message (default ``DEFAULT_MESSAGE``; the commits of a push in several are numbered)."""
    private: bool = False
    """Create the repo private; an existing public repo is refused rather than silently published to."""
    exist_ok: bool = True
    """False: refuse a repo that already exists."""
    card: Mapping[str, str] | None = None
    """``pretty_name``/``license``/``homepage``/... for the card (``format.card_rules.check_card_fields``);
    default: what the bake recorded."""
    allow_unchecked_device: bool = False
    """Publish a torch bake whose device check was skipped or a failure accepted (refused otherwise)."""
    max_commit_bytes: int = MAX_COMMIT_BYTES
    max_commit_files: int = MAX_COMMIT_FILES

    def __post_init__(self) -> None:
        ref = parse_ref(self.repo)
        if ref.revision is not None:
            raise DatasetSourceError(f"{sanitize(scrub(self.repo))!r} names a revision; push commits to the "
                                     f"{DEFAULT_BRANCH} branch and names versions with --tag:",
                                     fix=f"pass --repo {ref.repo_id} --tag {ref.revision}.")
        object.__setattr__(self, "repo", ref.repo_id)
        tag = self.tag
        if tag is not None and (not isinstance(tag, str) or not _TAG_RE.match(tag) or ".." in tag or "//" in tag
                                or tag.endswith((".", "/", ".lock"))):
            raise bad_value(UsageError, "--tag", tag, "is not a valid git tag name;", fix="use something like v1 or v1.0.0.",
                            max_len=80)
        object.__setattr__(self, "card", given_card(self.card) or None)
        if self.message is not None and (not isinstance(self.message, str) or not self.message.strip()
                                         or any(hidden_char(c) and c not in "\n\t" for c in self.message)):
            raise UsageError(f"--message must be a commit message of printable text (lines and tabs allowed, no other "
                             f"control or bidirectional characters); got {show_value(self.message, max_len=80)}.",
                             fix="Leave it out for the default message.")
        if self.message is not None and scrub(self.message) != self.message:
            raise UsageError("--message holds what looks like a credential (a token, a password in a URL); a commit "
                             "message is public on the Hub:", fix="leave it out.")
        for flag, value in (("--private", self.private), ("exist_ok", self.exist_ok),
                            ("--allow-unchecked-device", self.allow_unchecked_device)):
            if not isinstance(value, bool):
                raise UsageError(f"{flag} must be True or False; got {show_value(value, max_len=40)}.",
                                 fix="Pass a bool.")
        check_positive_int("max_commit_bytes", self.max_commit_bytes)
        check_positive_int("max_commit_files", self.max_commit_files)

    @classmethod
    def of(cls, repo: "str | PushConfig", options: Mapping[str, Any]) -> "PushConfig":
        """``repo`` if it is a ``PushConfig``, else one built from it and keyword ``options``; not both."""
        if not isinstance(repo, PushConfig):
            return cls(repo, **options)
        if options:
            raise TypeError(f"pass a PushConfig or keyword options, not both (got {', '.join(sorted(options))})")
        return repo


def plan_push(directory: "str | Path | DatasetDir", repo: "str | PushConfig", **options: Any) -> PushPlan:
    """Check ``directory`` and decide what a push to ``repo`` (a ``PushConfig``, or the repo with the
    config's fields as keyword ``options``) publishes. Makes no network call. Refuses (InvalidDatasetError)
    what whoever downloads the dataset would otherwise discover: a partial dataset, invalid metadata,
    files that fail their checksums or schema, a split without shards, files under ``data/`` the checksums
    do not vouch for, a symlink in what is published (the Hub would not get what ``verify`` read through
    it), listed files that would not go up (a hidden path), a prepared Arrow copy that is not its split's
    rows, and (unless ``allow_unchecked_device``) a torch bake whose device check was skipped or accepted."""
    cfg = PushConfig.of(repo, options)
    handle = directory if isinstance(directory, DatasetDir) else None
    directory = local_dataset_dir(directory)
    handle = handle or open_dataset(directory)  # read once; its checks share it
    md = handle.metadata
    if isinstance(md, dict) and md.get("is_partial"):
        raise InvalidDatasetError(
            f"{directory} is a partial dataset (mlp_range={md.get('mlp_range')}, "
            f"total_n_mlps={md.get('total_n_mlps')}); only complete datasets are published.",
            fix="Merge the partials first: `whest dataset merge <partials> --output <dir>`, then push <dir>.")
    handle.meta()  # validate_metadata, once
    if not cfg.allow_unchecked_device:
        _require_checked_device(directory, md)
    verify_checksums(handle, md)
    needed: set[str] = set()
    readable = set()
    for split in DatasetMeta.of(md).splits:
        # raises when a split has no shards or holes in its shard set
        needed.update(p.relative_to(directory).as_posix() for p in handle.shards(split))
        if _require_schema(handle, md, split):
            readable.add(split)
    listed = checksums_block(md)
    needed.update(listed or ())

    prepared_dirs = {entry["path"].strip("/") for entry in (md.get("prepared_splits") or {}).values()}
    tops = (DATA_DIR, AUDIT_DIR, *sorted(prepared_dirs))

    data: list[LocalFile] = []
    ignored: list[str] = []
    for p in _walk(directory):
        rel = p.relative_to(directory).as_posix()
        if rel in (METADATA_FILE, CARD_FILE):
            continue  # sent from memory: the metadata as read, the card rendered for the repo
        hidden = any(part.startswith(".") for part in rel.split("/"))
        published = any(rel == t or rel.startswith(t + "/") or t.startswith(rel + "/") for t in tops)
        if hidden or not published:
            ignored.append(rel)
            continue
        if p.is_symlink() or not p.is_file():
            raise InvalidDatasetError(
                f"{sanitize(str(p))} is a symlink or not a regular file; push publishes regular files and "
                "directories only (the Hub would not get what the link points to).",
                fix="Replace it with a copy of what it points to (for example `cp -rL`) and push again.")
        if rel.startswith(DATA_DIR + "/") and listed is not None and rel not in listed:
            raise InvalidDatasetError(f"{sanitize(str(p))} is not listed in metadata.json checksums, so nothing vouches for it;",
                                      fix="remove it (or re-bake the dataset) before pushing.")
        digest = listed[rel] if listed is not None and rel in listed else file_sha256(p)
        data.append(LocalFile(path=rel, size=p.stat().st_size, sha256=digest.split(":", 1)[1], source=p))
    left_out = sorted(needed - {f.path for f in data})
    if left_out:
        more = f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""
        raise InvalidDatasetError(
            f"metadata.json lists {sanitize(left_out[0])}{more}, which push does not publish (only regular files "
            f"under {DATA_DIR}/ and the prepared splits' directories, never hidden paths), so the published "
            "dataset would fail its own checksums.", fix=f"Re-create the dataset's files (`whest dataset prepare-arrow "
            f"{directory}` for prepared copies, a re-bake for data/) and push again.")
    for d in sorted(prepared_dirs):
        if not any(f.path.startswith(d + "/") for f in data):
            raise InvalidDatasetError(f"metadata.json declares prepared Arrow files in {d}/ but {directory / d} has none;",
                                      fix=f"re-create them with `whest dataset prepare-arrow {directory}`.")
    for split in sorted(md.get("prepared_splits") or {}):
        if split not in readable:
            continue  # as in _require_schema: unreadable shards are verify's business, not push's
        problem = prepared_problem(handle, md, split)
        if problem:
            raise InvalidDatasetError(f"the prepared Arrow copy of split {split!r} is not its rows: {problem}; "
                                      "push publishes only copies bit-identical to the Parquet rows.",
                                      fix=f"Re-create it with `whest dataset prepare-arrow {directory}`.")
    # data/ before prepared/, so prepared copies never reach the Hub before the shards they mirror
    data.sort(key=lambda f: (f.path.split("/", 1)[0] != DATA_DIR, f.path))

    revision = cfg.tag or DEFAULT_BRANCH
    text = render_card(md, repo_id=cfg.repo, revision=revision, **(cfg.card or {}))
    if scrub(text) != text:  # from metadata the card fields do not check (a bake command, say): never published
        raise InvalidDatasetError("the card rendered from its metadata.json holds what looks like a credential (a token, "
                                  "a password in a URL); push publishes nothing that `push --dry-run` would show masked:",
                                  where=sanitize(str(directory)), fix="fix metadata.json's fields, or re-bake.")
    card = text.encode("utf-8")
    return PushPlan(
        directory=directory,
        repo_id=cfg.repo,
        revision=revision,
        metadata=md,
        data=tuple(data),
        metadata_file=_memory_file(METADATA_FILE, handle.metadata_bytes),  # the bytes checked, not read again
        card=_memory_file(CARD_FILE, card),
        ignored=tuple(ignored),
    )


# --------------------------------------------------------------------------------------------- Push


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
    """Whether the Hub's file (a ``RepoSibling``/``RepoFile``; None: no such file) already has ``local``'s bytes."""
    size = getattr(remote, "size", None)
    if size is not None and size != local.size:
        return False
    lfs = getattr(remote, "lfs", None)
    if lfs is not None:
        sha = lfs.get("sha256") if isinstance(lfs, Mapping) else getattr(lfs, "sha256", None)
        return sha == local.sha256
    blob = getattr(remote, "blob_id", None)
    return blob is not None and size is not None and blob == local.git_blob_id()


def _batches(files: Sequence[LocalFile], max_bytes: int, max_files: int) -> list[list[LocalFile]]:
    """Consecutive groups of at most ``max_files`` files and ``max_bytes`` (a bigger file goes alone)."""
    out: list[list[LocalFile]] = []
    size = 0
    for f in files:
        if not out or size + f.size > max_bytes or len(out[-1]) >= max_files:
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.size
    return out


def push_dataset(directory: str | Path, repo: "str | PushConfig", *, token: str | None = None,
                 on_event: EventSink | None = None, **options: Any) -> PushResult:
    """Publish the dataset at ``directory`` to the Hub dataset repo ``repo`` (branch ``main``): a
    ``PushConfig``, or the repo with the config's fields as keyword ``options``.

    ``token``: a Hub token, or None for HF_TOKEN / the stored ``hf auth login`` (never kept in the config).
    Events (``on_event``): ``start`` and ``planned`` (local totals, before any network call), a
    ``note`` when files are left out or the Hub is being retried, ``compared`` (what the Hub already
    holds; progress total = the bytes to send), ``commit`` after each commit (progress = bytes sent
    so far), ``tagged``.
    """
    emit = on_event or ignore
    cfg = PushConfig.of(repo, options)
    check_token(token)
    require_settings()  # before the local checks: a setting no Hub call can use is found at once
    tag, private, exist_ok = cfg.tag, cfg.private, cfg.exist_ok
    plan = plan_push(directory, cfg)
    repo_id = plan.repo_id
    ref = HubRef(repo_id, DEFAULT_BRANCH)
    emit(Event("start", message=f"Uploading {plan.directory} → {hf_ref(repo_id, plan.revision)}",
               data={"repo_id": repo_id, "revision": plan.revision}))
    emit(Event("planned", message=f"Total: {format_bytes(plan.total_bytes)} ({plural(len(plan.files), 'file')}) "
                                  "— will create repo if needed.",
               data={"files": len(plan.files), "bytes": plan.total_bytes, "ignored": list(plan.ignored)}))
    if plan.ignored:
        more = len(plan.ignored) - 5
        shown = ", ".join(sanitize(p) for p in plan.ignored[:5]) + (f" (+{more} more)" if more > 0 else "")
        emit(Event("note", message=f"not part of the dataset, not uploaded: {shown}"))

    huggingface_hub = hub_client()

    api = huggingface_hub.HfApi()
    what = f"pushing to {hf_ref(repo_id, plan.revision)}"

    def hub(fn, *, retry: bool = True):
        return call(fn, what=what, ref=ref, token=token, on_event=emit, retry=retry)

    def create_repo() -> None:
        extra = {"private": True} if private else {}
        try:
            api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=exist_ok, token=token, **extra)
        except hub_exception("HfHubHTTPError") as e:
            if exist_ok or getattr(getattr(e, "response", None), "status_code", None) != 409:
                raise
            raise UsageError(f"{repo_id} already exists on the Hub and repo_exist_ok=False was asked:",
                             fix="publish to a new repo, or allow an existing one.") from None

    def branch_info() -> Any:
        """The branch's head commit and files (with sizes and hashes), or None for a repo without it."""
        try:
            return api.dataset_info(repo_id, revision=DEFAULT_BRANCH, files_metadata=True, token=token)
        except hub_exception("RevisionNotFoundError"):
            return None

    hub(create_repo)
    info = hub(branch_info)
    if private and info is not None and getattr(info, "private", None) is False:
        raise UsageError(f"{repo_id} already exists and is public; --private does not change an existing repo.",
                         fix=f"Make it private in its settings ({HUB_URL}/datasets/{repo_id}/settings) or push to a new repo.")
    if tag is not None:
        refs = hub(lambda: api.list_repo_refs(repo_id, repo_type=REPO_TYPE, token=token))
        if any(t.name == tag for t in getattr(refs, "tags", None) or []):
            raise UsageError(f"tag {tag!r} already exists in {repo_id};",
                             fix="choose a new --tag (tags name one published version and are never moved).")

    remote = {s.rfilename: s for s in (getattr(info, "siblings", None) or [])}
    todo = [f for f in plan.data if not _same_content(f, remote.get(f.path))]
    finals = [f for f in (plan.metadata_file, plan.card) if not _same_content(f, remote.get(f.path))]
    upload = todo + finals
    local_paths = {f.path for f in plan.files}
    stale = sorted(p for p in remote if p.split("/", 1)[0] in _PUBLISHED_DIRS and p not in local_paths)
    sent = {f.path for f in upload}
    unchanged = sorted(f.path for f in plan.files if f.path not in sent)

    # the last commit carries metadata.json, the card and the removals (one of its own when no data goes up)
    batches = _batches(todo, cfg.max_commit_bytes, cfg.max_commit_files) or ([[]] if finals or stale else [])
    if batches:
        batches[-1] += finals
    upload_bytes = sum(f.size for f in upload)
    parts = [f"{len(unchanged)} already on the Hub"] if unchanged else []
    if upload:
        parts.append(f"uploading {plural(len(upload), 'file')} ({format_bytes(upload_bytes)}) "
                     f"in {plural(len(batches), 'commit')}")
    if stale:
        parts.append(f"removing {plural(len(stale), 'stale file')} from an earlier push")
    emit(Event("compared", message="Hub: " + ("; ".join(parts) if parts else "nothing to do"),
               progress=Progress("bytes", 0, upload_bytes),
               data={"upload_files": len(upload), "upload_bytes": upload_bytes,
                     "unchanged": len(unchanged), "stale": stale, "commits": len(batches)}))

    commits: list[Commit] = []
    parent = getattr(info, "sha", None)  # None: a repo without the branch yet
    done_bytes = 0
    for i, batch in enumerate(batches, 1):
        last = i == len(batches)
        ops: list[Any] = [huggingface_hub.CommitOperationAdd(
            path_in_repo=f.path, path_or_fileobj=f.content if f.content is not None else str(f.source)) for f in batch]
        if last:
            ops += [huggingface_hub.CommitOperationDelete(path_in_repo=p) for p in stale]
        text = (cfg.message or DEFAULT_MESSAGE) + (f" ({i}/{len(batches)})" if len(batches) > 1 else "")
        kwargs = {"parent_commit": parent} if parent else {}
        # a commit is not retried: one whose answer was lost may have landed (re-running resumes)
        landed = hub(lambda: api.create_commit(repo_id, ops, commit_message=text, repo_type=REPO_TYPE,
                                               revision=DEFAULT_BRANCH, token=token, **kwargs), retry=False)
        parent = landed.oid
        c = Commit(oid=landed.oid, files=len(batch), bytes=sum(f.size for f in batch),
                   deleted=len(stale) if last else 0)
        commits.append(c)
        done_bytes += c.bytes
        removed = f", {c.deleted} removed" if c.deleted else ""
        emit(Event("commit", message=f"  commit {i}/{len(batches)}: {plural(c.files, 'file')} "
                                     f"({format_bytes(c.bytes)}{removed}) → {c.oid[:12]}",
                   progress=Progress("bytes", done_bytes, upload_bytes),
                   data={"index": i, "total": len(batches), "oid": c.oid, "files": c.files, "bytes": c.bytes,
                         "deleted": c.deleted}))
    final = parent
    if final is None:  # nothing to commit and no head: cannot happen (the card is always new then)
        raise HubError(f"the Hub reported no commit on {repo_id}@{DEFAULT_BRANCH};", fix="re-run the push.")
    if tag is not None:
        hub(lambda: api.create_tag(repo_id, tag=tag, revision=final, repo_type=REPO_TYPE, token=token), retry=False)
        emit(Event("tagged", message=f"Tagged {final[:12]} as {tag}", data={"tag": tag, "oid": final}))
    return PushResult(
        repo_id=repo_id, revision=plan.revision, commit=final, url=tree_url(repo_id, plan.revision),
        commits=tuple(commits), uploaded=tuple(f.path for f in upload), unchanged=tuple(unchanged),
        deleted=tuple(stale), tag=tag,
    )


def publish_dataset(local_dir: str | Path, *, repo_id: str, tag: str | None = None, token: str | None = None,
                    commit_message: str | None = None, private: bool = False, repo_exist_ok: bool = True) -> str:
    """whestbench 0.16's Python push: publish ``local_dir`` to ``repo_id`` and return the commit id.

    The same push as ``whest dataset push`` (``push_dataset``): the dataset is checked first
    (partial, tampered or incomplete datasets are refused before any upload), the card is rendered
    for ``repo_id`` and ``tag`` into the upload only (the local README.md is left as it is), and the
    returned commit is the one that holds the whole dataset (the one ``tag`` names).
    """
    return push_dataset(local_dir, repo_id, tag=tag, message=commit_message, private=private, token=token,
                        exist_ok=repo_exist_ok).commit
