"""The dataset card's title, license and homepage (``--pretty-name``, ``--license``, ``--homepage`` on
bake and push), the repository filled into the pushed card, and ``push --dry-run``."""

from __future__ import annotations

import pytest
import yaml



from cli_run import run  # noqa: E402  (the in-process CLI runner every verb's tests share)


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


@pytest.mark.parametrize("flag, value", [("--license", "CC BY"), ("--homepage", "ftp://x"),
                                         ("--pretty-name", "two\nlines"), ("--homepage", "https://a b")])
def test_bad_card_values_are_refused_before_any_work(tmp_path, capsys, flag, value):
    rc, out, err = run([*BAKE, flag, value, "--output", str(tmp_path / "o")], capsys)
    assert rc == 2 and f"{flag} must" in err and "Baking" not in out and not (tmp_path / "o").exists()


def test_without_the_flags_the_card_is_todays(plain):
    from whestbench.format.card import DEFAULT_PRETTY_NAME, HOMEPAGE, LICENSE

    data = front((plain / "README.md").read_text())
    assert (data["pretty_name"], data["license"], data["homepage"]) == (DEFAULT_PRETTY_NAME, LICENSE, HOMEPAGE)
