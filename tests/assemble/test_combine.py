"""combine_split_datasets and prepare_arrow: independent single-split datasets become one multi-split
dataset laid out as whestbench 0.16 lays it out (plus checksums), with prepared Arrow copies that
``datasets.load_from_disk`` opens; mismatched, overlapping or damaged inputs are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from whestbench.assemble import combine as combine_mod
from whestbench.bake.pipeline import create_dataset
from whestbench.assemble.combine import (
    DefaultSplitError,
    build_prepared_splits_for_directory,
    combine_split_datasets,
    prepare_arrow,
    write_prepared_arrow_split,
)
from whestbench.errors import InvalidDatasetError, MergeCorruptError, MergeIncompatibleError
from whestbench.errors import InputPathError
from whestbench.errors import UsageError
from whestbench.errors import OutputExistsError
from whestbench.format.checksums import file_sha256, verify_checksums
from whestbench.format.schema import validate_metadata

from helpers.datasets import edit_metadata as _edit_metadata, no_output as _no_output


SHAPE = dict(n_samples=300, width=8, depth=2)


@pytest.fixture(scope="module")
def baked(tmp_path_factory) -> dict[str, Path]:
    """Small single-split datasets with disjoint seeds (except ``leaky``), baked once per module."""
    root = tmp_path_factory.mktemp("splits")
    specs = {
        "public": dict(n_mlps=4, mlp_seeds=[1, 2, 3, 4]),
        "holdout": dict(n_mlps=3, mlp_seeds=[5, 6, 7], split="holdout", config="holdout"),
        "mini": dict(n_mlps=2, mlp_seeds=[8, 9], split="mini"),  # config "default", like public
        "leaky": dict(n_mlps=2, mlp_seeds=[10, 3], split="leaky", config="leaky"),
        "partial": dict(n_mlps=4, mlp_seeds=[11, 12, 13, 14], split="late", mlp_range=(0, 2)),
    }
    return {name: create_dataset(**SHAPE, **spec, output_path=root / name) for name, spec in specs.items()}


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch) -> Path:
    """A private ``datasets`` cache: nothing may land in ~/.cache, and leaks become visible."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def combined(baked, tmp_path_factory) -> Path:
    """public + holdout combined once, for the tests that only read the result."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        out = tmp_path_factory.mktemp("combined") / "combined"
        assert combine_split_datasets([baked["public"], baked["holdout"]], output_dir=out) == out
    return out


@pytest.fixture
def copy_of(baked, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(baked[name], tmp_path / f"in-{name}"))

    return copy


def _md(d: Path) -> dict:
    return json.loads((d / "metadata.json").read_text())


# --- the combined dataset --------------------------------------------------------------------------


def test_combine_copies_each_shard_byte_for_byte(baked, combined):
    for name in ("public", "holdout"):
        shard = f"data/{name}-00000-of-00001.parquet"
        assert file_sha256(combined / shard) == file_sha256(baked[name] / shard)


def test_combined_metadata_has_the_multi_split_layout(combined):
    md = _md(combined)
    assert list(md) == [
        "schema_version", "format", "backend", "seed_protocol", "n_samples", "width", "depth",
        "created_at_utc", "hardware", "splits", "default_split", "estimator", "plan_digest", "prepared_splits",
        "checksums_written_for", "checksums",
    ]
    assert list(md["splits"]) == ["public", "holdout"]
    assert {k: v["n_mlps"] for k, v in md["splits"].items()} == {"public": 4, "holdout": 3}
    assert md["splits"]["holdout"]["config"] == "holdout"
    validate_metadata(md)
    verify_checksums(combined, md)


def test_each_split_keeps_its_sampler_seed_digest_and_bake_command(baked, combined):
    entry, source = _md(combined)["splits"]["holdout"], _md(baked["holdout"])
    assert list(entry) == [
        "n_mlps", "created_at_utc", "config", "hardware_fingerprints", "sampler", "seed_list_digest", "bake_command",
        "audit",
    ]
    assert entry["hardware_fingerprints"] == [source["hardware"]]
    for key in ("sampler", "seed_list_digest", "bake_command", "audit"):
        assert entry[key] == source[key]


def test_checksums_cover_data_and_prepared_files(combined):
    listed = _md(combined)["checksums"]
    on_disk = sorted(
        p.relative_to(combined).as_posix()
        for sub in ("data", "audit", "prepared")
        for p in (combined / sub).rglob("*")
        if p.is_file()
    )
    assert sorted(listed) == on_disk


def test_combined_splits_load_through_whestbench(combined):
    import whestbench

    assert whestbench.load_dataset(combined, split="holdout")["mlp_seed"] == [5, 6, 7]
    assert sorted(whestbench.load_dataset(combined)) == ["holdout", "public"]


def test_prepared_arrow_is_written_by_default_and_loads_from_disk(combined):
    assert _md(combined)["prepared_splits"] == {
        "public": {"path": "prepared/public", "format": "save_to_disk"},
        "holdout": {"path": "prepared/holdout", "format": "save_to_disk"},
    }
    ds = datasets.load_from_disk(str(combined / "prepared" / "holdout"))
    assert ds.num_rows == 3 and ds["mlp_seed"] == [5, 6, 7]
    assert str(ds.split) == "holdout"


def test_prepared_arrow_can_be_skipped(baked, tmp_path):
    out = combine_split_datasets(
        [baked["public"], baked["holdout"]], output_dir=tmp_path / "combined", write_prepared_arrow=False
    )
    assert "prepared_splits" not in _md(out) and not (out / "prepared").exists()


def test_combine_leaves_nothing_in_the_datasets_cache(baked, tmp_path, hf_cache):
    combine_split_datasets([baked["public"], baked["holdout"]], output_dir=tmp_path / "combined")
    assert list(hf_cache.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_single_input_is_allowed(baked, tmp_path):
    out = combine_split_datasets([baked["holdout"]], output_dir=tmp_path / "combined")
    assert list(_md(out)["splits"]) == ["holdout"]


def test_combining_0162_datasets_matches_0162s_combined_layout(golden_dir, tmp_path):
    out = combine_split_datasets(
        [golden_dir / "full-w64-d4", golden_dir / "holdout-w64-d4"], output_dir=tmp_path / "combined"
    )
    md, ref = _md(out), _md(golden_dir / "combined-w64-d4")
    assert list(md) == list(ref) + ["checksums_written_for", "checksums"]
    assert md["splits"] == ref["splits"]  # same entries, same key order (dict == ignores order: check it)
    for name in ref["splits"]:
        assert list(md["splits"][name]) == list(ref["splits"][name])
    drop = ("hardware", "checksums_written_for", "checksums")  # hardware: the combining host's
    assert {k: v for k, v in md.items() if k not in drop} == {k: v for k, v in ref.items() if k not in drop}


# --- default_split ---------------------------------------------------------------------------------


def test_default_split_is_the_only_input_with_the_default_config(baked, tmp_path):
    out = combine_split_datasets([baked["holdout"], baked["public"]], output_dir=tmp_path / "combined")
    assert _md(out)["default_split"] == "public"


def test_no_default_split_when_several_inputs_have_the_default_config(baked, tmp_path):
    out = combine_split_datasets([baked["public"], baked["mini"]], output_dir=tmp_path / "combined")
    assert "default_split" not in _md(out)


def test_an_explicit_default_split_wins(baked, tmp_path):
    out = combine_split_datasets(
        [baked["public"], baked["holdout"]], output_dir=tmp_path / "combined", default_split="holdout"
    )
    assert _md(out)["default_split"] == "holdout"


@pytest.mark.parametrize("name", ["mini", "nope", "../x", "public/../holdout", ""])
def test_a_default_split_that_is_not_an_input_split_is_a_usage_error_naming_them(baked, tmp_path, name):
    with pytest.raises(DefaultSplitError, match=r"is not one of the input splits \(public, holdout\)") as info:
        combine_split_datasets([baked["public"], baked["holdout"]], output_dir=tmp_path / "out", default_split=name)
    assert isinstance(info.value, UsageError) and isinstance(info.value, MergeIncompatibleError)  # 0.16's type
    _no_output(tmp_path / "out")


# --- refusals --------------------------------------------------------------------------------------


def test_splits_sharing_a_seed_are_refused(baked, tmp_path):
    with pytest.raises(MergeIncompatibleError, match="'public'.*'leaky'.*share mlp_seed 3; splits must be independent"):
        combine_split_datasets([baked["public"], baked["leaky"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_a_hyphenated_split_is_refused(copy_of, baked, tmp_path):
    d = copy_of("holdout")
    (d / "data/holdout-00000-of-00001.parquet").rename(d / "data/round-one-00000-of-00001.parquet")
    _edit_metadata(d, split="round-one", checksums=None)
    with pytest.raises(MergeIncompatibleError, match="'round-one' contains a hyphen"):
        combine_split_datasets([baked["public"], d], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_a_duplicate_split_name_is_refused(baked, copy_of, tmp_path):
    with pytest.raises(MergeIncompatibleError, match="duplicate split name 'public'"):
        combine_split_datasets([baked["public"], copy_of("public")], output_dir=tmp_path / "out")


def test_a_partial_input_is_refused(baked, tmp_path):
    with pytest.raises(MergeIncompatibleError, match="is a partial dataset.*whest dataset merge"):
        combine_split_datasets([baked["public"], baked["partial"]], output_dir=tmp_path / "out")


def test_a_multi_split_input_is_refused(baked, tmp_path):
    combined = combine_split_datasets([baked["holdout"]], output_dir=tmp_path / "combined")
    with pytest.raises(MergeIncompatibleError, match="already a multi-split dataset"):
        combine_split_datasets([baked["public"], combined], output_dir=tmp_path / "out")


@pytest.mark.parametrize(
    "key, value",
    [
        ("n_samples", 301),
        ("width", 16),
        ("depth", 3),
        ("backend", "torch"),
        ("format", "npz"),
        ("seed_protocol", {"name": "whestbench_kdf_per_mlp_seeds", "version": "4.0", "kdf": "blake2b-keyed",
                           "salt_source": "metadata", "salt": "00"}),
    ],
)
def test_splits_that_differ_in_a_shared_parameter_are_refused(baked, copy_of, tmp_path, key, value):
    d = copy_of("holdout")
    _edit_metadata(d, **{key: value})
    # a format that is not ours is refused by the one metadata validator before any comparison
    refused, words = ((InvalidDatasetError, "backend" if key == "backend" else key) if key in ("format", "backend")
                      else (MergeIncompatibleError, key))
    with pytest.raises(refused, match=words):
        combine_split_datasets([baked["public"], d], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_an_unsupported_schema_version_is_invalid(baked, copy_of, tmp_path):
    d = copy_of("holdout")
    _edit_metadata(d, schema_version="2.0")
    with pytest.raises(InvalidDatasetError, match="schema_version"):
        combine_split_datasets([baked["public"], d], output_dir=tmp_path / "out")


def test_a_tampered_input_is_refused(baked, copy_of, tmp_path):
    d = copy_of("holdout")
    shard = d / "data/holdout-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:-10] + b"x" * 10)
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        combine_split_datasets([baked["public"], d], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_combine_of_nothing_is_refused(tmp_path):
    with pytest.raises(MergeIncompatibleError, match="no datasets to combine"):
        combine_split_datasets([], output_dir=tmp_path / "out")


def test_a_missing_input_is_a_usage_error(baked, tmp_path):
    with pytest.raises(InputPathError):
        combine_split_datasets([baked["public"], tmp_path / "nope"], output_dir=tmp_path / "out")


def test_an_existing_output_is_refused_before_any_work_and_left_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError):
        combine_split_datasets([tmp_path / "nope"], output_dir=out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_a_failure_while_building_leaves_no_output_and_no_staging(baked, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(combine_mod, "build_prepared_split", boom)
    with pytest.raises(OSError, match="disk full"):
        combine_split_datasets([baked["public"], baked["holdout"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


# --- prepare_arrow ---------------------------------------------------------------------------------


@pytest.fixture
def without_prepared(baked, tmp_path) -> Path:
    return combine_split_datasets(
        [baked["public"], baked["holdout"]], output_dir=tmp_path / "combined", write_prepared_arrow=False
    )


def test_prepare_arrow_adds_prepared_copies_and_records_them(without_prepared):
    before = _md(without_prepared)
    assert prepare_arrow(without_prepared) == ["public", "holdout"]
    md = _md(without_prepared)
    assert list(md) == list(before)[:-2] + ["prepared_splits", "checksums_written_for", "checksums"]
    assert set(md["prepared_splits"]) == {"public", "holdout"}
    assert datasets.load_from_disk(str(without_prepared / "prepared" / "public")).num_rows == 4
    verify_checksums(without_prepared, md)  # the new prepared files are listed
    assert any(k.startswith("prepared/public/") for k in md["checksums"])


def test_prepare_arrow_is_idempotent(without_prepared):
    prepare_arrow(without_prepared)
    prepare_arrow(without_prepared)
    md = _md(without_prepared)
    verify_checksums(without_prepared, md)
    assert sorted(p.name for p in (without_prepared / "prepared").iterdir()) == ["holdout", "public"]


def test_prepare_arrow_interrupted_midway_leaves_a_consistent_dataset(combined, tmp_path, monkeypatch):
    d = Path(shutil.copytree(combined, tmp_path / "copy"))
    real = combine_mod.build_prepared_split

    def fail_on_holdout(files, target, *, split):
        if split == "holdout":
            raise OSError("killed")
        return real(files, target, split=split)

    monkeypatch.setattr(combine_mod, "build_prepared_split", fail_on_holdout)
    with pytest.raises(OSError, match="killed"):
        prepare_arrow(d)
    md = _md(d)
    assert "prepared_splits" not in md and not any(k.startswith("prepared/") for k in md["checksums"])
    verify_checksums(d, md)
    monkeypatch.setattr(combine_mod, "build_prepared_split", real)
    prepare_arrow(d)  # re-running repairs it
    assert set(_md(d)["prepared_splits"]) == {"public", "holdout"}


def test_prepare_arrow_keeps_file_permissions(without_prepared):
    mode = (without_prepared / "metadata.json").stat().st_mode
    prepare_arrow(without_prepared)
    assert (without_prepared / "metadata.json").stat().st_mode == mode
    assert (without_prepared / "README.md").stat().st_mode == mode


def test_prepare_arrow_refuses_a_single_split_dataset(baked):
    with pytest.raises(InvalidDatasetError, match="only meaningful for multi-split datasets"):
        prepare_arrow(baked["public"])


def test_prepare_arrow_refuses_a_path_that_is_not_a_directory(baked):
    with pytest.raises(InputPathError, match="is a file, not a multi-split dataset directory"):
        prepare_arrow(baked["public"] / "metadata.json")


def test_prepare_arrow_refuses_tampered_data(without_prepared):
    shard = without_prepared / "data/public-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(MergeCorruptError):
        prepare_arrow(without_prepared)
    assert not (without_prepared / "prepared").exists() or not any((without_prepared / "prepared").iterdir())


def test_prepare_arrow_works_on_a_0162_dataset_without_checksums(golden_dir, tmp_path):
    d = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "combined"))
    shutil.rmtree(d / "prepared")
    prepare_arrow(d)
    md = _md(d)
    assert "checksums" not in md  # never half-vouch for a dataset that had none
    assert datasets.load_from_disk(str(d / "prepared" / "holdout")).num_rows == 3


# --- whestbench 0.16's prepared-Arrow helpers ------------------------------------------------------


def test_write_prepared_arrow_split_refuses_an_existing_output(baked, tmp_path):
    (tmp_path / "p").mkdir()
    with pytest.raises(FileExistsError):
        write_prepared_arrow_split(baked["public"] / "data/public-00000-of-00001.parquet", tmp_path / "p", split="public")


def test_write_prepared_arrow_split_reads_every_shard(baked, tmp_path):
    table = pq.read_table(baked["public"] / "data/public-00000-of-00001.parquet")
    files = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    pq.write_table(table.slice(0, 1), files[0])
    pq.write_table(table.slice(1), files[1])
    out = write_prepared_arrow_split(files, tmp_path / "p", split="public")
    assert datasets.load_from_disk(str(out))["mlp_seed"] == [1, 2, 3, 4]


def test_build_prepared_splits_sets_prepared_splits_in_the_metadata(without_prepared):
    md = _md(without_prepared)
    build_prepared_splits_for_directory(without_prepared, ["holdout"], md)
    assert md["prepared_splits"] == {"holdout": {"path": "prepared/holdout", "format": "save_to_disk"}}
    assert list(md)[-1] == "checksums"


@pytest.mark.parametrize("extra, flag", [(dict(estimator="control-variate"), "--estimator"),
                                         (dict(target_stderr=0.5), "--target-stderr")])
def test_splits_baked_with_different_estimators_are_refused_naming_the_flag(tmp_path, extra, flag):
    shape = dict(n_mlps=2, n_samples=3000, width=8, depth=2)
    a = create_dataset(**shape, seed=1, output_path=tmp_path / "a", split="public")
    b = create_dataset(**shape, seed=2, output_path=tmp_path / "b", split="holdout", **extra)
    with pytest.raises(MergeIncompatibleError) as exc:
        combine_split_datasets([a, b], output_dir=tmp_path / "out")
    assert f"Re-bake that split with the same {flag}" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_combine_keeps_each_splits_device_check(torch_bakes, tmp_path):
    """Combine used to drop the device_check block, laundering a skipped check; each split keeps its
    own, verify reports the skipped one, and merge keeps the worst of its partials'."""
    from whestbench.dataset_io import merge_datasets
    from whestbench.verify.run import verify_dataset

    out = combine_split_datasets([torch_bakes["checked"], torch_bakes["skipped"]], output_dir=tmp_path / "comb",
                                 write_prepared_arrow=False)
    md = _md(out)
    assert "device_check" not in md
    assert md["splits"]["public"]["device_check"] == _md(torch_bakes["checked"])["device_check"]
    assert md["splits"]["holdout"]["device_check"]["skipped"] is True
    report = verify_dataset(out, n_check=1)
    checks = {c.name: c for c in report.checks}
    assert report.ok and checks["public: device check"].ok and not checks["public: device check"].skipped
    assert checks["holdout: device check"].skipped and "SKIPPED at bake" in checks["holdout: device check"].detail
    merged = merge_datasets([torch_bakes["p0"], torch_bakes["p1"]], output_dir=tmp_path / "merged")
    assert _md(merged)["device_check"]["skipped"] is True
    assert {c.name: c for c in verify_dataset(merged, n_check=1).checks}["device check"].skipped


