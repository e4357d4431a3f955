"""The Python API refuses what the CLI refuses, in one line (issue 34): push's, pull's and load's arguments of
the wrong type raised TypeError/AttributeError from deep inside (``quote_from_bytes() expected bytes``,
``'int' object has no attribute 'startswith'``); empty paths read as the current directory; a token file
was read without limit (``--token-file /dev/zero``). Nothing here reaches the network."""

from __future__ import annotations

import io
import sys

import pytest

from whestbench.errors import UsageError

from helpers.cli import run
from helpers.hub_fake import no_network  # noqa: F401  (autouse: any connection fails the test)


@pytest.mark.parametrize("kwargs, words", [
    ({"tag": 5}, "--tag 5 is not a valid git tag name"),
    ({"message": 5}, "--message must be a commit message"),
    ({"message": "clear\x1b[2J"}, "--message must be a commit message"),
    ({"message": "token hf_abcdefghijklmnopq"}, "--message holds what looks like a credential"),
    ({"private": "yes"}, "--private must be True or False"),
    ({"exist_ok": None}, "exist_ok must be True or False"),
    ({"max_commit_bytes": -1}, "max_commit_bytes must be a positive integer"),
    ({"max_commit_files": 1.5}, "max_commit_files must be a positive integer"),
])
def test_push_config_refuses_each_bad_argument_in_one_line(kwargs, words):
    from whestbench.hub.push import PushConfig

    with pytest.raises(UsageError, match=words.replace("[", r"\[")):
        PushConfig("org/name", **kwargs)
    assert PushConfig("org/name", message="line one\n\nline two").message == "line one\n\nline two"


@pytest.mark.parametrize("call, words", [
    (lambda: __import__("whestbench.hub.push", fromlist=["x"]).PushConfig(5), "named by a string ORG/NAME"),
    (lambda: __import__("whestbench.hub.pull", fromlist=["x"]).pull_dataset("org/name", revision=5),
     "a revision is a branch, tag or commit name"),
    (lambda: __import__("whestbench.hub.pull", fromlist=["x"]).pull_dataset(5), "named by a string ORG/NAME"),
    (lambda: __import__("whestbench.hub.pull", fromlist=["x"]).pull_dataset("org/name", token="hf_a\nb"),
     "the Hub token must be one word"),
    (lambda: __import__("whestbench").load_dataset("org/name", revision=5), "a revision is a branch"),
    (lambda: __import__("whestbench").load_dataset("org/name", token=[]), "the Hub token must be one word"),
    (lambda: __import__("whestbench").load_dataset(""), "an empty path names no dataset directory"),
    (lambda: __import__("whestbench.verify.run", fromlist=["x"]).verify_dataset(""), "DIR is an empty path"),
])
def test_pull_load_and_verify_refuse_bad_arguments_before_any_work(call, words):
    with pytest.raises(UsageError, match=words) as got:
        call()
    assert "\n" not in str(got.value)


def test_a_push_token_of_another_type_is_refused_without_showing_it(tmp_path):
    from whestbench.hub.push import push_dataset

    with pytest.raises(UsageError, match="the Hub token must be one word of printable characters .got int."):
        push_dataset(tmp_path, "org/name", token=12345678901234)


@pytest.mark.parametrize("source", ["/dev/zero", "stdin", "spaces"])
def test_a_token_file_is_read_through_a_cap_and_checked(tmp_path, capsys, monkeypatch, source):
    """``--token-file /dev/zero`` read without limit."""
    args = ["--token-file", "/dev/zero"]
    if source == "stdin":
        monkeypatch.setattr(sys, "stdin", io.StringIO("hf_" + "a" * 200_000))
        args = ["--token-file", "-"]
    elif source == "spaces":
        (tmp_path / "tok").write_text("hf_abc def\n")
        args = ["--token-file", str(tmp_path / "tok")]
    rc, out, err = run(["dataset", "pull", "org/name", *args], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert ("more than any token file holds (64.0 KiB at most)" in err if source != "spaces"
            else "the Hub token must be one word" in err and "hf_abc" not in err)


def test_merge_with_no_output_is_a_usage_error(tmp_path):
    from whestbench import merge_datasets

    with pytest.raises(UsageError, match="--output must be a path .a str or os.PathLike.; got NoneType"):
        merge_datasets([tmp_path], output_dir=None)
