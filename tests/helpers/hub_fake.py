"""An in-memory fake of the Hugging Face Hub, patched in at the network boundary (shared by the Hub tests).

``FakeHub`` replaces the ``HfApi`` methods whestbench calls (create_repo, dataset_info,
list_repo_refs, create_commit, create_tag), ``huggingface_hub.hf_hub_download`` and
``snapshot_download``, and (``with_datasets=True``) ``datasets.load_dataset``, which it answers by
loading the repo's Parquet shards with the real parquet builder. It keeps each repo as a list of
commits (path -> bytes), answers ``dataset_info`` with real ``RepoSibling`` objects (LFS sha256
for .parquet/.arrow, git blob ids otherwise, as the Hub does) and records every call. Each patched
call is first bound to the installed release's real signature, so a renamed parameter fails here as
it would for real. ``offline = True`` makes every call fail as the real client does without a
network (a transport ConnectError; ``LocalEntryNotFoundError`` from the download functions).

Not exercised by anything that uses it: the real Hub and HTTP client (authentication, LFS/Xet
transfer, the server's card validation, rate limits, real error responses and their timing) —
only the calls we make and how we read the answers.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import socket
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from huggingface_hub.hf_api import BlobLfsInfo, GitRefInfo, GitRefs, RepoSibling

from helpers.datasets import base_metadata

TOKEN = "hf_SeCrEtT0kenValue1234567890"


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def http_error(cls, status: int, message: str):
    """A huggingface_hub HTTP error as its client raises it (a response with a status and headers)."""
    response = SimpleNamespace(status_code=status, headers={}, request=None)
    return cls(message, response=response)


def transport_error(message: str = "[Errno 111] Connection refused") -> BaseException:
    """The connection error huggingface_hub's HTTP client raises (httpx2, httpx or requests)."""
    for mod, name in (("httpx2", "ConnectError"), ("httpx", "ConnectError"), ("requests", "ConnectionError")):
        try:
            return getattr(importlib.import_module(mod), name)(message)
        except ImportError:
            continue
    return ConnectionRefusedError(message)


