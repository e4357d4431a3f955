"""inputs: the output of merge / combine-splits is refused before any work when it is not a new
directory outside every input, and an input path that cannot be a dataset directory is a usage error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from whestbench.assemble.inputs import claim_output
from whestbench.errors import InputPathError
from whestbench.paths import input_dir
from whestbench.errors import UsageError
from whestbench.errors import OutputExistsError


@pytest.fixture
def inputs(tmp_path) -> list[Path]:
    made = [tmp_path / "part-0", tmp_path / "part-1"]
    for d in made:
        (d / "data").mkdir(parents=True)
    return made


@pytest.mark.parametrize(
    "where",
    ["part-0", "part-0/data/x", "part-1/data", "part-0/../part-1/new", "link-to-part-0/new"],
)
def test_an_output_equal_to_or_inside_an_input_is_refused(tmp_path, inputs, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link-to-part-0").symlink_to(inputs[0])
    with pytest.raises(UsageError, match="already exists|is inside the input"):
        claim_output(where, ["part-0", "part-1"])
    assert sorted(p.name for p in (tmp_path / "part-0").iterdir()) == ["data"]


@pytest.mark.parametrize("given", ["", ".", "./", "/", "..", "bad\udcff"])
def test_an_output_that_names_no_new_utf8_directory_is_refused(inputs, given):
    with pytest.raises(UsageError, match="names no new directory|not valid UTF-8"):
        claim_output(given, inputs)


def test_a_dangling_symlink_output_is_refused_as_existing(tmp_path, inputs):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputExistsError, match="dangling|does not exist"):
        claim_output(tmp_path / "dangling", inputs)


def test_a_new_output_beside_the_inputs_is_claimed(tmp_path, inputs):
    assert claim_output(tmp_path / "merged", inputs) == tmp_path / "merged"
    assert not (tmp_path / "merged").exists()  # claimed, not created: the writer stages it


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: "", "an empty path"),
        (lambda tmp: tmp / "absent", "does not exist"),
        (lambda tmp: (tmp / "file").write_text("x") and tmp / "file", "is a file"),
        (lambda tmp: (tmp / "link").symlink_to(tmp / "nowhere") or tmp / "link", "is a symlink to"),
        (lambda tmp: os.fsdecode(os.fsencode(str(tmp)) + b"/bad\xff"), r"bad\\xff is not a valid UTF-8 path"),
    ],
    ids=["empty", "missing", "file", "dangling-symlink", "non-utf8"],
)
def test_an_input_that_cannot_be_a_dataset_directory_is_a_usage_error(tmp_path, make, message):
    with pytest.raises(InputPathError, match=message) as info:
        input_dir(make(tmp_path))
    assert isinstance(info.value, UsageError)