# --- cards (issue 28: combine dropped the inputs' pretty name and license) --------------------------


def _carded(root: Path, cards: dict[str, dict]) -> list[Path]:
    from whestbench.bake.pipeline import BakeConfig, bake

    seeds = {"public": 21, "holdout": 22}
    return [bake(BakeConfig(n_mlps=2, n_samples=200, width=4, depth=2, seed=seeds[split], split=split,
                            config=split if split != "public" else "default", card=card or None,
                            output=root / split)) for split, card in cards.items()]


def test_combine_keeps_the_inputs_card(tmp_path):
    card = {"license": "mit", "pretty_name": "Eval 8"}
    out = combine_split_datasets(_carded(tmp_path, {"public": card, "holdout": card}), output_dir=tmp_path / "c")
    assert _md(out)["card"] == card
    front = (out / "README.md").read_text().split("---")[1]
    assert "license: mit" in front and "pretty_name: Eval 8" in front


def test_combine_refuses_differing_cards_naming_the_fields(tmp_path):
    inputs = _carded(tmp_path, {"public": {"license": "mit", "pretty_name": "Eval 8"}, "holdout": {"license": "mit"}})
    with pytest.raises(MergeIncompatibleError, match=r"differ in pretty_name .*'Eval 8'.*the default.*--pretty-name"):
        combine_split_datasets(inputs, output_dir=tmp_path / "c")
    _no_output(tmp_path / "c")


