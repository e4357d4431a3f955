"""The dataset card: front matter identical to whestbench 0.16's, and a body that states the key facts."""

from __future__ import annotations

import re

import copy
import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from whestbench.format.card import (
    DEFAULT_PRETTY_NAME,
    card_size_category,
    configs_block,
    rebake_argv,
    render_card,
    split_configs,
)

from helpers.datasets import base_metadata

COLUMNS = [
    "mlp_id",
    "mlp_name",
    "mlp_seed",
    "weights",
    "all_layer_means",
    "final_means",
    "avg_variance",
    "sampling_budget_breakdown",
]


def fixture_md(path: Path) -> dict:
    return json.loads((path / "metadata.json").read_text())


def split_card(text: str) -> tuple[str, str]:
    """(front matter YAML text, body) of a card."""
    assert text.startswith("---\n")
    head, sep, body = text[4:].partition("\n---\n\n")
    assert sep, "front matter must end with '---' and a blank line"
    return head + "\n", body


def front(text: str) -> dict:
    return yaml.safe_load(split_card(text)[0])


def single_md(**overrides) -> dict:
    return base_metadata(**{"n_mlps": 5, "n_samples": 1_000_000, "width": 32, "depth": 3,
                            "hardware": {"cpu_brand": "Test CPU 9000", "machine": "x86_64"}, **overrides})


def multi_md(splits: dict, **extra) -> dict:
    md = {
        "schema_version": "3.0",
        "format": "hf-datasets-parquet",
        "backend": "flopscope",
        "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
        "n_samples": 100,
        "width": 8,
        "depth": 2,
        "created_at_utc": "2026-01-01T00:00:00+00:00",
        "hardware": {},
        "splits": {},
    }
    for name, config in splits.items():
        entry = {"n_mlps": 2, "created_at_utc": "2026-01-01T00:00:00+00:00"}
        if config is not None:
            entry["config"] = config
        md["splits"][name] = entry
    md.update(extra)
    return md


def names(configs: list[dict]) -> list[tuple[str, list[str]]]:
    return [(c["config_name"], [f["split"] for f in c["data_files"]]) for c in configs]


# --- size categories ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, category",
    [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (9999, "1K<n<10K"), (10000, "10K<n<100K"),
     (99999, "10K<n<100K"), (100000, "100K<n<1M"), (10**7, "100K<n<1M")],
)
def test_card_size_category_buckets(n, category):
    assert card_size_category(n) == category


# --- front matter: identical to the cards whestbench 0.16.2 wrote ----------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "golden/full-w64-d4",  # single split, default config: no configs block
        "golden/full-w256-d8",
        "golden/holdout-w64-d4",  # single split, non-default config
        "golden/merged-w64-d4",
        "golden/part-0-of-3",
        "golden/combined-w64-d4",  # multi-split, two distinct configs, default_split
        "multi_config_v3.0",
        "single_split_v3_protocol",  # no split/config keys at all
    ],
)
def test_front_matter_text_equals_the_reference_card(dataset16, name):
    """The organisers' preset writes the front matter 0.16.2 wrote for their datasets, byte for byte;
    the neutral default changes the title and homepage values and names no repository (issue 35: it named
    the package's PyPI page), keeping every other key."""
    md = fixture_md(dataset16(name))
    ours, _ = split_card(render_card(md, preset="whestbench-organisers"))
    reference, _ = split_card((dataset16(name) / "README.md").read_text())
    assert ours == reference
    recorded, _ = split_card(render_card({**md, "card": {"preset": "whestbench-organisers"}}))
    assert recorded == reference
    neutral, want = yaml.safe_load(split_card(render_card(md))[0]), yaml.safe_load(reference)
    assert sorted(neutral) == sorted(k for k in want if k != "repository")
    assert {k: v for k, v in neutral.items() if k not in ("pretty_name", "homepage", "repository")} == \
        {k: v for k, v in want.items() if k not in ("pretty_name", "homepage", "repository")}


