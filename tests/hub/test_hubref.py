"""hubref: the reference grammar, local-or-Hub resolution, token scrubbing, the retry policy, error wording.

The central test runs every reference form through all four users of a reference (load_dataset,
describe/inspect, push_dataset, pull_dataset) against tests/helpers/hub_fake.py and checks they agree: the
same repo and revision reach the network boundary, or the same refusal is raised before it.
"""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

from whestbench.cli.app import main
from whestbench.errors import InvalidDatasetError
from whestbench.hub.pull import pull_dataset
from whestbench.hub.push import push_dataset
from whestbench.hub.client import call, explain
from whestbench.hub.ref import HubRef, parse_ref, resolve_source
from whestbench.errors import DatasetSourceError, HubError
from whestbench.verify.inspect import describe
from whestbench.hub.loader import load_dataset
from whestbench.errors import UsageError, WorkFailed
from whestbench.text import remember_token, scrub

from helpers.hub_fake import FakeHub, clock, http_error, no_network, offline_download_error, transport_error  # noqa: F401  (autouse fixtures)


REPO = "org/name"


@pytest.fixture
def baked(tiny) -> Path:
    return tiny["public"]


@pytest.fixture
def hub(monkeypatch, tmp_path, baked) -> FakeHub:
    fake = FakeHub().install(monkeypatch, tmp_path / "hf-cache", with_datasets=True)
    fake.add_dir(REPO, baked)
    fake.repos[REPO]["tags"]["v1"] = fake.head(REPO)
    return fake


# --------------------------------------------------------------------------------------------------
# Every form through every verb

# (text, --revision, what it means): a (repo, revision) pair, or the start of the refusal
FORMS = [
    ("org/name", None, (REPO, None)),
    ("org/name", "v1", (REPO, "v1")),
    ("org/name@v1", None, (REPO, "v1")),
    ("org/name@v1", "v1", (REPO, "v1")),  # the same revision twice is not a conflict
    ("hf://org/name", None, (REPO, None)),
    ("hf://org/name@v1", None, (REPO, "v1")),
    ("hf://datasets/org/name@v1", None, (REPO, "v1")),
    ("hf://datasets/org/name", None, (REPO, None)),
    ("org/name@", None, "'org/name@' ends in '@' with no revision"),
    ("hf://org/name@", None, "'hf://org/name@' ends in '@' with no revision"),
    ("org/name@v1", "v2", "'org/name@v1' names revision 'v1' but --revision is 'v2'"),
    ("org/name", "", "--revision is empty"),
    ("a/b/c", None, "'a/b/c' is not a Hub dataset id"),
    ("no such thing", None, "'no such thing' is not a Hub dataset id"),
    ("hf://org", None, "'hf://org' is not a Hub dataset id"),
    ("-org/name", None, "'-org/name' is not a Hub dataset id"),
    ("org/name.git", None, "'org/name.git' is not a Hub dataset id"),
]


def _first_hub_call(hub: FakeHub) -> tuple[str, str | None] | None:
    for name, kw in hub.calls:
        if name in ("dataset_info", "create_repo"):
            return kw["repo_id"], kw.get("revision")
    return None


def _outcome(hub: FakeHub, fn) -> tuple[str, object]:
    hub.calls.clear()
    try:
        fn()
    except (UsageError, InvalidDatasetError, WorkFailed) as e:
        return type(e).__name__, str(e)
    return "ok", _first_hub_call(hub)


