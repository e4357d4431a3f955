"""The dataset card's title, license and homepage (``--pretty-name``, ``--license``, ``--homepage`` on
bake and push), the repository filled into the pushed card, and ``push --dry-run``."""

from __future__ import annotations

import pytest
import yaml

from helpers.cli import run


def front(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


BAKE = ["dataset", "bake", "--n-mlps", "1", "--n-samples", "200", "--width", "4", "--depth", "2", "--seed", "1",
        "--quiet"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    from whestbench.dataset import create_dataset

    return create_dataset(1, 200, 4, 2, mlp_seeds=[1], output_path=tmp_path_factory.mktemp("p") / "ds")


def test_bake_records_the_card_fields_and_writes_them_into_its_card(tmp_path, capsys):
    out = tmp_path / "ds"
    rc, _, err = run([*BAKE, "--pretty-name", "Demo set", "--license", "mit", "--homepage", "https://example.org/d",
                      "--output", str(out)], capsys)
    assert rc == 0, err
    card = (out / "README.md").read_text()
    assert front(card)["pretty_name"] == "Demo set" and front(card)["license"] == "mit"
    assert front(card)["homepage"] == "https://example.org/d"
    assert "# Demo set" in card and "`mit`" in card and "Creative Commons" not in card


def test_push_dry_run_prints_files_sizes_target_and_card_and_sends_nothing(plain, capsys, monkeypatch):
    import huggingface_hub

    def no_network(*a, **k):
        raise AssertionError("push --dry-run reached the network")

    for name in ("create_repo", "dataset_info", "create_commit", "list_repo_refs", "create_tag"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, no_network)
    rc, out, err = run(["dataset", "push", str(plain), "--repo", "org/demo", "--tag", "v1", "--dry-run",
                        "--pretty-name", "Pushed title", "--license", "apache-2.0"], capsys)
    assert rc == 0, err
    assert "would upload" in out and "hf://org/demo@v1" in out and "nothing is sent" in out
    assert "data/public-00000-of-00001.parquet" in out and "KiB" in out and "README.md" in out
    card = out[out.index("Card (README.md):"):]
    assert "pretty_name: Pushed title" in card and "license: apache-2.0" in card
    assert "org/demo" in card and "<your-repo>" not in card  # the repository filled in


@pytest.mark.parametrize("flag, value", [("--license", "CC BY"), ("--license", "not-a-real-license"), ("--homepage", "ftp://x"),
                                         ("--pretty-name", "two\nlines"), ("--homepage", "https://a b")])
def test_bad_card_values_are_refused_before_any_work(tmp_path, capsys, flag, value):
    rc, out, err = run([*BAKE, flag, value, "--output", str(tmp_path / "o")], capsys)
    assert rc == 2 and f"{flag} must" in err and "Baking" not in out and not (tmp_path / "o").exists()


def test_without_the_flags_the_card_is_neutral(plain):
    from whestbench.format.card import LICENSE, TOOL_URL

    text = (plain / "README.md").read_text()
    data = front(text)
    assert (data["pretty_name"], data["license"], data["homepage"]) == (
        "Ground truth of 1 random ReLU MLP of width 4 and depth 2", LICENSE, TOOL_URL)
    assert "repository" not in data  # a repository only where given (issue 35)
    for name in ("Alignment Research Center", "AIcrowd", "WhestBench organisers", "Challenge"):
        assert name not in text


# --card whestbench-organisers: the organisers' text, chosen explicitly (issue 28)


def _organisers(text: str) -> bool:
    return ("{Alignment Research Center} and {AIcrowd}" in text and "AIcrowd-challenge" in text
            and "credit to the WhestBench organisers" in text and "repository: https://github.com/AIcrowd/whestbench" in text)


def test_bake_with_the_organisers_preset_records_it_and_a_rerun_keeps_it(tmp_path, capsys):
    import json

    out = tmp_path / "ds"
    argv = [*BAKE, "--card", "whestbench-organisers", "--output", str(out)]
    rc, _, err = run(argv, capsys)
    assert rc == 0, err
    md = json.loads((out / "metadata.json").read_text())
    assert md["card"] == {"preset": "whestbench-organisers"} and _organisers((out / "README.md").read_text())
    (out / "README.md").unlink()  # a re-run that rewrites the card writes the preset's again
    rc, stdout, err = run(argv, capsys)
    assert rc == 0 and "card rewritten" in stdout, err
    assert _organisers((out / "README.md").read_text())
    rc, stdout, err = run(["dataset", "push", str(out), "--repo", "org/o", "--dry-run"], capsys)
    assert rc == 0 and _organisers(stdout), err


def test_merge_and_combine_keep_the_organisers_preset(tmp_path, capsys):
    import json

    parts = []
    for k in (0, 1):
        p = tmp_path / f"part{k}"
        rc, _, err = run(["dataset", "bake", "--n-mlps", "2", "--n-samples", "200", "--width", "4", "--depth", "2",
                          "--seed", "1", "--slice", f"{k}/2", "--quiet", "--card", "whestbench-organisers",
                          "--output", str(p)], capsys)
        assert rc == 0, err
        parts.append(str(p))
    rc, _, err = run(["dataset", "merge", *parts, "--output", str(tmp_path / "m")], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "m" / "metadata.json").read_text())["card"] == {"preset": "whestbench-organisers"}
    assert _organisers((tmp_path / "m" / "README.md").read_text())
    hold = tmp_path / "hold"
    rc, _, err = run(["dataset", "bake", "--n-mlps", "1", "--n-samples", "200", "--width", "4", "--depth", "2",
                      "--seed", "2", "--split", "holdout", "--config", "holdout", "--quiet",
                      "--card", "whestbench-organisers", "--output", str(hold)], capsys)
    assert rc == 0, err
    rc, _, err = run(["dataset", "combine-splits", str(tmp_path / "m"), str(hold), "--output", str(tmp_path / "c"),
                      "--skip-prepared-arrow"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "c" / "metadata.json").read_text())["card"] == {"preset": "whestbench-organisers"}
    assert _organisers((tmp_path / "c" / "README.md").read_text())
    # an input without the preset differs: refused, naming the field, unless --card settles it
    neutral = tmp_path / "neutral"
    rc, _, err = run(["dataset", "bake", "--n-mlps", "1", "--n-samples", "200", "--width", "4", "--depth", "2",
                      "--seed", "3", "--split", "holdout", "--config", "holdout", "--quiet", "--output", str(neutral)],
                     capsys)
    assert rc == 0, err
    argv = ["dataset", "combine-splits", str(tmp_path / "m"), str(neutral), "--skip-prepared-arrow",
            "--output", str(tmp_path / "c2")]
    rc, _, err = run(argv, capsys)
    assert rc != 0 and "preset" in err and "whestbench-organisers" in err and "the default" in err
    rc, _, err = run([*argv, "--card", "whestbench-organisers"], capsys)
    assert rc == 0, err
    assert _organisers((tmp_path / "c2" / "README.md").read_text())


@pytest.mark.parametrize("verb", ["bake", "push", "merge"])
@pytest.mark.parametrize("value", ["whestbench-organizers", "organisers", "ARC"])
def test_an_unknown_preset_is_one_line_and_exit_2(plain, tmp_path, capsys, verb, value):
    out = tmp_path / "out"
    argv = {"bake": [*BAKE, "--output", str(out)],
            "push": ["dataset", "push", str(plain), "--repo", "org/x", "--dry-run"],
            "merge": ["dataset", "merge", str(plain), "--output", str(out)]}[verb]
    rc, stdout, err = run([*argv, "--card", value], capsys)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"--card '{value}'" in err and "whestbench-organisers" in err and "no built-in card" in err
    assert not out.exists() and not (tmp_path / "out.whest-work").exists()


# --card FILE: authors, citation, repository and badges (issue 28)

ADA = {"pretty_name": "Ada's set", "homepage": "https://x.org/ada", "authors": ["Ada Lovelace", "C. Babbage"],
       "repository": "https://git.example.org/ada/set",
       "badges": [{"label": "paper-2026", "url": "https://x.org/paper"}]}


def test_push_dry_run_with_a_card_file_credits_its_authors_not_the_organisers(plain, tmp_path, capsys):
    f = tmp_path / "card.yaml"
    f.write_text(yaml.safe_dump(ADA))
    rc, out, err = run(["dataset", "push", str(plain), "--repo", "org/ada", "--dry-run", "--card", str(f)], capsys)
    assert rc == 0, err
    card = out[out.index("Card (README.md):"):]
    assert "author       = {{Ada Lovelace} and {C. Babbage}}" in card
    assert "(https://git.example.org/ada/set)" in card and "repository: https://git.example.org/ada/set" in card
    assert "paper--2026-link" in card and "(https://x.org/paper)" in card and "pretty_name: Ada's set" in card
    assert "Alignment Research Center" not in card and "AIcrowd-challenge" not in card


def test_bake_records_a_json_card_file_and_the_flags_override_it(tmp_path, capsys):
    import json

    f = tmp_path / "card.json"
    f.write_text(json.dumps({**ADA, "citation": "@misc{ada26,\n  title = {Ada's set},\n}"}))
    out = tmp_path / "ds"
    rc, _, err = run([*BAKE, "--card", str(f), "--pretty-name", "Flag title", "--output", str(out)], capsys)
    assert rc == 0, err
    md = json.loads((out / "metadata.json").read_text())
    assert md["card"]["authors"] == ["Ada Lovelace", "C. Babbage"] and md["card"]["pretty_name"] == "Flag title"
    card = (out / "README.md").read_text()
    assert "@misc{ada26,\n  title = {Ada's set},\n}" in card and "# Flag title" in card
    assert "Alignment Research Center" not in card


@pytest.mark.parametrize("content, words", [
    ("pretty_name: x\nauthor: [Ada]\n", "unknown field 'author'"),
    ("authors: Ada\n", "authors must be a list"),
    ("repository: javascript:alert(1)\n", "repository must be an http(s) URL"),
    ("homepage: ftp://x.org\n", "homepage must be an http(s) URL"),
    ("authors: [\"Ada\\u202e evil\"]\n", "authors must be"),
    ("citation: \"@misc{x,\\u0007}\"\n", "citation must be"),
    ("badges: [{label: x, url: 'file:///etc/passwd'}]\n", "badges must be"),
    ("- just\n- a list\n", "must hold a mapping"),
    ("pretty_name: [unclosed\n", "is not UTF-8 YAML or JSON"),
])
@pytest.mark.parametrize("verb", ["bake", "push", "combine-splits"])
def test_a_bad_card_file_is_refused_with_one_line_before_any_work(plain, tmp_path, capsys, content, words, verb):
    f = tmp_path / "card.yaml"
    f.write_text(content)
    out = tmp_path / "out"
    argv = {"bake": [*BAKE, "--output", str(out)],
            "push": ["dataset", "push", str(plain), "--repo", "org/x", "--dry-run"],
            "combine-splits": ["dataset", "combine-splits", str(plain), str(plain), "--output", str(out)]}[verb]
    rc, _, err = run([*argv, "--card", str(f)], capsys)
    assert rc == 2, err
    assert words in err and "--card" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "out.whest-work").exists()


