"""``whest dataset push/upload`` and ``pull/download``: flags, output lines, exit codes, token hygiene.

The Hub is the in-memory fake of tests/helpers/hub_fake.py; nothing here touches the network, so the real
Hub and HTTP client are not exercised.
"""

from __future__ import annotations

import io
import json
import os
import sys

import huggingface_hub
import pytest

from whestbench.hub.push import push_dataset

from helpers.cli import dataset as run  # run(capsys, VERB, ...): `whest dataset VERB ...`
from helpers.datasets import base_metadata
import helpers.hub_fake as fake
from helpers.hub_fake import clock, no_network  # noqa: F401  (autouse fixtures)


REPO = "org/ds"
TOKEN = "hf_CliSecretTokenValue0987654321"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    return fake.FakeHub().install(monkeypatch, tmp_path / "hf-cache")


@pytest.mark.parametrize("verb", ["push", "upload", "pull", "download"])
def test_help_exits_0(capsys, verb):
    code, out, _ = run(capsys, verb, "--help")
    assert code == 0 and "--token" in out


def test_upload_is_push_and_prints_where_the_dataset_went(tmp_path, capsys, hub):
    ds = fake.single(tmp_path / "ds", n_shards=2)
    code, out, err = run(capsys, "upload", str(ds), "--repo", REPO, "--tag", "v1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Uploading {ds} → hf://{REPO}@v1"
    assert lines[1].startswith("Total: ") and lines[1].endswith("(4 files) — will create repo if needed.")
    assert f"✓ Uploaded {ds} → hf://{REPO}@v1" in lines
    assert f"Commit: {hub.head(REPO)}" in lines
    assert lines[-1] == f"Visible at: https://huggingface.co/datasets/{REPO}/tree/v1"
    assert hub.repos[REPO]["tags"] == {"v1": hub.head(REPO)}


def test_push_again_says_it_is_up_to_date(tmp_path, capsys, hub):
    ds = fake.single(tmp_path / "ds")
    run(capsys, "push", str(ds), "--repo", REPO)
    code, out, _ = run(capsys, "push", str(ds), "--repo", REPO)
    assert code == 0
    assert "✓ Already up to date" in out and "1 commit" not in out


def test_push_of_a_partial_exits_1_with_one_line_saying_merge_first(tmp_path, capsys, hub):
    ds = fake.make_dataset(tmp_path / "part", {"data/public-00000-of-00001.parquet": b"x"},
                           base_metadata(n_mlps=1, is_partial=True, mlp_range=[0, 1], total_n_mlps=2))
    code, out, err = run(capsys, "push", str(ds), "--repo", REPO)
    assert code == 1
    assert err.startswith("error: ") and err.count("\n") == 1 and "whest dataset merge" in err
    assert hub.calls == []


@pytest.mark.parametrize("args", [["push", "{ds}", "--repo", "no-org"], ["pull", "a/b/c"],
                                  ["pull", REPO, "--split", "Hold-Out"], ["push", "{ds}"]])
def test_bad_arguments_exit_2_before_any_hub_call(tmp_path, capsys, hub, args):
    ds = fake.single(tmp_path / "ds")
    code, _, err = run(capsys, *[a.format(ds=ds) for a in args])
    assert code == 2 and err.startswith("error: ")
    assert hub.calls == []


def test_a_hub_failure_exits_1_with_one_line_and_no_token(tmp_path, capsys, hub, monkeypatch):
    def unauthorized(api, *a, **k):
        raise fake.http_error(huggingface_hub.errors.HfHubHTTPError, 401, f"401 Unauthorized: bad token {TOKEN}")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", unauthorized)
    code, out, err = run(capsys, "push", str(fake.single(tmp_path / "ds")), "--repo", REPO, "--token", TOKEN)
    assert code == 1
    assert err.count("\n") == 1 and "hf auth login" in err and "Traceback" not in err
    assert TOKEN not in out + err


def test_the_token_is_never_printed_or_written(tmp_path, capsys, hub):
    ds = fake.single(tmp_path / "ds")
    code1, out1, err1 = run(capsys, "push", str(ds), "--repo", REPO, "--token", TOKEN, "--private")
    code2, out2, err2 = run(capsys, "download", REPO, "--output", str(tmp_path / "got"), "--token", TOKEN)
    assert (code1, code2) == (0, 0)
    assert TOKEN not in out1 + err1 + out2 + err2
    assert all(kw["token"] == TOKEN for _, kw in hub.calls)
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert TOKEN.encode() not in p.read_bytes(), p
    assert "token" not in json.loads(hub.files(REPO)["metadata.json"])


def test_download_is_pull_and_prints_preflight_checksums_and_location(tmp_path, capsys, hub):
    push_dataset(fake.multi(tmp_path / "src"), REPO, tag="v1")
    out_dir = tmp_path / "got"
    code, out, err = run(capsys, "download", f"{REPO}", "--revision", "v1", "--split", "public",
                         "--output", str(out_dir))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Preflight: 6 files, ")
    assert lines[1].startswith(f"Downloaded split 'public' of hf://{REPO}@v1 (6 files, ")
    assert "Checksums: 1 data file verified." in lines
    assert lines[-1] == f"Location: {out_dir}"
    assert sorted(p.name for p in (out_dir / "data").iterdir()) == ["public-00000-of-00001.parquet"]


def test_pull_into_an_existing_output_exits_2_before_any_call(tmp_path, capsys, hub):
    (tmp_path / "got").mkdir()
    code, _, err = run(capsys, "pull", REPO, "--output", str(tmp_path / "got"))
    assert code == 2 and "already exists" in err
    assert hub.calls == []


def test_pull_of_a_split_that_matches_nothing_exits_1(tmp_path, capsys, hub):
    push_dataset(fake.single(tmp_path / "src"), REPO)
    code, _, err = run(capsys, "pull", REPO, "--split", "holdout", "--output", str(tmp_path / "got"))
    assert code == 1 and "matched no parquet files" in err and "['public']" in err
    assert not (tmp_path / "got").exists()


# --------------------------------------------------------------------------------------------------
# the token: HF_TOKEN is the safe way; a file or standard input keeps it out of `ps`


@pytest.mark.parametrize("verb", ["push", "pull"])
def test_help_names_hf_token_as_the_safe_way_and_offers_a_token_file(capsys, verb):
    code, out, _ = run(capsys, verb, "--help")
    text = " ".join(out.split())
    assert code == 0 and "--token-file" in text and "HF_TOKEN (the safe way)" in text and "`ps`" in text


def test_the_token_can_come_from_a_file(tmp_path, capsys, hub):
    (tmp_path / "tok").write_text(TOKEN + "\n")
    code, out, err = run(capsys, "push", str(fake.single(tmp_path / "ds")), "--repo", REPO,
                         "--token-file", str(tmp_path / "tok"))
    assert code == 0, err
    assert hub.calls and all(kw["token"] == TOKEN for _, kw in hub.calls)
    assert TOKEN not in out + err


def test_the_token_can_come_from_standard_input(tmp_path, capsys, hub, monkeypatch):
    push_dataset(fake.single(tmp_path / "src"), REPO)
    hub.calls.clear()
    monkeypatch.setattr(sys, "stdin", io.StringIO(TOKEN + "\n"))
    code, out, err = run(capsys, "pull", REPO, "--output", str(tmp_path / "got"), "--token-file", "-")
    assert code == 0, err
    assert hub.calls and all(kw["token"] == TOKEN for _, kw in hub.calls)


@pytest.mark.parametrize("case", ["both", "empty", "missing"])
def test_a_bad_token_file_exits_2_before_any_hub_call(tmp_path, capsys, hub, case):
    (tmp_path / "empty").write_text("\n")
    args = {"both": ["--token", TOKEN, "--token-file", str(tmp_path / "empty")],
            "empty": ["--token-file", str(tmp_path / "empty")],
            "missing": ["--token-file", str(tmp_path / "nope")]}[case]
    code, _, err = run(capsys, "pull", REPO, *args)
    assert code == 2 and err.startswith(("error: --token", "error: give the token once"))
    assert err.count("\n") == 1 and hub.calls == []


# --------------------------------------------------------------------------------------------------
# the Hub unreachable, and debugging output


def test_pull_offline_says_the_wait_up_front_then_names_the_network_and_exits_1(tmp_path, capsys, hub, clock):
    hub.offline = True
    code, out, err = run(capsys, "pull", REPO, "--output", str(tmp_path / "got"))
    lines = err.splitlines()
    assert code == 1 and len(lines) == 2
    assert lines[0].startswith("note: Hub unreachable (") and "retrying for up to 20 s" in lines[0]
    assert lines[1].startswith(f"error: pulling hf://{REPO}@main: could not reach the Hugging Face Hub at ")
    assert "The network is the problem" in lines[1] and "huggingface-cli" not in err
    assert sum(clock.sleeps) == pytest.approx(20)


def test_debug_traceback_is_scrubbed_of_a_token_the_server_echoed(tmp_path, capsys, hub, monkeypatch):
    def echo(api, *a, **k):
        raise fake.http_error(huggingface_hub.errors.HfHubHTTPError, 401, f"401 bad token {TOKEN} \x1b[2J")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", echo)
    monkeypatch.setenv("WHEST_DEBUG", "1")
    code, out, err = run(capsys, "push", str(fake.single(tmp_path / "ds")), "--repo", REPO, "--token", TOKEN)
    assert code == 1
    # the client's own exception is no longer chained (issue 21: it may carry the token, in its text
    # or its request's headers); the traceback shows the scrubbed HubError that replaced it
    assert "Traceback" in err and "HubError" in err and "HfHubHTTPError" not in err
    assert TOKEN not in out + err and "\x1b" not in err
    assert err.splitlines()[-1].startswith("error: pushing to ")


def test_debug_traceback_of_a_usage_error_keeps_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WHEST_DEBUG", "1")
    code, _, err = run(capsys, "pull", "a/b/c")
    assert code == 2 and "Traceback" in err and err.splitlines()[-1].startswith("error: ")


def test_push_of_a_symlinked_data_directory_exits_1_before_any_hub_call(tmp_path, capsys, hub):
    ds = fake.single(tmp_path / "ds")
    os.rename(ds / "data", tmp_path / "real-data")
    (ds / "data").symlink_to(tmp_path / "real-data", target_is_directory=True)
    code, out, err = run(capsys, "push", str(ds), "--repo", REPO)
    assert code == 1 and err.count("\n") == 1 and "symlink" in err
    assert hub.calls == [] and out == ""


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "blank", "binary", "empty-stdin", "both"])
def test_push_dry_run_checks_the_token_as_the_push_does(tmp_path, capsys, hub, monkeypatch, case):
    """push --dry-run exited 0 for every token-file the real push refuses with exit 2."""
    ds = fake.single(tmp_path / "ds")
    (tmp_path / "empty").write_text("")
    (tmp_path / "blank").write_text("  \n\t\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00hf")
    (tmp_path / "dir").mkdir()
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    args = {"missing": ["--token-file", str(tmp_path / "nope")], "directory": ["--token-file", str(tmp_path / "dir")],
            "empty": ["--token-file", str(tmp_path / "empty")], "blank": ["--token-file", str(tmp_path / "blank")],
            "binary": ["--token-file", str(tmp_path / "binary")], "empty-stdin": ["--token-file", "-"],
            "both": ["--token", TOKEN, "--token-file", str(tmp_path / "blank")]}[case]
    for dry in (["--dry-run"], []):
        code, out, err = run(capsys, "push", str(ds), "--repo", REPO, *dry, *args)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (dry, err)
        assert "Dry run" not in out
    assert hub.calls == []


