"""push/pull through huggingface_hub, against an in-memory fake of the Hub (nothing touches the network).

``FakeHub`` replaces the ``HfApi`` methods the hub module calls (create_repo, dataset_info,
list_repo_refs, create_commit, create_tag) and ``huggingface_hub.snapshot_download``. It keeps each
repo as a list of commits (path -> bytes), answers ``dataset_info`` with real ``RepoSibling``
objects (LFS sha256 for .parquet/.arrow, git blob ids otherwise, as the Hub does) and records every
call. A socket guard fails any test that would still reach the network.

Not exercised here: the real Hub and HTTP client (authentication, LFS/Xet transfer, the server's
card validation, rate limits, real error responses) — only the calls we make and how we read the
answers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import socket
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from huggingface_hub.hf_api import BlobLfsInfo, GitRefInfo, GitRefs, RepoSibling

from whestbench.dataset.errors import InvalidDatasetError, MergeCorruptError
from whestbench.dataset.hub import (
    HubError,
    check_repo_id,
    parse_repo_ref,
    plan_push,
    pull_dataset,
    push_dataset,
    split_files,
    staging_path,
)
from whestbench.errors import UsageError

REPO = "org/ds"
TOKEN = "hf_SeCrEtT0kenValue1234567890"

# --------------------------------------------------------------------------------------------------
# The fake Hub


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def http_error(cls, status: int, message: str):
    """A huggingface_hub HTTP error as its client raises it (a response with a status and headers)."""
    response = SimpleNamespace(status_code=status, headers={}, request=None)
    return cls(message, response=response)


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}
        self.calls: list[tuple[str, dict]] = []
        self.fail_commit_at: int | None = None  # raise a connection error on the n-th create_commit
        self.fail_download: BaseException | None = None
        self.cache = None  # the fake HF cache folder (set by install)
        self._n = 0

    # -- remote state helpers
    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None, *, private: bool = False) -> None:
        self.repos[repo_id] = {"private": private, "commits": [], "tags": {}}
        self._commit(repo_id, {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n", **(files or {})})

    def _commit(self, repo_id: str, files: dict[str, bytes]) -> str:
        self._n += 1
        oid = hashlib.sha1(f"commit-{self._n}".encode()).hexdigest()
        self.repos[repo_id]["commits"].append((oid, dict(files)))
        return oid

    def head(self, repo_id: str) -> str:
        return self.repos[repo_id]["commits"][-1][0]

    def files(self, repo_id: str, revision: str | None = None) -> dict[str, bytes]:
        repo = self.repos[repo_id]
        rev = repo["tags"].get(revision, revision)
        if rev in (None, "main"):
            return repo["commits"][-1][1]
        for oid, files in repo["commits"]:
            if oid == rev:
                return files
        raise http_error(huggingface_hub.errors.RevisionNotFoundError, 404, f"Revision Not Found: {revision}")

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def commits(self) -> list[dict]:
        return [kw for name, kw in self.calls if name == "create_commit"]

    # -- the patched API
    def _repo(self, repo_id: str) -> dict:
        if repo_id not in self.repos:
            raise http_error(huggingface_hub.errors.RepositoryNotFoundError, 404, f"Repository Not Found: {repo_id}")
        return self.repos[repo_id]

    def create_repo(self, api, repo_id, *, repo_type=None, exist_ok=False, token=None, private=None, **kw):
        self.calls.append(("create_repo", dict(repo_id=repo_id, repo_type=repo_type, private=private, token=token)))
        if repo_id not in self.repos:
            self.add_repo(repo_id, private=bool(private))
        return f"https://huggingface.co/datasets/{repo_id}"

    def dataset_info(self, api, repo_id, *, revision=None, files_metadata=False, token=None, **kw):
        self.calls.append(("dataset_info", dict(repo_id=repo_id, revision=revision, token=token)))
        repo = self._repo(repo_id)
        files = self.files(repo_id, revision)
        rev = repo["tags"].get(revision, revision)
        sha = next((oid for oid, f in repo["commits"] if oid == rev), None) or self.head(repo_id)
        siblings = []
        for path, data in sorted(files.items()):
            if path.endswith((".parquet", ".arrow")):
                lfs = BlobLfsInfo(size=len(data), sha256=hashlib.sha256(data).hexdigest(), pointer_size=134)
                siblings.append(RepoSibling(rfilename=path, size=len(data), blob_id="0" * 40, lfs=lfs))
            else:
                siblings.append(RepoSibling(rfilename=path, size=len(data), blob_id=_git_blob_id(data)))
        return SimpleNamespace(sha=sha, private=repo["private"], siblings=siblings)

    def list_repo_refs(self, api, repo_id, *, repo_type=None, token=None, **kw):
        self.calls.append(("list_repo_refs", dict(repo_id=repo_id, token=token)))
        tags = [GitRefInfo(name=t, ref=f"refs/tags/{t}", target_commit=o) for t, o in self._repo(repo_id)["tags"].items()]
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
        repo = self._repo(repo_id)
        assert revision in [oid for oid, _ in repo["commits"]], "tags must name a commit id"
        repo["tags"][tag] = revision

    def snapshot_download(self, repo_id, *, repo_type=None, revision=None, allow_patterns=None, token=None,
                          local_dir=None, **kw):
        self.calls.append(("snapshot_download", dict(repo_id=repo_id, revision=revision,
                                                     allow_patterns=allow_patterns, token=token, local_dir=local_dir)))
        if self.fail_download is not None:
            raise self.fail_download
        files = self.files(self._repo(repo_id) and repo_id, revision)
        chosen = list(huggingface_hub.utils.filter_repo_objects(sorted(files), allow_patterns=allow_patterns))
        root = Path(local_dir) if local_dir else self.cache / repo_id.replace("/", "--") / "snapshots" / revision
        for path in chosen:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(files[path])
        if local_dir:  # huggingface_hub keeps its resume state inside local_dir
            (root / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
            (root / ".cache" / "huggingface" / "marker").write_text("x")
        return str(root)

    def install(self, monkeypatch, cache: Path) -> "FakeHub":
        """Patch the API; every call is first bound to the installed release's real signature."""
        self.cache = cache

        def checked(real, fn):
            signature = inspect.signature(real)

            def call(*a, **k):
                signature.bind(*a, **k)  # a renamed or missing parameter fails here, as it would for real
                return fn(*a, **k)

            return call

        for name in ("create_repo", "dataset_info", "list_repo_refs", "create_commit", "create_tag"):
            monkeypatch.setattr(huggingface_hub.HfApi, name, checked(getattr(huggingface_hub.HfApi, name),
                                                                     getattr(self, name)))
        monkeypatch.setattr(huggingface_hub, "snapshot_download",
                            checked(huggingface_hub.snapshot_download, self.snapshot_download))
        return self


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Any real connection attempt fails the test; no stored login or HF_TOKEN is used."""

    def refuse(*a, **k):
        raise AssertionError("a test tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)


@pytest.fixture
def hub(monkeypatch, tmp_path) -> FakeHub:
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache")


# --------------------------------------------------------------------------------------------------
# Datasets on disk (push never parses Parquet, so shards are opaque bytes with real checksums)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def base_metadata(**extra) -> dict:
    md = {
        "schema_version": "3.0",
        "format": "hf-datasets-parquet",
        "backend": "flopscope",
        "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
        "created_at_utc": "2026-01-01T00:00:00+00:00",
        "split": "public",
        "config": "default",
        "n_mlps": 4,
        "n_samples": 100,
        "width": 8,
        "depth": 2,
    }
    md.update(extra)
    return md


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


# --------------------------------------------------------------------------------------------------
# push: what is refused before any network call


def test_a_partial_dataset_is_refused_before_any_hub_call(tmp_path, hub):
    ds = make_dataset(tmp_path / "part", {"data/public-00000-of-00001.parquet": b"x" * 10},
                      base_metadata(n_mlps=2, is_partial=True, mlp_range=[0, 2], total_n_mlps=4))
    with pytest.raises(InvalidDatasetError, match=r"partial.*whest dataset merge"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_a_tampered_shard_is_refused_before_any_hub_call(tmp_path, hub):
    ds = single(tmp_path / "ds")
    (ds / "data/public-00000-of-00001.parquet").write_bytes(b"tampered")
    with pytest.raises(MergeCorruptError, match="checksum"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_invalid_metadata_is_refused_before_any_hub_call(tmp_path, hub):
    ds = make_dataset(tmp_path / "ds", {"data/public-00000-of-00001.parquet": b"x"}, base_metadata(schema_version="2.0"))
    with pytest.raises(InvalidDatasetError, match="schema_version"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_a_file_under_data_that_the_checksums_do_not_list_is_refused(tmp_path, hub):
    ds = single(tmp_path / "ds")
    (ds / "data" / "notes.txt").write_text("hello")
    with pytest.raises(InvalidDatasetError, match="not listed in metadata.json checksums"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_a_bad_repo_id_is_a_usage_error(tmp_path, hub):
    for bad in ("just-a-name", "a/b/c", "org/na me", "-org/name", "org/name.git", ""):
        with pytest.raises(UsageError, match="ORG/NAME"):
            push_dataset(single(tmp_path / f"ds{len(bad)}{bad.count('/')}"), bad)
    assert hub.calls == []


def test_files_outside_the_dataset_layout_are_listed_as_ignored_not_uploaded(tmp_path):
    ds = single(tmp_path / "ds")
    (ds / "notes.txt").write_text("mine")
    (ds / ".cache").mkdir()
    (ds / ".cache" / "x").write_text("x")
    plan = plan_push(ds, REPO)
    assert set(plan.ignored) == {".cache", "notes.txt"}
    assert [f.path for f in plan.files] == ["data/public-00000-of-00001.parquet", "metadata.json", "README.md"]


# --------------------------------------------------------------------------------------------------
# push: what reaches the Hub


def test_push_publishes_the_data_metadata_and_a_card_for_the_repo_and_tag(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=2)
    local_before = tree_bytes(ds)
    result = push_dataset(ds, REPO, tag="v1")
    remote = hub.files(REPO)
    assert {p: remote[p] for p in local_before if p != "README.md"} == {
        p: b for p, b in local_before.items() if p != "README.md"}
    card = remote["README.md"].decode()
    assert f"https://huggingface.co/datasets/{REPO}/tree/v1" in card
    assert "<your-repo>" not in card
    assert tree_bytes(ds) == local_before  # the local card is never rewritten
    assert result.url == f"https://huggingface.co/datasets/{REPO}/tree/v1"


def test_metadata_and_card_go_in_the_last_commit_after_all_data(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=3)
    result = push_dataset(ds, REPO, max_commit_bytes=150)  # ~one 100-byte shard per commit
    commits = hub.commits()
    assert len(commits) == len(result.commits) == 3
    for c in commits[:-1]:
        assert "metadata.json" not in c["adds"] and "README.md" not in c["adds"]
    assert {"metadata.json", "README.md"} <= set(commits[-1]["adds"])
    assert [c["message"] for c in commits] == [f"Upload whestbench dataset ({i}/3)" for i in (1, 2, 3)]


def test_each_commit_builds_on_the_previous_one(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=2)
    hub.add_repo(REPO)
    head = hub.head(REPO)
    result = push_dataset(ds, REPO, max_commit_bytes=150)
    assert [c["parent_commit"] for c in hub.commits()] == [head, result.commits[0].oid]


def test_a_small_dataset_is_published_in_one_commit_with_the_given_message(tmp_path, hub):
    push_dataset(single(tmp_path / "ds", n_shards=2), REPO, message="round 1")
    (commit,) = hub.commits()
    assert commit["message"] == "round 1"
    assert sorted(commit["adds"]) == ["README.md", "data/public-00000-of-00002.parquet",
                                      "data/public-00001-of-00002.parquet", "metadata.json"]


def test_stale_shards_of_an_earlier_push_are_deleted_in_the_last_commit(tmp_path, hub):
    push_dataset(single(tmp_path / "old", n_shards=3), REPO)
    hub_files = dict(hub.files(REPO))
    hub_files["extra.txt"] = b"kept: not part of the dataset layout"
    hub.repos[REPO]["commits"].append(("f" * 40, hub_files))
    result = push_dataset(single(tmp_path / "new", n_shards=1, seed=b"b"), REPO, max_commit_bytes=1)
    last = hub.commits()[-1]
    assert sorted(last["deletes"]) == [f"data/public-0000{i}-of-00003.parquet" for i in range(3)]
    assert "metadata.json" in last["adds"]
    assert sorted(hub.files(REPO)) == [".gitattributes", "README.md", "data/public-00000-of-00001.parquet",
                                       "extra.txt", "metadata.json"]
    assert sorted(result.deleted) == sorted(last["deletes"])


def test_a_second_push_of_the_same_dataset_uploads_nothing(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=2)
    first = push_dataset(ds, REPO)
    second = push_dataset(ds, REPO)
    assert len(hub.commits()) == 1
    assert second.commits == () and second.uploaded == ()
    assert second.commit == first.commit == hub.head(REPO)


def test_an_interrupted_push_resumes_with_only_the_files_not_yet_committed(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=3)
    hub.fail_commit_at = 2
    with pytest.raises(HubError, match="could not reach the Hugging Face Hub"):
        push_dataset(ds, REPO, max_commit_bytes=150)
    assert "metadata.json" not in hub.files(REPO)  # a half-finished push advertises nothing
    hub.fail_commit_at = None
    result = push_dataset(ds, REPO, max_commit_bytes=150)
    assert "data/public-00000-of-00003.parquet" in result.unchanged
    assert sorted(result.uploaded) == ["README.md", "data/public-00001-of-00003.parquet",
                                       "data/public-00002-of-00003.parquet", "metadata.json"]


def test_the_tag_is_created_after_the_last_commit_on_its_id(tmp_path, hub):
    result = push_dataset(single(tmp_path / "ds", n_shards=2), REPO, tag="v1", max_commit_bytes=150)
    assert hub.names()[-1] == "create_tag"
    (tag_call,) = [kw for name, kw in hub.calls if name == "create_tag"]
    assert tag_call["tag"] == "v1"
    assert tag_call["revision"] == result.commits[-1].oid == result.commit == hub.head(REPO)


def test_an_existing_tag_is_refused_before_anything_is_uploaded(tmp_path, hub):
    push_dataset(single(tmp_path / "a"), REPO, tag="v1")
    with pytest.raises(UsageError, match="tag 'v1' already exists"):
        push_dataset(single(tmp_path / "b", seed=b"z"), REPO, tag="v1")
    assert len(hub.commits()) == 1


def test_a_rerun_after_the_commit_landed_only_creates_the_missing_tag(tmp_path, hub):
    ds = single(tmp_path / "ds")
    push_dataset(ds, REPO)
    hub.calls.clear()
    result = push_dataset(ds, REPO, tag="v1")  # the card now names v1, so only it changes
    assert [sorted(c["adds"]) for c in hub.commits()] == [["README.md"]]
    assert hub.repos[REPO]["tags"] == {"v1": result.commit}


def test_private_creates_a_private_repo(tmp_path, hub):
    push_dataset(single(tmp_path / "ds"), REPO, private=True)
    assert hub.calls[0] == ("create_repo", {"repo_id": REPO, "repo_type": "dataset", "private": True, "token": None})
    assert hub.repos[REPO]["private"] is True


def test_private_refuses_an_existing_public_repo(tmp_path, hub):
    hub.add_repo(REPO, private=False)
    with pytest.raises(UsageError, match="already exists and is public"):
        push_dataset(single(tmp_path / "ds"), REPO, private=True)
    assert hub.commits() == []


def test_a_multi_split_dataset_publishes_its_prepared_arrow_copies_after_the_shards(tmp_path, hub):
    ds = multi(tmp_path / "ds")
    plan = plan_push(ds, REPO)
    paths = [f.path for f in plan.data]
    assert paths[:2] == ["data/holdout-00000-of-00001.parquet", "data/public-00000-of-00001.parquet"]
    assert all(p.startswith("prepared/") for p in paths[2:]) and len(paths) == 8
    push_dataset(ds, REPO)
    assert {p: b for p, b in hub.files(REPO).items() if p.startswith(("data/", "prepared/"))} == {
        p: b for p, b in tree_bytes(ds).items() if p.startswith(("data/", "prepared/"))}


def test_a_dataset_made_by_whestbench_016_without_checksums_can_be_pushed(tmp_path, hub, golden_dir):
    fixture = golden_dir / "full-w64-d4"
    push_dataset(fixture, REPO)
    assert hub.files(REPO)["data/public-00000-of-00001.parquet"] == (
        fixture / "data/public-00000-of-00001.parquet").read_bytes()


def test_the_token_reaches_the_hub_calls_and_nothing_else(tmp_path, hub, capsys):
    ds = single(tmp_path / "ds")
    result = push_dataset(ds, REPO, tag="v1", token=TOKEN, on_event=lambda e: print(e))
    pulled = pull_dataset(REPO, output=tmp_path / "pulled", token=TOKEN, on_event=lambda e: print(e))
    assert all(kw["token"] == TOKEN for _, kw in hub.calls)
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    assert TOKEN not in repr(result) + repr(pulled)
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert TOKEN.encode() not in p.read_bytes(), p
    assert all(TOKEN.encode() not in b for b in hub.files(REPO).values())


# --------------------------------------------------------------------------------------------------
# Hub errors


def test_a_missing_repo_becomes_one_line_naming_the_repo_id_and_login(tmp_path, hub):
    with pytest.raises(HubError) as info:
        pull_dataset("org/missing")
    text = str(info.value)
    assert "\n" not in text and "org/missing" in text and "hf auth login" in text


def test_a_forbidden_write_names_the_token_fix_and_never_echoes_the_token(tmp_path, hub, monkeypatch):
    def forbidden(api, *a, **k):
        raise http_error(huggingface_hub.errors.HfHubHTTPError, 403, f"403 Forbidden for token {TOKEN}")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", forbidden)
    with pytest.raises(HubError, match="write access") as info:
        push_dataset(single(tmp_path / "ds"), REPO, token=TOKEN)
    assert TOKEN not in str(info.value)


def test_an_unknown_revision_names_the_revision_flag(tmp_path, hub):
    hub.add_repo(REPO, {"metadata.json": b"{}"})
    with pytest.raises(HubError, match="--revision"):
        pull_dataset(REPO, revision="nope")


# --------------------------------------------------------------------------------------------------
# pull


@pytest.fixture
def published(tmp_path, hub) -> Path:
    ds = multi(tmp_path / "src")
    push_dataset(ds, REPO, tag="v1")
    hub.calls.clear()
    return ds


def test_pull_writes_the_whole_dataset_at_output_and_nothing_beside_it(tmp_path, hub, published):
    out = tmp_path / "dst" / "ds"
    result = pull_dataset(REPO, revision="v1", output=out)
    assert result.path == out and result.commit == hub.repos[REPO]["tags"]["v1"]
    got = tree_bytes(out)
    assert {p: b for p, b in got.items() if p != "README.md" and p != ".gitattributes"} == {
        p: b for p, b in tree_bytes(published).items() if p != "README.md"}
    assert not (out / ".cache").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["ds"]
    assert result.verified == 2


def test_pull_asks_for_the_resolved_commit_so_a_moving_branch_cannot_mix_versions(tmp_path, hub, published):
    pull_dataset(REPO, output=tmp_path / "out")
    (call,) = [kw for name, kw in hub.calls if name == "snapshot_download"]
    assert call["revision"] == hub.head(REPO)


def test_pull_with_split_fetches_only_that_splits_files(tmp_path, hub, published):
    result = pull_dataset(REPO, output=tmp_path / "out", split="holdout")
    (call,) = [kw for name, kw in hub.calls if name == "snapshot_download"]
    assert sorted(call["allow_patterns"]) == sorted([
        "README.md", "metadata.json", "data/holdout-00000-of-00001.parquet",
        "prepared/holdout/data-00000-of-00001.arrow", "prepared/holdout/dataset_info.json",
        "prepared/holdout/state.json"])
    assert not (tmp_path / "out" / "data" / "public-00000-of-00001.parquet").exists()
    assert result.verified == 1


def test_split_files_never_take_a_longer_split_name_that_starts_the_same(tmp_path):
    paths = ["data/round-00000-of-00001.parquet", "data/round-one-00000-of-00001.parquet",
             "prepared/round/state.json", "prepared/roundup/state.json", "metadata.json"]
    assert split_files(paths, "round") == ["data/round-00000-of-00001.parquet", "prepared/round/state.json",
                                           "metadata.json"]


def test_pull_with_a_split_that_matches_nothing_names_the_splits_and_downloads_nothing(tmp_path, hub, published):
    with pytest.raises(InvalidDatasetError, match=r"--split 'mini' matched no parquet files.*\['holdout', 'public'\]"):
        pull_dataset(REPO, output=tmp_path / "out", split="mini")
    assert "snapshot_download" not in hub.names()
    assert not (tmp_path / "out").exists()


def test_pull_with_a_bad_split_name_is_a_usage_error_before_any_call(tmp_path, hub, published):
    with pytest.raises(UsageError, match="--split"):
        pull_dataset(REPO, split="Hold-Out")
    assert hub.calls == []


def test_pull_into_an_existing_output_is_refused_before_any_call(tmp_path, hub, published):
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        pull_dataset(REPO, output=tmp_path / "out")
    assert hub.calls == []


def test_pull_refuses_a_download_whose_shard_does_not_match_its_checksum(tmp_path, hub, published):
    files = dict(hub.files(REPO))
    files["data/public-00000-of-00001.parquet"] = b"corrupted on the way"
    hub.repos[REPO]["commits"].append(("e" * 40, files))
    with pytest.raises(InvalidDatasetError, match="checksum"):
        pull_dataset(REPO, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not staging_path(tmp_path / "out").exists()


def test_pull_of_a_repo_without_metadata_is_refused_before_downloading(tmp_path, hub):
    hub.add_repo("org/other", {"data/train.csv": b"a,b\n"})
    with pytest.raises(InvalidDatasetError, match="not a WhestBench dataset"):
        pull_dataset("org/other", output=tmp_path / "out")
    assert "snapshot_download" not in hub.names()


def test_an_interrupted_pull_keeps_its_staging_and_the_rerun_completes(tmp_path, hub, published):
    out = tmp_path / "out"
    hub.fail_download = ConnectionError("connection reset")
    with pytest.raises(HubError, match="re-running the same command resumes"):
        pull_dataset(REPO, output=out)
    assert not out.exists() and staging_path(out).is_dir()
    hub.fail_download = None
    pull_dataset(REPO, output=out)
    assert out.is_dir() and not staging_path(out).exists()


def test_a_leftover_staging_from_another_commit_is_discarded_not_mixed_in(tmp_path, hub, published):
    out = tmp_path / "out"
    staging_path(out).mkdir()
    (staging_path(out) / "data").mkdir()
    (staging_path(out) / "data" / "public-00001-of-00002.parquet").write_bytes(b"from an older version")
    pull_dataset(REPO, output=out)
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "holdout-00000-of-00001.parquet", "public-00000-of-00001.parquet"]


def test_pull_without_output_leaves_the_files_in_the_cache(tmp_path, hub, published):
    result = pull_dataset(f"hf://{REPO}@v1")
    assert result.cached and result.path.is_dir()
    assert str(result.path).startswith(str(hub.cache))
    assert result.verified == 2


def test_repo_refs_accept_the_hf_form_that_push_prints():
    assert parse_repo_ref("hf://org/ds@v1") == ("org/ds", "v1")
    assert parse_repo_ref("org/ds", "main") == ("org/ds", "main")
    assert parse_repo_ref("hf://datasets/org/ds") == ("org/ds", None)
    with pytest.raises(UsageError, match="give the revision once"):
        parse_repo_ref("org/ds@v1", "v2")
    assert check_repo_id("AIcrowd/whestbench-2026.v1_a") == "AIcrowd/whestbench-2026.v1_a"