def test_a_card_file_that_is_missing_or_a_directory_is_refused(tmp_path, capsys):
    for path, words in ((tmp_path / "nope.yaml", "cannot open it"), (tmp_path, "not a regular file")):
        rc, _, err = run([*BAKE, "--output", str(tmp_path / "o"), "--card", str(path)], capsys)
        assert rc == 2 and words in err, err


@pytest.mark.parametrize("key, value", [
    ("card", {"pretty_name": "x\n<script>alert(1)</script>"}),
    ("card", {"homepage": "javascript:alert(1)"}),
    ("card", {"license": "x y"}),
    ("bake_command", "rm -rf ~; whest dataset bake --n-mlps 1 --output ds"),
])
def test_a_forged_card_block_or_bake_command_fails_verify_and_push_refuses_it(plain, tmp_path, capsys, monkeypatch,
                                                                               key, value):
    """metadata.json's card block and bake_command are published (the card's title, homepage,
    license and re-bake recipe) but are not part of the checksummed numbers: the metadata validator
    judges them, so verify's ``metadata`` check fails and push refuses before the network."""
    import json
    import shutil

    import huggingface_hub

    for name in ("create_repo", "dataset_info", "create_commit", "list_repo_refs", "create_tag"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, lambda *a, **k: pytest.fail("push reached the network"))
    d = tmp_path / "ds"
    shutil.copytree(plain, d)
    md = json.loads((d / "metadata.json").read_text())
    md[key] = value
    (d / "metadata.json").write_text(json.dumps(md))
    rc, out, err = run(["dataset", "verify", str(d)], capsys)
    assert rc != 0 and f"{key}" in out + err, out + err
    rc, out, err = run(["dataset", "push", str(d), "--repo", "org/demo", "--dry-run"], capsys)
    assert rc == 1 and key in err and "Traceback" not in err, err  # a corrupt dataset: exit 1, as for every other


