"""One card validation, two callers (issue 34): the Python API (``plan_push``/``PushConfig``,
``BakeConfig``, ``merge_datasets``, ``combine_split_datasets``) refuses the cards the CLI's card flags
refuse, takes a preset's name as ``--card`` does, and a card never carries a credential: a homepage
``https://user:pw@host/`` was written into README.md and metadata.json and uploaded by push while
``push --dry-run`` showed it scrubbed."""

from __future__ import annotations

import json
import re

import pytest

from whestbench.errors import InvalidDatasetError, UsageError

from helpers.cli import run
from helpers.datasets import resign


BAD = [
    ({"homepage": "javascript:alert(1)"}, "homepage must be an http(s) URL"),
    ({"license": "bogus"}, "license must be a Hugging Face Hub license id"),
    ({"pretty_name": "two\nlines"}, "pretty_name must be one line"),
    ({"pretty_name": "red \x1b[31m title"}, "pretty_name must be one line"),
    ({"pretty_name": "evil\u202etxt.exe"}, "pretty_name must be one line"),
    ({"homepage": "https://user:pw@example.org/"}, "homepage holds what looks like a credential"),
    ({"homepage": "https://hf_abcdefghijkl@example.org/"}, "homepage holds what looks like a credential"),
    ({"repository": "https://example.org/r?token=abcdefgh1234"}, "repository holds what looks like a credential"),
    ({"badges": [{"label": "x", "url": "https://u:p@example.org/b"}]}, "badges holds what looks like a credential"),
    ({"authors": ["Ada hf_abcdefghijklmnop"]}, "authors holds what looks like a credential"),
    ({"color": "red"}, "unknown field 'color'"),
    ("whestbench-organizers", "no such card file, and no built-in card of that name"),
    (42, "card must be a mapping of card fields"),
    (["pretty_name"], "card must be a mapping of card fields"),
]


@pytest.fixture
def plain(tiny):
    return tiny["public"]


@pytest.mark.parametrize("card, words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_the_python_api_refuses_the_cards_the_cli_refuses(plain, tmp_path, card, words):
    from whestbench import combine_split_datasets, merge_datasets
    from whestbench.bake.plan import BakeConfig
    from whestbench.hub.push import PushConfig, plan_push

    calls = {
        "plan_push": lambda: plan_push(plain, "org/name", card=card),
        "PushConfig": lambda: PushConfig("org/name", card=card),
        "BakeConfig": lambda: BakeConfig(n_mlps=1, n_samples=10, width=4, depth=2, card=card, output=tmp_path / "b"),
        "merge_datasets": lambda: merge_datasets([plain], output_dir=tmp_path / "m", card=card),
        "combine_split_datasets": lambda: combine_split_datasets([plain], output_dir=tmp_path / "c", card=card),
    }
    for name, call in calls.items():
        with pytest.raises(UsageError, match=re.escape(words)) as got:
            call()
        assert "\n" not in str(got.value), name
        assert got.value.fix and str(got.value).endswith(got.value.fix), f"{name}: the advice is a field"
    assert not any((tmp_path / d).exists() for d in ("b", "m", "c"))


def test_a_preset_named_as_a_string_is_the_preset_as_on_the_command_line(plain):
    """``card="whestbench-organisers"`` raised TypeError."""
    from whestbench.hub.push import PushConfig, plan_push

    assert PushConfig("org/name", card="whestbench-organisers").card == {"preset": "whestbench-organisers"}
    text = plan_push(plain, "org/name", card="whestbench-organisers").card.content.decode()
    assert "WhestBench 2026: ARC White-Box Estimation Challenge" in text
    assert PushConfig("org/name", card={"pretty_name": "T", "license": None}).card == {"pretty_name": "T"}


@pytest.mark.parametrize("verb", ["bake", "merge", "push"])
def test_a_homepage_with_credentials_is_refused_by_the_cli_before_any_work(plain, tmp_path, capsys, verb):
    argv = {"bake": ["dataset", "bake", "--n-mlps", "1", "--n-samples", "200", "--width", "4", "--depth", "2",
                     "--seed", "1", "--output", str(tmp_path / "out")],
            "merge": ["dataset", "merge", str(plain), "--output", str(tmp_path / "out")],
            "push": ["dataset", "push", str(plain), "--repo", "org/name", "--dry-run"]}[verb]
    rc, out, err = run([*argv, "--homepage", "https://alice:s3cretpw@example.org/"], capsys)
    assert rc == 2 and err.startswith("error: --homepage holds what looks like a credential"), err
    assert "s3cretpw" not in out + err and not (tmp_path / "out").exists()


def test_a_hand_edited_card_with_credentials_fails_validation_and_push(plain, tmp_path):
    import shutil

    from whestbench.format.schema import validate_metadata
    from whestbench.hub.push import plan_push

    ds = tmp_path / "ds"
    shutil.copytree(plain, ds)
    md = json.loads((ds / "metadata.json").read_text())
    md["card"] = {"homepage": "https://alice:s3cretpw@example.org/"}
    with pytest.raises(InvalidDatasetError, match="homepage holds what looks like a credential"):
        validate_metadata(md)
    # a 0.16 pretty_name is no card field and is not checked by them: the rendered card is
    md.pop("card")
    md["pretty_name"] = "Set hf_abcdefghijklmnopq"
    resign(ds, md)
    with pytest.raises(InvalidDatasetError, match="holds what looks like a credential"):
        plan_push(ds, "org/name")