def test_front_matter_keys_and_values_for_a_single_default_split():
    data = front(render_card(single_md(card={"preset": "whestbench-organisers"})))
    assert sorted(data) == [
        "homepage", "language", "license", "pretty_name", "repository", "size_categories", "tags",
        "task_categories",
    ]
    assert data["homepage"] == "https://www.aicrowd.com/challenges/arc-white-box-estimation-challenge-2026"
    assert data["repository"] == "https://github.com/AIcrowd/whestbench"
    assert data["language"] == ["code"]
    assert data["license"] == "cc-by-4.0"
    assert data["pretty_name"] == DEFAULT_PRETTY_NAME
    assert data["size_categories"] == ["n<1K"]
    assert data["tags"] == ["whestbench", "alignment", "neural-network-statistics", "benchmark", "white-box"]
    assert data["task_categories"] == ["other"]


def test_front_matter_keys_are_sorted():
    head, _ = split_card(render_card(multi_md({"public": "default", "holdout": "holdout"})))
    top = [line.split(":")[0] for line in head.splitlines() if line and not line.startswith((" ", "-"))]
    assert top == sorted(top)


def test_multi_split_card_adds_the_multi_split_tag_and_sums_split_sizes():
    md = multi_md({"public": None, "holdout": None})
    md["splits"]["public"]["n_mlps"] = 600
    md["splits"]["holdout"]["n_mlps"] = 500
    data = front(render_card(md))
    assert data["tags"][-1] == "multi-split"
    assert data["size_categories"] == ["1K<n<10K"]


def test_pretty_name_comes_from_metadata_when_set():
    assert front(render_card(single_md(pretty_name="Mini set")))["pretty_name"] == "Mini set"


# --- the configs block rules ------------------------------------------------------------------------


def test_single_default_split_has_no_configs_block():
    assert configs_block(single_md()) == []
    assert "configs" not in front(render_card(single_md()))


def test_single_split_with_a_non_default_config_gets_one_config_with_the_split_glob():
    md = single_md(split="holdout", config="hc")
    assert front(render_card(md))["configs"] == [
        {"config_name": "hc", "data_files": [{"split": "holdout", "path": "data/holdout-*.parquet"}]}
    ]


def test_multi_split_with_distinct_configs_groups_splits_by_config_default_first():
    md = multi_md({"x": "a", "y": "default", "z": "b", "w": "a"})
    assert names(configs_block(md)) == [("default", ["y"]), ("a", ["x", "w"]), ("b", ["z"])]


def test_a_split_without_a_declared_config_counts_as_default():
    md = multi_md({"x": "a", "y": None, "z": "b"})
    assert names(configs_block(md)) == [("default", ["y"]), ("a", ["x"]), ("b", ["z"])]


def test_distinct_configs_without_default_get_no_default_config():
    assert names(configs_block(multi_md({"x": "a", "y": "b"}))) == [("a", ["x"]), ("b", ["y"])]


def test_default_split_gets_the_default_config_and_every_other_split_its_own():
    md = multi_md({"full": "default", "mini": "default", "extra": "default"}, default_split="mini")
    assert names(configs_block(md)) == [("default", ["mini"]), ("full", ["full"]), ("extra", ["extra"])]


def test_without_default_split_one_default_config_lists_every_split_in_order():
    md = multi_md({"holdout": None, "public": None})
    assert names(configs_block(md)) == [("default", ["holdout", "public"])]


def test_one_shared_non_default_config_still_falls_back_to_a_default_config():
    # whestbench 0.16.2 behaves this way (observed); matching it keeps both tools' cards identical.
    assert names(configs_block(multi_md({"x": "a", "y": "a"}))) == [("default", ["x", "y"])]


def test_legacy_multi_split_fixture_lists_both_splits_under_default(fixtures16):
    # The fixture's own README predates configs blocks; whestbench 0.16.2 re-renders it this way.
    md = fixture_md(fixtures16 / "multi_split_v3.0")
    assert front(render_card(md))["configs"] == [
        {
            "config_name": "default",
            "data_files": [
                {"path": "data/public-*.parquet", "split": "public"},
                {"path": "data/holdout-*.parquet", "split": "holdout"},
            ],
        }
    ]


def test_split_configs_names_the_config_that_holds_each_split():
    md = multi_md({"public": "default", "holdout": "holdout"})
    assert split_configs(md) == {"public": "default", "holdout": "holdout"}


