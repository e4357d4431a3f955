"""A metadata.json nested deeper than the JSON parser's stack is an InvalidDatasetError naming the file.

Every reader goes through ``dataset.reader.read_metadata_file``: load_dataset raises the error,
and verify, inspect and combine-splits print it as one line (exit 1), never "maximum recursion
depth exceeded" without the file.
"""

from __future__ import annotations

import pytest

import whestbench
from whestbench.cli import main
from whestbench.dataset import create_dataset

DEPTH = 200_000


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep")
    ds = create_dataset(n_mlps=1, n_samples=64, width=4, depth=2, mlp_seeds=[3], output_path=root / "ds")
    (ds / "metadata.json").write_text("[" * DEPTH + "]" * DEPTH)
    other = create_dataset(n_mlps=1, n_samples=64, width=4, depth=2, mlp_seeds=[4], split="holdout",
                           config="holdout", output_path=root / "holdout")
    return ds, other


def test_load_dataset_raises_invalid_dataset_error_naming_the_file(deep):
    ds, _ = deep
    with pytest.raises(whestbench.InvalidDatasetError, match="metadata.json is nested too deeply"):
        whestbench.load_dataset(ds)


@pytest.mark.parametrize("verb", ["verify", "inspect", "combine-splits"])
def test_verbs_print_one_line_naming_the_file(deep, verb, capsys, tmp_path):
    ds, other = deep
    argv = ["dataset", verb, str(ds)]
    if verb == "combine-splits":
        argv += [str(other), "--output", str(tmp_path / "eval")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 1, err
    assert f"{ds / 'metadata.json'} is nested too deeply" in out + err
    assert "recursion" not in out + err and "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err  # verify names the failure in its ✗ line (stdout)
    assert not (tmp_path / "eval").exists()
