"""PushConfig: one push request, validated once, built by the CLI and by push_dataset's keywords alike."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from whestbench.errors import DatasetSourceError, UsageError
from whestbench.hub import push
from whestbench.hub.push import PushConfig, plan_push, push_dataset

from helpers.hub_fake import FakeHub, clock, no_network, single  # noqa: F401  (no_network, clock: autouse fixtures)


@pytest.fixture
def hub(monkeypatch, tmp_path) -> FakeHub:
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache")


def test_the_repo_is_kept_as_org_name():
    assert PushConfig("hf://datasets/org/ds").repo == "org/ds"
    assert PushConfig("org/ds", tag="v1").tag == "v1"


@pytest.mark.parametrize("kw, error, message", [
    (dict(repo="org/ds@v2"), DatasetSourceError, "names a revision"),
    (dict(repo="not a repo"), DatasetSourceError, "is not a Hub dataset id"),
    (dict(repo="org/ds", tag="v1..2"), UsageError, "is not a valid git tag name"),
])
def test_a_bad_repo_or_tag_is_refused_before_any_file_is_read(tmp_path, kw, error, message):
    with pytest.raises(error, match=message):
        PushConfig(**kw)
    with pytest.raises(error, match=message):  # the directory does not exist: the request is judged first
        plan_push(tmp_path / "nowhere", kw.pop("repo"), **kw)


def test_keywords_and_a_config_push_the_same(tmp_path, hub):
    ds = single(tmp_path / "ds")
    by_keywords = push_dataset(ds, "org/a", tag="v1", message="m")
    by_config = push_dataset(ds, PushConfig("org/b", tag="v1", message="m"))
    assert by_keywords.uploaded == by_config.uploaded and by_keywords.tag == by_config.tag == "v1"
    assert hub.files("org/a").keys() == hub.files("org/b").keys()


def test_a_config_and_keywords_together_are_refused(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        plan_push(tmp_path, PushConfig("org/ds"), tag="v1")


def test_the_cli_builds_one_config_and_passes_it(tmp_path, monkeypatch):
    ds = single(tmp_path / "ds")
    seen = []
    real = push.plan_push

    def spy(directory, config, **kw):
        seen.append(config)
        return real(directory, config, **kw)

    monkeypatch.setattr(push, "plan_push", spy)
    from whestbench.cli.app import cli

    result = CliRunner().invoke(cli, ["dataset", "push", str(ds), "--repo", "hf://org/ds", "--tag", "v3",
                                      "--license", "mit", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert [(c.repo, c.tag, dict(c.card or {}).get("license")) for c in seen] == [("org/ds", "v3", "mit")]