def test_configs_block_makes_datasets_load_each_config(golden_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    src = golden_dir / "combined-w64-d4"
    root = tmp_path / "combined"
    shutil.copytree(src / "data", root / "data")
    md = json.loads((src / "metadata.json").read_text())
    (root / "README.md").write_text(render_card(md))
    cache = str(tmp_path / "cache")
    holdout = datasets.load_dataset(str(root), "holdout", cache_dir=cache)
    default = datasets.load_dataset(str(root), cache_dir=cache)
    assert list(holdout) == ["holdout"] and holdout["holdout"].num_rows == 3
    assert list(default) == ["public"] and default["public"].num_rows == 6


# --- body: key facts ---------------------------------------------------------------------------------


def test_hub_link_uses_repo_id_and_revision():
    _, body = split_card(render_card(single_md(), repo_id="org/name", revision="v2"))
    assert "https://huggingface.co/datasets/org/name/tree/v2" in body
    assert 'load_dataset("org/name", revision="v2", split="public")' in body


def test_placeholders_are_used_until_upload():
    _, body = split_card(render_card(single_md()))
    assert "https://huggingface.co/datasets/<your-repo>/tree/main" in body


def test_quick_start_shows_datasets_and_whestbench_loaders():
    _, body = split_card(render_card(single_md()))
    assert "from datasets import load_dataset" in body
    assert "whestbench.load_dataset(" in body
    assert "whestbench.iter_mlps(" in body


def test_quick_start_names_the_config_of_a_split_outside_default():
    _, body = split_card(render_card(multi_md({"public": "default", "holdout": "holdout"}), repo_id="o/r"))
    assert 'load_dataset("o/r", "holdout", revision="main", split="holdout")' in body
    assert 'load_dataset("o/r", revision="main", split="public")' in body


def _schema_rows(body: str) -> list[str]:
    schema = body.split("## Schema")[1].split("## ")[0]
    return [line.split("|")[1].strip().strip("`") for line in schema.splitlines() if line.startswith("| `")]


def test_schema_table_lists_every_column_the_dataset_has():
    """Issue 28: the card said "eight columns" for a target bake's ten."""
    from whestbench.format.schema import columns_for

    plain = single_md()
    _, body = split_card(render_card(plain))
    assert _schema_rows(body) == list(COLUMNS) == list(columns_for(plain)) and "eight columns" in body
    est = single_md(estimator={"name": "plain", "version": "1"})
    _, body = split_card(render_card(est))
    assert _schema_rows(body) == list(columns_for(est)) and len(columns_for(est)) == 9 and "nine columns" in body
    target = single_md(estimator={"name": "plain", "version": "1"}, target_stderr={"value": 0.01, "layer": "last"})
    _, body = split_card(render_card(target))
    assert _schema_rows(body) == list(columns_for(target)) and len(columns_for(target)) == 10 and "ten columns" in body


def test_a_control_variate_target_card_names_its_estimator_target_and_n_range(tmp_path):
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation

    out = bake(BakeConfig(n_mlps=3, n_samples=10**6, width=8, depth=3, seed=45, output=tmp_path / "cv",
                          estimation=Estimation("control-variate", 0.05)))
    md = json.loads((out / "metadata.json").read_text())
    used = md["samples_used"]
    text = " ".join(split_card(render_card(md))[1].split())
    assert "ten columns" in text and "`all_layer_stderr`" in text and "`n_samples_used`" in text
    assert "control-variate" in text and "batch means" in text and "0.05" in text and "pilot-planned" in text
    n = f"N = {used['min']:,}" if used["min"] == used["max"] else f"N from {used['min']:,} to {used['max']:,}"
    assert f"**{n}** inputs per network" in text and "capped at 1,000,000" in text
    assert "N = 1,000,000" not in text and "(1/N) Σ_n relu" not in text


def test_ground_truth_section_states_the_recipe():
    _, body = split_card(render_card(single_md()))
    for fact in ("N(0, 2/width)", "(1/N) Σ_n relu(h_{l-1}(x_n) @ W_l)_j", "float32", "float64", "avg_variance"):
        assert fact in body
    assert "1,000,000" in body  # N


def test_summary_table_shows_shape_and_sizes():
    _, body = split_card(render_card(single_md()))
    summary = body.split("## Dataset summary")[1].split("##")[0]
    for value in ("`public`", "| 5 |", "| 32 |", "| 3 |", "1,000,000"):
        assert value in summary


def test_sampler_block_is_named_when_present():
    md = single_md(sampler={"name": "pcg64", "version": "1"})
    _, body = split_card(render_card(md))
    assert "`pcg64` version `1`" in body


def test_recorded_bake_command_is_the_rebake_command():
    cmd = "whest dataset bake --n-mlps 5 --n-samples 1e6 --width 32 --depth 3 --seed 7 --output out"
    md = single_md(bake_command=cmd)
    assert rebake_argv(md, "public") == shlex.split(cmd)[:-2] + ["--output", "./rebake-public"]
    _, body = split_card(render_card(md))
    assert "--seed 7 \\\n" in body


def test_the_rebake_command_leaves_out_the_bakers_card_file():
    """``--card FILE`` names a file on the baker's machine; the card's fields are in the metadata and
    never change the numbers, so the published re-bake command does not ask for it."""
    cmd = "whest dataset bake --n-mlps 5 --seed 7 --card /home/ada/card.yaml --card=x.json --license mit --output o"
    assert rebake_argv(single_md(bake_command=cmd), "public") == shlex.split(
        "whest dataset bake --n-mlps 5 --seed 7 --license mit --output ./rebake-public")


def test_recorded_seeds_file_is_the_one_the_card_writes():
    md = single_md(bake_command="whest dataset bake --n-mlps 5 --mlp-seeds my-seeds.json --output o")
    _, body = split_card(render_card(md))
    assert 'open("my-seeds.json", "w")' in body


def test_derived_seeds_need_no_seeds_file():
    md = single_md(bake_command="whest dataset bake --n-mlps 5 --seed 7 --output o")
    _, body = split_card(render_card(md))
    assert 'ds["mlp_seed"]' not in body


def test_merged_dataset_drops_the_slice_flags_of_its_first_partial():
    cmd = "whest dataset bake --n-mlps 6 --mlp-seeds s.json --mlp-range 0-1 --slice=0/3 --output p0"
    assert rebake_argv(single_md(bake_command=cmd), "public") == shlex.split(
        "whest dataset bake --n-mlps 6 --mlp-seeds s.json --output ./rebake-public"
    )


def test_partial_keeps_its_recorded_range():
    cmd = "whest dataset bake --n-mlps 6 --mlp-seeds s.json --mlp-range 2-3 --output p1"
    md = single_md(n_mlps=2, is_partial=True, mlp_range=[2, 4], total_n_mlps=6, bake_command=cmd)
    assert "--mlp-range 2-3" in shlex.join(rebake_argv(md, "public"))


def test_recorded_output_path_is_replaced_by_a_fresh_directory():
    md = single_md(bake_command="whest dataset bake --n-mlps 5 --output=/home/me/data/public")
    argv = rebake_argv(md, "public")
    assert "/home/me" not in shlex.join(argv)
    assert argv[-2:] == ["--output", "./rebake-public"]


def test_the_rebake_command_keeps_a_built_in_card():
    cmd = "whest dataset bake --n-mlps 5 --seed 7 --card whestbench-organisers --output o"
    assert rebake_argv(single_md(bake_command=cmd), "public") == shlex.split(
        "whest dataset bake --n-mlps 5 --seed 7 --card whestbench-organisers --output ./rebake-public")


def test_built_bake_command_rebakes_from_the_seeds_column():
    argv = rebake_argv(single_md(split="holdout", config="hc"), "holdout", seeds_file="h.json")
    assert argv[:3] == ["whest", "dataset", "bake"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags == {
        "--n-mlps": "5", "--n-samples": "1000000", "--width": "32", "--depth": "3",
        "--mlp-seeds": "h.json", "--split": "holdout", "--config": "hc", "--output": "./rebake-holdout",
    }


def test_card_shows_how_to_write_the_seeds_file():
    _, body = split_card(render_card(single_md(split="holdout", config="hc")))
    assert 'sorted(zip(ds["mlp_id"], ds["mlp_seed"]))' in body
    assert "--mlp-seeds holdout-seeds.json" in body


def test_partial_bake_command_targets_the_same_slice():
    md = single_md(n_mlps=2, is_partial=True, mlp_range=[2, 4], total_n_mlps=6)
    argv = rebake_argv(md, "public")
    assert argv[3:7] == ["--n-mlps", "6", "--mlp-range", "2-3"]


def test_multi_split_card_recombines_the_rebaked_splits():
    md = multi_md({"public": "default", "holdout": "holdout"}, default_split="public")
    _, body = split_card(render_card(md))
    assert "whest dataset combine-splits ./rebake-public ./rebake-holdout --output ./rebake --default-split public" in body


def test_reference_torch_bake_command_pins_backend_device_and_chunking():
    md = single_md(backend="torch", device="cuda", chunk_size=65536, mlps_per_batch=4)
    argv = rebake_argv(md, "public")
    assert "--torch" in argv
    assert argv[argv.index("--device") + 1] == "cuda"
    assert argv[argv.index("--chunk-size") + 1] == "65536"


def test_provenance_lists_each_hardware_fingerprint():
    md = single_md(hardware_fingerprints=[{"cuda_device_name": "NVIDIA H100"}, {"cpu_brand": "EPYC"}])
    _, body = split_card(render_card(md))
    provenance = body.split("## Provenance")[1]
    assert "NVIDIA H100" in provenance and "EPYC" in provenance


def test_provenance_names_the_single_host():
    _, body = split_card(render_card(single_md()))
    assert "Single-host bake on `Test CPU 9000`" in body


def test_card_has_citation_and_license():
    _, body = split_card(render_card(single_md()))
    assert "@misc{" in body
    assert "CC-BY-4.0" in body


def test_protocol_4_salt_never_reaches_the_card():
    salt = "ab" * 32
    md = single_md(seed_protocol={"name": "whestbench_kdf_per_mlp_seeds", "version": "4.0",
                                  "kdf": "blake2b-keyed", "salt_source": "metadata", "salt": salt})
    assert salt not in render_card(md)


# --- robustness ----------------------------------------------------------------------------------


def test_protocol_2_multi_split_fixture_renders(fixtures16):
    text = render_card(fixture_md(fixtures16 / "multi_split_v3.0"))
    assert "whestbench_seedsequence_hierarchy" in text


def rows_per_split(path: Path) -> dict[str, int]:
    """Rows in each split's ``data/<split>-*.parquet`` files: counted from the data, not the metadata."""
    import pyarrow.parquet as pq

    rows: dict[str, int] = {}
    for f in sorted((path / "data").glob("*.parquet")):
        split = f.name.rsplit("-", 3)[0]
        rows[split] = rows.get(split, 0) + pq.ParquetFile(f).metadata.num_rows
    return rows


@pytest.mark.parametrize(
    "name",
    ["golden/full-w64-d4", "golden/merged-w64-d4", "golden/part-1-of-3", "golden/combined-w64-d4",
     "multi_config_v3.0", "multi_split_v3.0", "single_split_v3_protocol"],
)
def test_every_fixture_card_states_its_sample_count_shape_rows_and_range(dataset16, read_columns, name):
    path = dataset16(name)
    md = fixture_md(path)
    text = " ".join(split_card(render_card(md))[1].split())  # the prose, line breaks undone
    assert f"**N = {md['n_samples']:,}** inputs per network" in text
    assert f"width {md['width']} and depth {md['depth']}" in text
    rows = rows_per_split(path)
    if len(rows) == 1:
        ((split, n),) = rows.items()
        assert f"This is the `{split}` split: {n} networks" in text
    else:
        assert f"holds {len(rows)} splits, {sum(rows.values())} networks in all" in text
        assert all(f"`{split}`: {n} MLPs" in text for split, n in rows.items())
    if md.get("is_partial"):
        ids = read_columns(path)["mlp_id"]
        assert f"MLPs {ids.min()} to {ids.max()} of {md['total_n_mlps']}" in text


@pytest.mark.parametrize("drop", ["n_mlps", "n_samples", "width", "depth", "hardware", "seed_protocol",
                                  "created_at_utc", "split", "config", "backend"])
def test_missing_optional_keys_never_raise(drop):
    md = single_md()
    del md[drop]
    render_card(md)


def test_empty_metadata_renders():
    assert render_card({}).startswith("---\n")


def test_rendering_does_not_mutate_metadata():
    md = multi_md({"public": "default", "holdout": "holdout"}, default_split="public")
    before = copy.deepcopy(md)
    render_card(md)
    assert md == before


def test_the_card_states_the_device_checks_result():
    _, body = split_card(render_card(single_md(device_check={"skipped": True})))
    assert "Device check before the bake: skipped (`--skip-device-check`)" in body
    _, body = split_card(render_card(single_md()))
    assert "Device check" not in body


@pytest.mark.parametrize("title", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
                                   "[click](javascript:alert(1))"])
def test_a_title_cannot_inject_markup_into_the_card(title):
    """Issue 27: the pretty name went raw into the card's heading."""
    _, body = split_card(render_card(single_md(), pretty_name=title))
    heading = body.splitlines()[0]
    assert "<" not in heading and "](" not in heading and heading.startswith("# ")


def bibtex_fields(cite: str) -> list[str]:
    """The field names of the one entry in ``cite``, read as BibTeX reads it: every brace counts,
    whatever precedes it (a backslash escapes nothing in BibTeX's brace matching, unlike TeX's)."""
    body, depth, outside = cite[cite.index("{") + 1:], 1, []
    for c in body:
        depth += (c == "{") - (c == "}")
        if depth == 0:
            break  # the entry's closing brace
        if depth == 1 and c not in "{}":
            outside.append(c)
    assert depth == 0, "the entry never closes"
    return re.findall(r"(\w+)\s*=", "".join(outside))


@pytest.mark.parametrize("hostile", ["x}}, note = {{pwned", "a}}, month = jan, x = {{", "}", "{", "\\}"])
def test_the_citation_cannot_be_broken_out_of(hostile):
    """A title or author holding braces cannot close its field and add its own: braces were escaped
    as \\{ \\}, which TeX reads as literal braces but BibTeX counts as braces ("x}}, note = {{pwned"
    ended the title after "x" and made a field of the rest); now \\textbraceleft{} and \\textbraceright{}."""
    def fields_of(value: str, where: str) -> list[str]:
        if where == "title":
            text = render_card(single_md(), pretty_name=value)
        else:
            text = render_card(single_md(card={"pretty_name": "t", "authors": [value, "b"]}))
        return bibtex_fields(text.split("```bibtex")[1].split("```")[0])

    for where in ("title", "author"):
        assert fields_of(hostile, where) == fields_of("benign", where), where


@pytest.mark.parametrize("flags", [dict(pretty_name="evil\u202etxt.exe"), dict(pretty_name="a\u2066b"),
                                   dict(homepage="https://x.org/}}},evil={"), dict(homepage="javascript:alert(1)"),
                                   dict(homepage="ftp://x.org/")])
def test_card_flags_refuse_hidden_characters_and_non_http_homepages(flags):
    from whestbench.errors import UsageError
    from whestbench.format.card_rules import check_card_fields

    with pytest.raises(UsageError):
        check_card_fields(**flags)


def test_a_recorded_javascript_homepage_never_reaches_the_card():
    text = render_card(single_md(card={"homepage": "javascript:alert(1)"}))
    assert "javascript:" not in text


def test_the_card_check_of_a_dataset_named_like_a_split_given_relative(tmp_path, monkeypatch):
    """``datasets.load_dataset_builder("eval")`` reads "eval" as a split word, not the directory: the
    card check hands it the absolute path (the README tour verifies ``./eval``)."""
    import json

    from whestbench.assemble.combine import combine_split_datasets
    from whestbench.dataset import create_dataset
    from whestbench.verify.card_check import card_verdict

    shape = dict(n_samples=1000, width=4, depth=2)
    pub = create_dataset(2, mlp_seeds=[1, 2], output_path=tmp_path / "pub", **shape)
    hold = create_dataset(2, mlp_seeds=[3, 4], split="holdout", config="holdout", output_path=tmp_path / "hold", **shape)
    combine_split_datasets([pub, hold], output_dir=tmp_path / "eval", write_prepared_arrow=False)
    monkeypatch.chdir(tmp_path)
    ok, detail = card_verdict("eval", json.loads((tmp_path / "eval" / "metadata.json").read_text()))
    assert ok, detail


ORGANISATIONS = ("Alignment Research Center", "AIcrowd", "ARC", "WhestBench organisers", "aicrowd.com",
                 "White-Box Estimation Challenge")


def test_the_default_card_describes_the_data_and_names_no_organisation():
    """Issue 28: a bake given no card field was published as the ARC/AIcrowd organisers' (their
    authorship, AIcrowd/whestbench, an "AIcrowd challenge" badge). The default card now credits no
    organisation: a title from the data, whestbench named as the tool that baked it."""
    for md in (single_md(), multi_md({"public": "default", "holdout": "holdout"})):
        text = render_card(md)
        for name in ORGANISATIONS:
            assert name not in text, name
        data = front(text)
        assert data["homepage"] == "https://pypi.org/project/whestbench/" and "repository" not in data
        assert "[![Baked with whestbench]" in text and "(https://pypi.org/project/whestbench/)" in text
        assert "Baked with whestbench" in text.split("```bibtex")[1]
        # issue 35: no authors given, so the license names none and claims none ("credit to its authors")
        assert "credit to" not in text and "under the license's terms" in text
    assert front(render_card(single_md()))["pretty_name"] == "Ground truth of 5 random ReLU MLPs of width 32 and depth 3"


def test_the_organisers_preset_is_the_organisers_text():
    """``--card whestbench-organisers`` (metadata ``card: {preset: ...}``): the text that was the default."""
    text = render_card(single_md(card={"preset": "whestbench-organisers"}))
    assert "{Alignment Research Center} and {AIcrowd}" in text and "AIcrowd-challenge" in text
    assert "credit to the WhestBench organisers" in text and "# WhestBench 2026: ARC White-Box Estimation Challenge" in text
    assert "GitHub-AIcrowd%2Fwhestbench" in text and "Baked with whestbench" not in text
    assert render_card(single_md(), preset="whestbench-organisers") == text  # given (push) or recorded: one card
    titled = render_card(single_md(card={"preset": "whestbench-organisers", "pretty_name": "Holdout 2026"}))
    assert "# Holdout 2026" in titled and "title        = {{Holdout 2026}}" in titled and "AIcrowd-challenge" in titled


def test_a_preset_with_fields_it_brings_is_refused_and_one_given_later_displaces_them():
    from whestbench.errors import UsageError
    from whestbench.format.card_rules import check_card, combine_card

    with pytest.raises(UsageError, match="brings its own .*drop 'authors' or the preset"):
        check_card({"preset": "whestbench-organisers", "authors": ["Ada"]}, "--card c.yaml")
    with pytest.raises(UsageError, match=r"preset must be a built-in card \(whestbench-organisers\)"):
        check_card({"preset": "organisers"}, "--card c.yaml")
    assert combine_card({"authors": ["Ada"], "license": "mit"}, {"preset": "whestbench-organisers"}) == \
        {"license": "mit", "preset": "whestbench-organisers"}
    assert combine_card({"preset": "whestbench-organisers"}, {"authors": ["Ada"]}) == {"authors": ["Ada"]}


def test_a_card_of_its_own_drops_the_organisers_text():
    """Issue 28: a user's card kept the ARC/AIcrowd authors, the AIcrowd challenge badge and the credit
    to the WhestBench organisers; they are the preset's only."""
    default = render_card(single_md(card={"preset": "whestbench-organisers"}))
    assert "{Alignment Research Center} and {AIcrowd}" in default and "AIcrowd-challenge" in default
    assert "credit to the WhestBench organisers" in default
    for text in (render_card(single_md(), pretty_name="Ada set", homepage="https://x.org/ada"),
                 render_card(single_md(card={"pretty_name": "Ada set", "homepage": "https://x.org/ada"}))):
        assert "Alignment Research Center" not in text and "AIcrowd-challenge" not in text
        assert "WhestBench organisers" not in text and "credit to" not in text
        cite = text.split("```bibtex")[1].split("```")[0]
        assert "title        = {{Ada set}}" in cite and r"\url{https://x.org/ada}" in cite and "author" not in cite
        assert "[![Homepage]" in text and "(https://x.org/ada)" in text


def test_a_card_credits_the_authors_it_is_given_and_names_a_repository_only_when_given():
    """Issue 35: "cc-by-4.0 with credit to its authors" named no authors, and `repository:` was the
    package's PyPI page."""
    text = render_card(single_md(card={"authors": ["Ada Lovelace", "Charles Babbage"],
                                       "repository": "https://github.com/ada/set"}))
    assert "with credit to its authors (Ada Lovelace, Charles Babbage)" in text
    assert front(text)["repository"] == "https://github.com/ada/set" and "[![Code]" in text
    bare = render_card(single_md())
    assert "repository" not in front(bare) and "[![Code]" not in bare and "credit to" not in bare
