"""``whest dataset push/upload`` and ``pull/download``: flags, output lines, exit codes, token hygiene.

The Hub is the in-memory fake from tests/dataset/test_hub.py (loaded by path: the test folders are
not packages); nothing here touches the network, so the real Hub and HTTP client are not exercised.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import huggingface_hub
import pytest

from whestbench.cli.app import main

_spec = importlib.util.spec_from_file_location(
    "whestbench_test_hub_fake", Path(__file__).parents[1] / "dataset" / "test_hub.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

REPO = "org/ds"
TOKEN = "hf_CliSecretTokenValue0987654321"
no_network = fake.no_network  # autouse: refuse sockets, no stored login


@pytest.fixture
def hub(monkeypatch, tmp_path):
    return fake.FakeHub().install(monkeypatch, tmp_path / "hf-cache")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["dataset", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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
                           fake.base_metadata(n_mlps=1, is_partial=True, mlp_range=[0, 1], total_n_mlps=2))
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
    fake.push_dataset(fake.multi(tmp_path / "src"), REPO, tag="v1")
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
    fake.push_dataset(fake.single(tmp_path / "src"), REPO)
    code, _, err = run(capsys, "pull", REPO, "--split", "holdout", "--output", str(tmp_path / "got"))
    assert code == 1 and "matched no parquet files" in err and "['public']" in err
    assert not (tmp_path / "got").exists()
