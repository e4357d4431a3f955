"""VerifyConfig: one verify request, validated once, built by the CLI and by verify_dataset's keywords alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from whestbench.errors import UsageError
from whestbench.verify import run
from whestbench.verify.config import VerifyConfig


@pytest.fixture
def small(tiny) -> Path:
    return tiny["public"]


@pytest.mark.parametrize("kw, message", [
    (dict(n_check=0), "--n-check must be a positive integer; got 0."),
    (dict(spot_check=True), "--spot-check takes K "),
    (dict(spot_check=1, spot_seed=-2), "--spot-seed must be a non-negative integer"),
    (dict(spot_seed=3), "--spot-seed applies to --spot-check only"),
    (dict(recompute_seed=3), "--recompute-seed applies to --recompute only"),
    (dict(device="cpu"), "--device applies to --recompute and --spot-check only"),
    (dict(cache=False), "--no-cache applies to --recompute and --spot-check only"),
])
def test_a_request_no_dataset_could_satisfy_is_refused_when_built(kw, message):
    with pytest.raises(UsageError, match="^" + message.replace("(", r"\(")):
        VerifyConfig(**kw)


def test_the_config_is_frozen_and_its_paths_are_paths():
    cfg = VerifyConfig(against="a", recompute=1, recompute_root="r")
    assert cfg.against == Path("a") and cfg.recompute_root == Path("r")
    with pytest.raises(AttributeError):
        cfg.n_check = 3  # type: ignore[misc]


def test_keywords_and_a_config_run_the_same_checks(small):
    by_keywords = run.verify_dataset(small, n_check=1, sample_mlps=1, sample_seed=2)
    by_config = run.verify_dataset(small, VerifyConfig(n_check=1, sample_mlps=1, sample_seed=2))
    assert [(c.name, c.ok, c.detail) for c in by_keywords.checks] == [(c.name, c.ok, c.detail) for c in by_config.checks]
    assert by_config.ok and by_config.coverage == by_keywords.coverage


def test_a_config_and_keywords_together_are_refused(small):
    with pytest.raises(TypeError, match="not both"):
        run.verify_dataset(small, VerifyConfig(), n_check=1)


def test_the_cli_builds_one_config_and_passes_it(small, monkeypatch):
    seen = []
    real = run.verify_dataset

    def spy(directory, config=None, **kw):
        seen.append(config)
        return real(directory, config, **kw)

    monkeypatch.setattr(run, "verify_dataset", spy)
    from whestbench.cli.app import cli

    result = CliRunner().invoke(cli, ["dataset", "verify", str(small), "--n-check", "1", "--sample-seed", "4"])
    assert result.exit_code == 0, result.output
    assert seen == [VerifyConfig(n_check=1, sample_seed=4)]