def test_a_rerun_with_other_card_fields_updates_the_card_and_keeps_the_numbers(tmp_path, capsys):
    """The card is no part of the numbers: a finished bake re-run with another title or license
    records them and rewrites README.md (it said "nothing to do" and kept the old card)."""
    import hashlib
    import json

    out = tmp_path / "ds"
    rc, _, err = run([*BAKE, "--pretty-name", "Old title", "--output", str(out)], capsys)
    assert rc == 0, err

    def data_digest():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "data").iterdir())}

    before = data_digest()
    checksums = json.loads((out / "metadata.json").read_text())["checksums"]
    rc, printed, err = run([*BAKE, "--pretty-name", "New title", "--license", "mit", "--output", str(out)], capsys)
    assert rc == 0, err
    assert "already complete and verified" in printed
    assert "card updated: pretty_name 'Old title' → 'New title'" in printed
    assert "card updated: license the default → 'mit'" in printed
    card = (out / "README.md").read_text()
    assert front(card)["pretty_name"] == "New title" and front(card)["license"] == "mit" and "# New title" in card
    md = json.loads((out / "metadata.json").read_text())
    assert md["card"] == {"pretty_name": "New title", "license": "mit"} and md["checksums"] == checksums
    assert data_digest() == before  # the numbers are untouched
    assert run(["dataset", "verify", str(out)], capsys)[0] == 0
    rc, printed, err = run([*BAKE, "--output", str(out)], capsys)  # no card flags: the card stays as it is
    assert rc == 0 and "card updated" not in printed, err
    assert json.loads((out / "metadata.json").read_text())["card"] == md["card"]