@pytest.mark.parametrize("text, revision, meaning", FORMS, ids=[f"{t}|{r}" for t, r, _ in FORMS])
def test_every_reference_form_means_the_same_to_load_inspect_pull_and_push(
        text, revision, meaning, hub, baked, tmp_path):
    verbs = {
        "load": lambda: load_dataset(text, revision=revision),
        "inspect": lambda: describe(text, revision=revision),
        "pull": lambda: pull_dataset(text, revision=revision, output=tmp_path / "pulled"),
    }
    outcomes = {verb: _outcome(hub, fn) for verb, fn in verbs.items()}
    push = _outcome(hub, lambda: push_dataset(baked, text)) if revision is None else None
    if isinstance(meaning, tuple):
        assert set(outcomes.values()) == {("ok", meaning)}, outcomes
        if meaning[1] is None:
            assert push == ("ok", (REPO, None))
        elif push is not None:  # push names versions with --tag, never with @REV
            assert push[0] == "DatasetSourceError" and f"--tag {meaning[1]}" in push[1]
    else:
        assert {kind for kind, _ in outcomes.values()} == {"DatasetSourceError"}, outcomes
        assert len({msg for _, msg in outcomes.values()}) == 1, outcomes
        assert next(iter(outcomes.values()))[1].startswith(meaning)
        if push is not None:
            assert push == next(iter(outcomes.values()))
        assert hub.calls == []


