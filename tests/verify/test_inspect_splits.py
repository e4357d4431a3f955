"""``inspect`` on a dataset made by ``combine-splits``: each split's sampler and seed source (each
split recorded them), and how plain ``datasets.load_dataset`` gets each split of a multi-config dataset."""

from __future__ import annotations

import pytest

from whestbench.dataset import create_dataset
from whestbench.assemble.combine import combine_split_datasets
from whestbench.verify.inspect import describe

SHAPE = dict(n_samples=2000, width=8, depth=2)  # big enough for the inputs check merge and combine make (verify)


@pytest.fixture(scope="module")
def combined(tmp_path_factory):
    root = tmp_path_factory.mktemp("c")
    pub = create_dataset(2, seed=3, output_path=root / "pub", **SHAPE)
    ho = create_dataset(2, mlp_seeds=[8, 9], split="holdout", config="holdout", output_path=root / "ho", **SHAPE)
    return combine_split_datasets([pub, ho], output_dir=root / "ev", write_prepared_arrow=False)


def test_inspect_shows_each_splits_sampler_and_seed_source(combined):
    text = "\n".join(describe(combined))
    assert "not recorded" not in text and "inferred" not in text
    assert "sampler: holdout: pcg64 (version 1" in text and "public: pcg64" in text
    assert "holdout: explicit list (--mlp-seeds" in text and "public: derived from root seed 3" in text


def test_inspect_prints_the_plain_datasets_call_of_each_split(combined):
    lines = describe(combined)
    assert "    holdout: datasets.load_dataset(DIR, 'holdout', split='holdout')" in lines
    assert "    public: datasets.load_dataset(DIR, 'default', split='public')" in lines


def test_the_printed_calls_load_each_split(combined):
    import datasets

    assert len(datasets.load_dataset(str(combined), "holdout", split="holdout")) == 2
    assert len(datasets.load_dataset(str(combined), "default", split="public")) == 2


def test_a_single_split_dataset_prints_no_load_lines(combined):
    text = "\n".join(describe(combined.parent / "pub"))
    assert "datasets.load_dataset(DIR" not in text