def offline_download_error() -> BaseException:
    """What hf_hub_download/snapshot_download raise without a network and without a cached copy."""
    err = huggingface_hub.errors.LocalEntryNotFoundError(
        "An error happened while trying to locate the file on the Hub and we cannot find the requested "
        "files in the local cache. Please check your connection and try again.")
    err.__cause__ = transport_error()
    return err


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}
        self.calls: list[tuple[str, dict]] = []
        self.fail_commit_at: int | None = None  # raise a connection error on the n-th create_commit
        self.fail_download: BaseException | None = None
        self.offline = False
        self.flaky = 0  # this many next calls fail as if the connection dropped
        self.cache: Path | None = None  # the fake HF cache folder (set by install)
        self._n = 0

    # -- remote state helpers
    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None, *, private: bool = False) -> None:
        self.repos[repo_id] = {"private": private, "commits": [], "tags": {}}
        self._commit(repo_id, {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n", **(files or {})})

    def add_dir(self, repo_id: str, root: Path) -> None:
        """A repo holding the files of a local dataset directory."""
        self.add_repo(repo_id, {p.relative_to(root).as_posix(): p.read_bytes()
                                for p in sorted(root.rglob("*")) if p.is_file()})

    def _commit(self, repo_id: str, files: dict[str, bytes]) -> str:
        self._n += 1
        oid = hashlib.sha1(f"commit-{self._n}".encode()).hexdigest()
        self.repos[repo_id]["commits"].append((oid, dict(files)))
        return oid

    def head(self, repo_id: str) -> str:
        return self.repos[repo_id]["commits"][-1][0]

    def resolve(self, repo_id: str, revision: str | None) -> str:
        """The commit id ``revision`` (branch, tag or commit) names."""
        repo = self._repo(repo_id)
        rev = repo["tags"].get(revision, revision)
        if rev in (None, "main"):
            return self.head(repo_id)
        if any(oid == rev for oid, _ in repo["commits"]):
            return rev
        raise http_error(huggingface_hub.errors.RevisionNotFoundError, 404, f"Revision Not Found: {revision}")

    def files(self, repo_id: str, revision: str | None = None) -> dict[str, bytes]:
        sha = self.resolve(repo_id, revision)
        return next(files for oid, files in self.repos[repo_id]["commits"] if oid == sha)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def commits(self) -> list[dict]:
        return [kw for name, kw in self.calls if name == "create_commit"]

    def _network(self, name: str) -> None:
        if self.flaky > 0:
            self.flaky -= 1
            raise transport_error("[Errno 104] Connection reset by peer")
        if self.offline:
            raise offline_download_error() if name in ("hf_hub_download", "snapshot_download") else transport_error()

    # -- the patched API
    def _repo(self, repo_id: str) -> dict:
        if repo_id not in self.repos:
            raise http_error(huggingface_hub.errors.RepositoryNotFoundError, 404, f"Repository Not Found: {repo_id}")
        return self.repos[repo_id]

    def create_repo(self, api, repo_id, *, repo_type=None, exist_ok=False, token=None, private=None, **kw):
        self.calls.append(("create_repo", dict(repo_id=repo_id, repo_type=repo_type, private=private, token=token)))
        self._network("create_repo")
        if repo_id in self.repos and not exist_ok:
            raise http_error(huggingface_hub.errors.HfHubHTTPError, 409, "You already created this dataset repo")
        if repo_id not in self.repos:
            self.add_repo(repo_id, private=bool(private))
        return f"https://huggingface.co/datasets/{repo_id}"

    def dataset_info(self, api, repo_id, *, revision=None, files_metadata=False, token=None, **kw):
        self.calls.append(("dataset_info", dict(repo_id=repo_id, revision=revision, token=token)))
        self._network("dataset_info")
        repo = self._repo(repo_id)
        sha = self.resolve(repo_id, revision)
        siblings = []
        for path, data in sorted(self.files(repo_id, sha).items()):
            if not files_metadata:
                siblings.append(RepoSibling(rfilename=path))
            elif path.endswith((".parquet", ".arrow")):
                lfs = BlobLfsInfo(size=len(data), sha256=hashlib.sha256(data).hexdigest(), pointer_size=134)
                siblings.append(RepoSibling(rfilename=path, size=len(data), blob_id="0" * 40, lfs=lfs))
            else:
                siblings.append(RepoSibling(rfilename=path, size=len(data), blob_id=_git_blob_id(data)))
        return SimpleNamespace(sha=sha, private=repo["private"], siblings=siblings)

    def list_repo_refs(self, api, repo_id, *, repo_type=None, token=None, **kw):
        self.calls.append(("list_repo_refs", dict(repo_id=repo_id, token=token)))
        self._network("list_repo_refs")
        tags = [GitRefInfo(name=t, ref=f"refs/tags/{t}", target_commit=o)
                for t, o in self._repo(repo_id)["tags"].items()]
        return GitRefs(branches=[], converts=[], tags=tags)

    def create_commit(self, api, repo_id, operations, *, commit_message, repo_type=None, revision=None,
                      token=None, parent_commit=None, **kw):
        ops = list(operations)
        record = dict(repo_id=repo_id, message=commit_message, revision=revision, parent_commit=parent_commit,
                      token=token, adds={}, deletes=[])
        for op in ops:
            if isinstance(op, huggingface_hub.CommitOperationAdd):
                src = op.path_or_fileobj
                record["adds"][op.path_in_repo] = src if isinstance(src, bytes) else Path(src).read_bytes()
            else:
                record["deletes"].append(op.path_in_repo)
        self.calls.append(("create_commit", record))
        self._network("create_commit")
        if self.fail_commit_at is not None and len(self.commits()) == self.fail_commit_at:
            raise ConnectionError("connection reset by peer")
        if parent_commit is not None and parent_commit != self.head(repo_id):
            raise http_error(huggingface_hub.errors.HfHubHTTPError, 412, "Precondition Failed")
        files = dict(self.files(repo_id))
        files.update(record["adds"])
        for path in record["deletes"]:
            del files[path]
        return SimpleNamespace(oid=self._commit(repo_id, files))

    def create_tag(self, api, repo_id, *, tag, revision=None, repo_type=None, token=None, **kw):
        self.calls.append(("create_tag", dict(repo_id=repo_id, tag=tag, revision=revision, token=token)))
        self._network("create_tag")
        repo = self._repo(repo_id)
        assert revision in [oid for oid, _ in repo["commits"]], "tags must name a commit id"
        repo["tags"][tag] = revision

    def _snapshot_root(self, repo_id: str, sha: str) -> Path:
        return self.cache / repo_id.replace("/", "--") / "snapshots" / sha

    def hf_hub_download(self, repo_id, filename, *, repo_type=None, revision=None, token=None, **kw):
        self.calls.append(("hf_hub_download", dict(repo_id=repo_id, filename=filename, revision=revision,
                                                   token=token)))
        self._network("hf_hub_download")
        sha = self.resolve(repo_id, revision)
        files = self.files(repo_id, sha)
        if filename not in files:
            raise http_error(huggingface_hub.errors.RemoteEntryNotFoundError, 404, f"Entry Not Found: {filename}")
        path = self._snapshot_root(repo_id, sha) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[filename])
        return str(path)

    def snapshot_download(self, repo_id, *, repo_type=None, revision=None, allow_patterns=None, token=None,
                          local_dir=None, **kw):
        self.calls.append(("snapshot_download", dict(repo_id=repo_id, revision=revision,
                                                     allow_patterns=allow_patterns, token=token, local_dir=local_dir)))
        self._network("snapshot_download")
        if self.fail_download is not None:
            raise self.fail_download
        sha = self.resolve(repo_id, revision)
        files = self.files(repo_id, sha)
        chosen = list(huggingface_hub.utils.filter_repo_objects(sorted(files), allow_patterns=allow_patterns))
        root = Path(local_dir) if local_dir else self._snapshot_root(repo_id, sha)
        for path in chosen:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(files[path])
        if local_dir:  # huggingface_hub keeps its resume state inside local_dir
            (root / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
            (root / ".cache" / "huggingface" / "marker").write_text("x")
        return str(root)

    def load_dataset(self, path, name=None, *, split=None, revision=None, token=None, streaming=False, **kw):
        """``datasets.load_dataset(repo, [config], split=...)``: the split's shards, read by the real builder."""
        if path == "parquet":  # a local load (the loader's own route for directories): not the Hub
            return self._real_load_dataset(path, name, split=split, revision=revision, token=token,
                                           streaming=streaming, **kw)
        self.calls.append(("load_dataset", dict(repo_id=path, name=name, split=split, revision=revision,
                                                token=token, streaming=streaming)))
        self._network("load_dataset")
        sha = self.resolve(path, revision)
        root = self._snapshot_root(path, sha)
        shards = []
        for rel, data in sorted(self.files(path, sha).items()):
            if rel.startswith(f"data/{split}-") and rel.endswith(".parquet"):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
                shards.append(str(root / rel))
        if not shards:
            raise ValueError(f"Unknown split {split!r}")
        ds = self._real_load_dataset("parquet", data_files={split: shards}, split=split)
        return ds.to_iterable_dataset() if streaming else ds

    def loads(self) -> list[dict]:
        return [kw for name, kw in self.calls if name == "load_dataset"]

    def install(self, monkeypatch, cache: Path, *, with_datasets: bool = False) -> "FakeHub":
        """Patch the API; every call is first bound to the installed release's real signature."""
        self.cache = cache

        def checked(real, name):
            signature = inspect.signature(real)

            def call(*a, **k):
                signature.bind(*a, **k)  # a renamed or missing parameter fails here, as it would for real
                return getattr(self, name)(*a, **k)  # looked up per call: a test may replace one method

            return call

        for name in ("create_repo", "dataset_info", "list_repo_refs", "create_commit", "create_tag"):
            monkeypatch.setattr(huggingface_hub.HfApi, name, checked(getattr(huggingface_hub.HfApi, name), name))
        for name in ("snapshot_download", "hf_hub_download"):
            monkeypatch.setattr(huggingface_hub, name, checked(getattr(huggingface_hub, name), name))
        if with_datasets:
            import datasets

            self._real_load_dataset = datasets.load_dataset
            monkeypatch.setattr(datasets, "load_dataset", checked(datasets.load_dataset, "load_dataset"))
        return self


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Any real connection attempt fails the test; no stored login or HF_TOKEN is used.

    Autouse in every test module that imports it (``from helpers.hub_fake import no_network, clock``).
    """

    def refuse(*a, **k):
        raise AssertionError("a test tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("WHEST_HUB_RETRY_SECONDS", raising=False)


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> "FakeClock":
    """The retry policy's clock: waiting is instant and recorded (autouse where imported)."""
    return FakeClock().install(monkeypatch)


class FakeClock:
    """Stands in for the retry policy's clock and sleep: waiting is instant and recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def install(self, monkeypatch) -> "FakeClock":
        from whestbench.hub import client as hubclient

        monkeypatch.setattr(hubclient, "_sleep", self.sleep)
        monkeypatch.setattr(hubclient, "_clock", lambda: self.now)
        return self


# --------------------------------------------------------------------------------------------------
# Datasets on disk (push never parses Parquet, so shards are opaque bytes with real checksums)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_dataset(root: Path, shards: dict[str, bytes], md: dict | None = None, *, checksums: bool = True,
                 extra: dict[str, bytes] | None = None) -> Path:
    """A dataset directory: ``shards`` ({relative path: bytes}), metadata.json, a placeholder card."""
    md = dict(md or base_metadata())
    for rel, data in {**shards, **(extra or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    if checksums:
        md["checksums"] = {rel: _sha(data) for rel, data in sorted(shards.items()) if rel.startswith("data/")}
    (root / "metadata.json").write_text(json.dumps(md, indent=2))
    (root / "README.md").write_text("# local card for <your-repo>\n")
    return root


def single(root: Path, n_shards: int = 1, seed: bytes = b"a") -> Path:
    shards = {f"data/public-{i:05d}-of-{n_shards:05d}.parquet": seed * (100 + i) for i in range(n_shards)}
    return make_dataset(root, shards)


def multi(root: Path) -> Path:
    md = base_metadata()
    for k in ("split", "config", "n_mlps"):
        del md[k]
    md["splits"] = {"public": {"n_mlps": 4, "config": "default"}, "holdout": {"n_mlps": 2, "config": "default"}}
    md["default_split"] = "public"
    md["prepared_splits"] = {s: {"path": f"prepared/{s}", "format": "save_to_disk"} for s in ("public", "holdout")}
    shards = {"data/public-00000-of-00001.parquet": b"P" * 300, "data/holdout-00000-of-00001.parquet": b"H" * 200}
    prepared = {f"prepared/{s}/{f}": f"{s}-{f}".encode() for s in ("public", "holdout")
                for f in ("data-00000-of-00001.arrow", "dataset_info.json", "state.json")}
    return make_dataset(root, shards, md, extra=prepared)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