def test_a_missing_local_path_is_reported_alike_and_never_looked_up(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = "./missing-ds"
    outcomes = {
        "load": _outcome(hub, lambda: load_dataset(missing)),
        "inspect": _outcome(hub, lambda: describe(missing)),
        "push": _outcome(hub, lambda: push_dataset(missing, REPO)),
    }
    assert set(outcomes.values()) == {("DatasetSourceError", "no such dataset directory: missing-ds. Check the "
                                       "path; to use a dataset on the Hugging Face Hub pass a repo id such as "
                                       "'org/name'.")}, outcomes
    kind, message = _outcome(hub, lambda: pull_dataset(missing))
    assert kind == "DatasetSourceError" and "'./missing-ds' is not a Hub dataset id" in message
    assert hub.calls == []


@pytest.mark.parametrize("argv", [
    ["inspect", "org/name@"], ["pull", "org/name@"], ["push", "{ds}", "--repo", "org/name@"],
    ["inspect", "org/name@v1", "--revision", "v2"], ["pull", "org/name@v1", "--revision", "v2"],
    ["inspect", "a/b/c"], ["pull", "a/b/c"], ["push", "{ds}", "--repo", "a/b/c"],
    ["inspect", "./missing-ds"], ["push", "./missing-ds", "--repo", REPO],
])
def test_every_refused_reference_exits_2_with_one_line_before_any_hub_call(argv, hub, baked, capsys, tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["dataset", *[a.format(ds=baked) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert hub.calls == []


# --------------------------------------------------------------------------------------------------
# Grammar details


def test_resolve_source_keeps_existing_and_plainly_local_paths_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert resolve_source("org/name") == Path("org/name")  # an existing directory wins over the Hub
    assert resolve_source(Path("org/name")) == Path("org/name")
    assert resolve_source("hf://org/name") == HubRef(REPO)  # hf:// is always the Hub
    with pytest.raises(DatasetSourceError, match="no such dataset directory"):
        resolve_source("org/other")  # "org/" exists here: a mistyped path, not a repo


def test_a_revision_may_contain_slashes_and_at_signs_after_the_first():
    assert parse_ref("org/name@refs/pr/1") == HubRef(REPO, "refs/pr/1")
    assert parse_ref("hf://org/name@a@b") == HubRef(REPO, "a@b")


def test_hf_datasets_prefix_is_stripped_only_before_org_and_name():
    assert parse_ref("hf://datasets/org/name") == HubRef(REPO)
    assert parse_ref("hf://datasets/name") == HubRef("datasets/name")
    with pytest.raises(DatasetSourceError):
        parse_ref("datasets/org/name")  # without hf:// it is not the file-system spelling


def test_a_reference_error_is_a_usage_error_and_an_invalid_dataset_error():
    with pytest.raises(DatasetSourceError) as info:
        parse_ref("org/name@")
    assert isinstance(info.value, UsageError) and isinstance(info.value, InvalidDatasetError)


def test_a_reference_with_escape_codes_is_echoed_without_them():
    with pytest.raises(DatasetSourceError) as info:
        parse_ref("org/\x1b[2Jname@")
    assert "\x1b" not in str(info.value)


# --------------------------------------------------------------------------------------------------
# Tokens


def test_scrub_masks_given_remembered_environment_and_token_shaped_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "env-secret-value")
    remember_token("custom-token-not-hf-shaped")
    text = "a hf_AbCdEfGh12345678 b env-secret-value c custom-token-not-hf-shaped d Bearer xyz e given-one"
    out = scrub(text, "given-one")
    for secret in ("hf_AbCdEfGh12345678", "env-secret-value", "custom-token-not-hf-shaped", "xyz", "given-one"):
        assert secret not in out


# --------------------------------------------------------------------------------------------------
# The retry policy and error wording


def test_a_refusal_from_the_hub_is_not_retried(clock):
    def refused():
        raise http_error(huggingface_hub.errors.HfHubHTTPError, 403, "Forbidden")

    with pytest.raises(HubError, match="403"):
        call(refused, what="pushing", ref=HubRef(REPO))
    assert clock.sleeps == []


@pytest.mark.parametrize("status", [429, 503])
def test_busy_or_failing_hub_answers_are_retried_then_named(clock, status):
    def busy():
        raise http_error(huggingface_hub.errors.HfHubHTTPError, status, "busy")

    with pytest.raises(HubError, match=str(status)):
        call(busy, what="reading", ref=HubRef(REPO), on_event=lambda e: None)
    assert sum(clock.sleeps) == pytest.approx(20)


def test_the_waits_back_off_and_never_pass_the_budget(clock, monkeypatch):
    monkeypatch.setenv("WHEST_HUB_RETRY_SECONDS", "30")
    def unreachable():
        raise transport_error()

    with pytest.raises(HubError):
        call(unreachable, what="reading", ref=HubRef(REPO), on_event=lambda e: None)
    assert clock.sleeps == [1, 2, 4, 8, 8, 7]


def test_offline_mode_is_named_not_retried(clock):
    def offline():
        raise huggingface_hub.errors.OfflineModeIsEnabled("offline")

    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set"):
        call(offline, what="reading", ref=HubRef(REPO))
    assert clock.sleeps == []


def test_an_unreachable_hub_found_by_hf_hub_download_is_a_network_error_not_a_missing_file():
    exc = huggingface_hub.errors.LocalEntryNotFoundError("cannot find the requested files in the local cache")
    better = explain(exc, ref=HubRef(REPO))
    assert isinstance(better, HubError) and "could not reach the Hugging Face Hub" in str(better)


def test_no_message_advises_the_retired_login_command(hub):
    for exc in (http_error(huggingface_hub.errors.HfHubHTTPError, 401, "x"),
                http_error(huggingface_hub.errors.RepositoryNotFoundError, 404, "x"),
                huggingface_hub.errors.LocalTokenNotFoundError("x")):
        text = str(explain(exc, ref=HubRef(REPO)))
        assert "hf auth login" in text and "huggingface-cli" not in text


# --------------------------------------------------------------------------------------------------
# HF_HUB_OFFLINE: the Hugging Face cache is the only source


def test_offline_mode_reads_metadata_from_the_cache_without_listing_the_repo(hub, monkeypatch):
    from whestbench.hub import client as hubclient

    monkeypatch.setattr(hubclient, "offline_mode", lambda: True)
    remote = hubclient.fetch_metadata(HubRef(REPO, "v1"))
    assert hub.names() == ["hf_hub_download"] and hub.calls[0][1]["revision"] == "v1"
    assert remote.commit == hub.head(REPO) and remote.metadata["n_mlps"] == 2


def test_offline_mode_without_a_cached_copy_says_so(hub, monkeypatch):
    from whestbench.hub import client as hubclient

    def not_cached(*a, **k):
        raise offline_download_error()

    monkeypatch.setattr(hubclient, "offline_mode", lambda: True)
    monkeypatch.setattr(hub, "hf_hub_download", not_cached)
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set and hf://org/name@main's metadata.json is not in"):
        describe(REPO)
