"""push/pull/publish_dataset through huggingface_hub, against the in-memory fake Hub of tests/helpers/hub_fake.py.

Nothing touches the network (a socket guard fails any test that would). Not exercised here: the
real Hub and HTTP client (authentication, LFS/Xet transfer, the server's card validation, rate
limits, real error responses) — only the calls we make and how we read the answers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

import huggingface_hub
import pytest

import whestbench
from whestbench.errors import InvalidDatasetError, MergeCorruptError
from whestbench.hub.pull import pull_dataset, split_files, staging_path
from whestbench.hub.push import plan_push, publish_dataset, push_dataset
from whestbench.hub.ref import check_repo_id
from whestbench.errors import HubError
from whestbench.errors import UsageError
from whestbench.events import Event, Progress

from helpers.datasets import base_metadata
from helpers.hub_fake import (  # noqa: F401  (no_network, clock: autouse fixtures)
    TOKEN,
    FakeHub,
    clock,
    http_error,
    make_dataset,
    multi,
    no_network,
    single,
    tree_bytes,
)


REPO = "org/ds"


@pytest.fixture
def hub(monkeypatch, tmp_path) -> FakeHub:
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache")


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


# --------------------------------------------------------------------------------------------------
# push: what is published is what verify and load read (symlinks, hidden paths)


def test_a_symlinked_data_directory_is_refused_before_any_hub_call(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=2)
    os.rename(ds / "data", tmp_path / "elsewhere")
    (ds / "data").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(InvalidDatasetError, match=r"data is a symlink.*cp -rL"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_a_symlinked_prepared_directory_is_refused_before_any_hub_call(tmp_path, hub):
    ds = multi(tmp_path / "ds")
    os.rename(ds / "prepared", tmp_path / "prepared-elsewhere")
    (ds / "prepared").symlink_to(tmp_path / "prepared-elsewhere", target_is_directory=True)
    with pytest.raises(InvalidDatasetError, match="prepared is a symlink"):
        push_dataset(ds, REPO)
    assert hub.calls == []


def test_a_symlink_outside_the_published_layout_is_ignored_not_followed(tmp_path, hub):
    ds = single(tmp_path / "ds")
    (tmp_path / "notes").mkdir()
    (ds / "notes").symlink_to(tmp_path / "notes", target_is_directory=True)
    assert "notes" in plan_push(ds, REPO).ignored


def test_a_listed_file_that_push_would_skip_is_refused_before_any_hub_call(tmp_path, hub):
    # a killed prepare-arrow once left its staging directory listed in the checksums
    staging = {"prepared/.public.staging-1/state.json": b"{}"}
    ds = make_dataset(tmp_path / "ds", {"data/public-00000-of-00001.parquet": b"x" * 10}, extra=staging)
    md = json.loads((ds / "metadata.json").read_text())
    md["checksums"]["prepared/.public.staging-1/state.json"] = "sha256:" + hashlib.sha256(b"{}").hexdigest()
    (ds / "metadata.json").write_text(json.dumps(md))
    with pytest.raises(InvalidDatasetError, match=r"lists prepared/\.public\.staging-1/state\.json.*not publish"):
        push_dataset(ds, REPO)
    assert hub.calls == []


# --------------------------------------------------------------------------------------------------
# events: typed, sizes in KiB/MiB, byte progress


def test_push_reports_typed_events_with_byte_progress(tmp_path, hub):
    events: list[Event] = []
    push_dataset(single(tmp_path / "ds", n_shards=3), REPO, max_commit_bytes=150, on_event=events.append)
    assert all(isinstance(e, Event) for e in events)
    kinds = [e.kind for e in events]
    assert kinds[:3] == ["start", "planned", "compared"] and kinds.count("commit") == 3
    total = next(e for e in events if e.kind == "compared").progress.total
    done = [e.progress.done for e in events if e.kind == "commit"]
    assert all(e.progress.what == "bytes" and e.progress.total == total for e in events if e.kind == "commit")
    assert done == sorted(done) and done[-1] == total
    assert "B (" in next(e for e in events if e.kind == "planned").message


def test_hub_messages_give_sizes_in_binary_units(tmp_path, hub):
    events: list[Event] = []
    shards = {"data/public-00000-of-00001.parquet": b"z" * 3000}
    push_dataset(make_dataset(tmp_path / "ds", shards), REPO, on_event=events.append)
    text = " ".join(e.message for e in events)
    assert "KiB" in text and " kB" not in text


def test_pull_reports_byte_progress_up_to_the_total(tmp_path, hub):
    push_dataset(multi(tmp_path / "src"), REPO)
    events: list[Event] = []
    result = pull_dataset(REPO, output=tmp_path / "out", on_event=events.append)
    pre = next(e for e in events if e.kind == "preflight")
    assert pre.progress == Progress("bytes", 0, result.bytes)
    last = [e.progress for e in events if e.progress is not None][-1]
    assert (last.what, last.done, last.total) == ("bytes", result.bytes, result.bytes)


def test_the_download_watcher_reports_bytes_as_they_reach_the_disk(tmp_path):
    import threading

    from whestbench.hub.pull import _DiskProgress

    seen: list[Progress] = []
    arrived = threading.Event()

    def sink(e: Event) -> None:
        seen.append(e.progress)
        if e.progress.done == 300:
            arrived.set()

    (tmp_path / "old").write_bytes(b"o" * 50)  # already there: not counted as this download's
    with _DiskProgress(tmp_path, 300, sink, interval=0.01):
        (tmp_path / "a.incomplete").write_bytes(b"a" * 300)
        assert arrived.wait(60), f"300 bytes on disk, never reported as done (reported: {seen})"  # a hang guard: ~0.02 s idle
    assert seen[-1] == Progress("bytes", 300, 300)


# --------------------------------------------------------------------------------------------------
# the Hub unreachable: one bounded retry policy, one line naming the network


def test_an_unreachable_hub_is_retried_for_the_announced_time_then_named(tmp_path, hub, clock):
    hub.offline = True
    events: list[Event] = []
    with pytest.raises(HubError) as info:
        pull_dataset(REPO, output=tmp_path / "out", on_event=events.append)
    notes = [e.message for e in events if e.kind == "note"]
    assert len(notes) == 1 and "retrying for up to 20 s" in notes[0]
    assert sum(clock.sleeps) == pytest.approx(20)
    text = str(info.value)
    assert "\n" not in text and "could not reach the Hugging Face Hub" in text and "The network is the problem" in text
    assert "after retrying for 20 s" in text and "huggingface-cli" not in text


def test_the_retry_time_can_be_set_and_zero_means_no_retry(tmp_path, hub, clock, monkeypatch):
    hub.offline = True
    monkeypatch.setenv("WHEST_HUB_RETRY_SECONDS", "0")
    events: list[Event] = []
    with pytest.raises(HubError, match="could not reach"):
        push_dataset(single(tmp_path / "ds"), REPO, on_event=events.append)
    assert clock.sleeps == [] and not [e for e in events if e.kind == "note" and "retrying" in e.message]


def test_a_bad_retry_setting_is_a_usage_error(tmp_path, hub, monkeypatch):
    hub.offline = True
    monkeypatch.setenv("WHEST_HUB_RETRY_SECONDS", "soon")
    with pytest.raises(UsageError, match="WHEST_HUB_RETRY_SECONDS"):
        pull_dataset(REPO)


def test_a_hub_that_comes_back_within_the_wait_is_used(tmp_path, hub, clock):
    push_dataset(single(tmp_path / "src"), REPO)
    hub.flaky = 2
    result = pull_dataset(REPO, output=tmp_path / "out")
    assert result.path.is_dir() and clock.sleeps == [1.0, 2.0]


def test_a_commit_is_not_retried_when_its_answer_is_lost(tmp_path, hub, clock):
    hub.fail_commit_at = 1
    with pytest.raises(HubError, match="could not reach"):
        push_dataset(single(tmp_path / "ds"), REPO)
    assert len(hub.commits()) == 1 and clock.sleeps == []


# --------------------------------------------------------------------------------------------------
# publish_dataset: whestbench 0.16's Python push


def test_publish_dataset_has_the_reference_signature_and_top_level_name():
    # whestbench 0.16.2: publish_dataset(local_dir, *, repo_id, tag=None, token=None,
    #                                    commit_message=None, private=False, repo_exist_ok=True) -> str
    params = inspect.signature(whestbench.publish_dataset).parameters
    assert [(p.name, p.kind.name, p.default) for p in params.values()] == [
        ("local_dir", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("repo_id", "KEYWORD_ONLY", inspect.Parameter.empty),
        ("tag", "KEYWORD_ONLY", None),
        ("token", "KEYWORD_ONLY", None),
        ("commit_message", "KEYWORD_ONLY", None),
        ("private", "KEYWORD_ONLY", False),
        ("repo_exist_ok", "KEYWORD_ONLY", True),
    ]
    assert whestbench.publish_dataset is publish_dataset


def test_publish_dataset_returns_the_commit_that_the_tag_names(tmp_path, hub):
    ds = single(tmp_path / "ds", n_shards=2)
    before = tree_bytes(ds)
    sha = publish_dataset(ds, repo_id=REPO, tag="v1", commit_message="round 1", token=TOKEN)
    assert sha == hub.head(REPO) == hub.repos[REPO]["tags"]["v1"]
    assert [c["message"] for c in hub.commits()] == ["round 1"]
    assert all(kw["token"] == TOKEN for _, kw in hub.calls)
    assert tree_bytes(ds) == before  # unlike 0.16, the local README.md is not rewritten


def test_publish_dataset_with_repo_exist_ok_false_refuses_an_existing_repo(tmp_path, hub):
    hub.add_repo(REPO)
    with pytest.raises(UsageError, match="already exists"):
        publish_dataset(single(tmp_path / "ds"), repo_id=REPO, repo_exist_ok=False)
    assert hub.commits() == []


def test_publish_dataset_refuses_a_partial_dataset_as_push_does(tmp_path, hub):
    ds = make_dataset(tmp_path / "part", {"data/public-00000-of-00001.parquet": b"x" * 10},
                      base_metadata(n_mlps=2, is_partial=True, mlp_range=[0, 2], total_n_mlps=4))
    with pytest.raises(InvalidDatasetError, match="partial"):
        publish_dataset(ds, repo_id=REPO)
    assert hub.calls == []


def test_schema_version_is_a_top_level_name():
    assert whestbench.SCHEMA_VERSION == "3.0" and "SCHEMA_VERSION" in whestbench.__all__


def test_repo_ids_may_use_dots_underscores_and_capitals():
    assert check_repo_id("AIcrowd/whestbench-2026.v1_a") == "AIcrowd/whestbench-2026.v1_a"


# --------------------------------------------------------------------------------------------------
# prepared Arrow copies are checked against their rows


def test_push_dry_run_refuses_a_prepared_copy_that_differs(tmp_path, hub, golden_dir, damage_prepared, capsys):
    """The golden combined dataset, its prepared holdout copy +0.5 on every mean and re-signed: the
    checksums agree, the copy does not say what the rows say. Push and its dry run refuse it."""
    import shutil

    from whestbench.cli.app import main

    ds = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "comb"))
    assert plan_push(ds, REPO).data  # the honest copy goes up
    damage_prepared(ds, "holdout", resign=True)
    with pytest.raises(InvalidDatasetError, match=r"prepared Arrow copy of split 'holdout'.*column all_layer_means, row 0"):
        plan_push(ds, REPO)
    capsys.readouterr()
    assert main(["dataset", "push", str(ds), "--repo", REPO, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "prepare-arrow" in err and "Traceback" not in err
    assert hub.calls == []


def test_push_refuses_an_unchecked_device_without_the_flag(tmp_path, hub, torch_bakes, capsys):
    """A torch bake whose device check was skipped is refused by push and its dry run (exit 1, one line
    naming the flag) until --allow-unchecked-device says so; a checked bake needs no flag."""
    from whestbench.cli.app import main

    skipped = torch_bakes["skipped"]
    assert plan_push(torch_bakes["checked"], REPO).data
    with pytest.raises(InvalidDatasetError, match=r"device check was skipped.*--allow-unchecked-device"):
        plan_push(skipped, REPO)
    assert plan_push(skipped, REPO, allow_unchecked_device=True).data
    capsys.readouterr()
    assert main(["dataset", "push", str(skipped), "--repo", REPO, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-unchecked-device" in err
    assert main(["dataset", "push", str(skipped), "--repo", REPO, "--dry-run", "--allow-unchecked-device"]) == 0
    assert hub.calls == []


def test_push_publishes_the_audit_trail_and_a_one_split_pull_keeps_it(tmp_path, hub):
    """The audit trail (audit/<split>.parquet, listed in the checksums) is part of what push publishes
    and what a one-split pull fetches; the pulled copy passes its checksums and its trail check."""
    from whestbench.bake.pipeline import create_dataset
    from whestbench.verify.run import verify_dataset

    ds = create_dataset(2, 3000, 4, 2, seed=1, output_path=tmp_path / "ds")
    push_dataset(ds, REPO)
    assert hub.files(REPO)["audit/public.parquet"] == (ds / "audit" / "public.parquet").read_bytes()
    pulled = pull_dataset(REPO, output=tmp_path / "pulled", split="public").path
    assert (Path(pulled) / "audit" / "public.parquet").read_bytes() == (ds / "audit" / "public.parquet").read_bytes()
    report = verify_dataset(pulled)
    assert report.get("checksums").ok and report.get("trail").ok
    assert split_files(["data/a-00000-of-00001.parquet", "audit/a.parquet", "audit/ab.parquet", "metadata.json"], "a") == [
        "data/a-00000-of-00001.parquet", "audit/a.parquet", "metadata.json"]


@pytest.mark.parametrize("debug", ["0", "1"])
def test_hf_endpoint_password_is_never_printed(tmp_path, debug):
    """HF_ENDPOINT=http://user:s3cretpw@host printed the password once, and twice with WHEST_DEBUG=1.
    A refused local port stands in for the Hub (nothing leaves this machine); no retry wait."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HF_ENDPOINT="http://user:s3cretpw@127.0.0.1:9", WHEST_HUB_RETRY_SECONDS="0",
               WHEST_DEBUG=debug, HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=os.pathsep.join([str(repo / "src"), os.environ.get("PYTHONPATH", "")]))
    env.pop("HF_HUB_OFFLINE", None)
    p = subprocess.run([sys.executable, "-m", "whestbench", "dataset", "inspect", "org/name"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "s3cretpw" not in p.stdout + p.stderr
    assert "http://***@127.0.0.1:9" in p.stderr