# --- push --dry-run: the token and the summary (issue 35) ---------------------------------------------


@pytest.fixture
def no_login(monkeypatch, tmp_path):
    """No token anywhere: no HF_TOKEN, no OIDC, no stored login."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    return tmp_path / "no-login" / "token"


@pytest.mark.parametrize("source", ["none", "HF_TOKEN", "stored", "--token", "--token-file", "stdin"])
def test_push_dry_run_says_whether_a_token_was_found_and_never_shows_it(tmp_path, capsys, hub, monkeypatch, no_login,
                                                                         source):
    """A dry run said nothing about a missing token: the push then failed at its first Hub call."""
    ds = fake.single(tmp_path / "ds")
    args: list[str] = []
    if source == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", TOKEN)
    elif source == "stored":
        no_login.parent.mkdir()
        no_login.write_text(TOKEN + "\n")
    elif source == "--token":
        args = ["--token", TOKEN]
    elif source == "--token-file":
        (tmp_path / "tok").write_text(TOKEN + "\n")
        args = ["--token-file", str(tmp_path / "tok")]
    elif source == "stdin":
        monkeypatch.setattr(sys, "stdin", io.StringIO(TOKEN + "\n"))
        args = ["--token-file", "-"]
    code, out, err = run(capsys, "push", str(ds), "--repo", REPO, "--dry-run", *args)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("Token: ")]
    want = {"none": None, "HF_TOKEN": "HF_TOKEN", "stored": f"the login `hf auth login` stored ({no_login})",
            "--token": "--token", "--token-file": "--token-file", "stdin": "--token-file"}[source]
    if want is None:
        assert line == ("Token: none found, and a push needs one: set HF_TOKEN, run `hf auth login`, or pass "
                        "--token-file.")
    else:
        assert line == f"Token: found ({want}; not shown)."
    for secret in (TOKEN, TOKEN[:6], TOKEN[-6:]):
        assert secret not in out + err
    assert not any(c.isdigit() for c in line.replace(str(no_login), ""))  # no length, no part of it
    assert hub.calls == []


def test_push_dry_run_ends_with_its_summary_after_the_card(tmp_path, capsys, hub, no_login):
    """The file summary sat above ~220 lines of card, out of sight; it is now the last thing printed."""
    ds = fake.single(tmp_path / "ds", n_shards=2)
    code, out, err = run(capsys, "push", str(ds), "--repo", REPO, "--tag", "v1", "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    card, files = lines.index("Card (README.md):"), next(i for i, x in enumerate(lines) if x.startswith("Files ("))
    assert 0 < card < files
    assert lines[card + 1] == "---"  # the card's front matter follows its heading
    listed = [x.split()[-1] for x in lines[files + 1:] if x.startswith("  ")]
    assert "data/public-00000-of-00002.parquet" in listed and "metadata.json" in listed and "README.md" in listed
    assert lines[-2].startswith("Token: ")
    assert lines[-1] == (f"Dry run done: {len(listed)} files, {lines[files].split(', ', 1)[1].rstrip('):')} would go "
                         f"to hf://{REPO}@v1 (tag v1); nothing was sent.")