def test_a_given_card_settles_differing_inputs(tmp_path):
    inputs = _carded(tmp_path, {"public": {"license": "mit"}, "holdout": {"license": "apache-2.0"}})
    out = combine_split_datasets(inputs, output_dir=tmp_path / "c", card={"license": "cc-by-4.0"})
    assert _md(out)["card"] == {"license": "cc-by-4.0"}


def test_the_cli_settles_differing_cards_with_its_card_flags(tmp_path, capsys):
    from whestbench.cli import main

    inputs = [str(p) for p in _carded(tmp_path, {"public": {"license": "mit"}, "holdout": {}})]
    assert main(["dataset", "combine-splits", *inputs, "--output", str(tmp_path / "c")]) == 1
    assert "differ in license" in capsys.readouterr().err
    assert main(["dataset", "combine-splits", *inputs, "--output", str(tmp_path / "c"), "--license", "mit"]) == 0
    assert _md(tmp_path / "c")["card"] == {"license": "mit"}


def test_the_cli_settles_differing_authors_with_a_card_file(tmp_path, capsys):
    """Authors (a list) that differ are named, and --card FILE settles them; the combined card credits them."""
    from whestbench.cli import main

    inputs = [str(p) for p in _carded(tmp_path, {"public": {"authors": ["Ada"]}, "holdout": {"authors": ["Bob"]}})]
    assert main(["dataset", "combine-splits", *inputs, "--output", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "differ in authors" in err and '["Ada"]' in err and "--card FILE" in err
    card = tmp_path / "card.yaml"
    card.write_text("authors: [Ada, Bob]\n")
    assert main(["dataset", "combine-splits", *inputs, "--output", str(tmp_path / "c"), "--card", str(card)]) == 0
    assert _md(tmp_path / "c")["card"] == {"authors": ["Ada", "Bob"]}
    assert "author       = {{Ada} and {Bob}}" in (tmp_path / "c" / "README.md").read_text()


def test_combine_reports_progress_while_it_verifies_its_inputs(baked, tmp_path):
    """Issue 28: combine-splits was silent while it verified its inputs (63 s in the report)."""
    events = []
    combine_split_datasets([baked["public"], baked["holdout"]], output_dir=tmp_path / "c", on_event=events.append)
    progress = [e.progress for e in events if e.progress is not None]
    first_copy = next(i for i, p in enumerate(progress) if p.what == "bytes")
    for name, n in (("public", 4), ("holdout", 3)):
        mine = [p for p in progress[:first_copy] if p.phase == f"verifying input {baked[name]}" and p.what == "MLPs"]
        assert mine and (mine[-1].done, mine[-1].total) == (n, n)


@pytest.mark.parametrize("edit", [{"backend": "torch"}, {"format": "x"}])
def test_a_mismatched_backend_or_format_raises_merge_incompatible(baked, copy_of, tmp_path, edit):
    hold = copy_of("holdout")
    _edit_metadata(hold, **edit)
    (key,) = edit
    with pytest.raises(MergeIncompatibleError, match=key):
        combine_split_datasets([baked["public"], hold], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_combine_reports_the_prepared_arrow_copies_as_a_phase(baked, tmp_path):
    events = []
    combine_split_datasets([baked["public"], baked["holdout"]], output_dir=tmp_path / "c", on_event=events.append)
    built = [(p.done, p.total) for e in events if (p := e.progress) is not None and p.what == "splits"
             and p.phase == "building the prepared Arrow copies"]
    assert built == [(0, 2), (1, 2), (2, 2)]


@pytest.mark.parametrize("value", [None, 5, b"x"])
def test_inputs_that_are_no_list_of_paths_are_a_type_error(tmp_path, value):
    from whestbench.dataset_io import merge_datasets

    with pytest.raises(TypeError, match="inputs .one per split. must be a list of dataset directories"):
        combine_split_datasets(value, output_dir=tmp_path / "out")
    with pytest.raises(TypeError, match="partials must be a list of dataset directories"):
        merge_datasets(value, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_prepare_arrow_refuses_a_prepared_directory_that_links_outside_the_dataset(combined, tmp_path):
    """A `prepared` symlink to a directory elsewhere had the copies built and renamed into that
    directory (its entries replaced): a write outside the dataset it was given. Refused before any work."""
    d = Path(shutil.copytree(combined, tmp_path / "copy"))
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(d / "prepared"), str(elsewhere))
    (d / "prepared").symlink_to(elsewhere)
    before = {p.relative_to(elsewhere): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    md = (d / "metadata.json").read_bytes()
    with pytest.raises(InputPathError, match="is a symlink .* remove the link"):
        prepare_arrow(d)
    assert {p.relative_to(elsewhere): p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in elsewhere.iterdir()) == ["holdout", "public"]  # no staging directory there
    assert (d / "metadata.json").read_bytes() == md
