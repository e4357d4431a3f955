"""One completion marker: ``plan_digest`` in metadata.json, and ``format.finished.completed``, the one
"is this output already this result?" test (marker plus checksums) that bake re-runs, merge and
combine re-runs and the recompute cache use; datasets without the marker are judged as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whestbench.bake.pipeline import BakeConfig, bake
from whestbench.bake.plan import Done, plan_bake
from whestbench.errors import OutputExistsError
from whestbench.format.finished import combined_marker, completed, finished_combine, finished_merge, merged_marker
from whestbench.format.schema import PLAN_DIGEST

from helpers.datasets import resign

SHAPE = dict(n_samples=2000, width=4, depth=2)


def _md(path: Path) -> dict:
    return json.loads((path / "metadata.json").read_text())


def _resign(path: Path, edit) -> None:
    """Edit metadata.json and bind fresh checksums to it, as a careful forger (or an old bake) would."""
    md = _md(path)
    edit(md)
    resign(path, md)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    from whestbench.assemble.combine import combine_split_datasets
    from whestbench.assemble.merge import merge_datasets

    root = tmp_path_factory.mktemp("finished")
    for name, kw in (("a", dict(n_mlps=2, seed=1)), ("p0", dict(n_mlps=4, seed=1, mlp_range=(0, 2))),
                     ("p1", dict(n_mlps=4, seed=1, mlp_range=(2, 4))),
                     ("h", dict(n_mlps=2, seed=2, split="holdout", config="holdout"))):
        bake(BakeConfig(output=root / name, **SHAPE, **kw))
    merge_datasets([root / "p0", root / "p1"], output_dir=root / "m")
    combine_split_datasets([root / "a", root / "h"], output_dir=root / "c", write_prepared_arrow=False)
    return root


def test_every_output_records_its_plans_marker(made):
    cfg = BakeConfig(output=made / "a", n_mlps=2, seed=1, **SHAPE)
    assert isinstance(plan_bake(cfg), Done)  # the plan of the very bake that wrote it finds it complete
    parts = [_md(made / "p0"), _md(made / "p1")]
    assert _md(made / "m")[PLAN_DIGEST] == merged_marker(parts[::-1]) != parts[0][PLAN_DIGEST]
    assert _md(made / "c")[PLAN_DIGEST] == combined_marker([_md(made / "a"), _md(made / "h")])
    assert len({_md(made / n)[PLAN_DIGEST] for n in ("a", "p0", "p1", "h", "m", "c")}) == 6


def test_the_marker_decides_not_the_facts(made, tmp_path):
    """An output with every fact of this bake but another plan's marker is not this result: refused."""
    import shutil

    out = tmp_path / "a"
    shutil.copytree(made / "a", out)
    _resign(out, lambda md: md.__setitem__(PLAN_DIGEST, "sha256:" + "0" * 64))
    with pytest.raises(OutputExistsError):
        bake(BakeConfig(output=out, n_mlps=2, seed=1, **SHAPE))
    assert completed(out, "sha256:" + "0" * 64, lambda md: False) is not None


def test_a_dataset_without_the_marker_is_judged_by_its_facts(made, tmp_path):
    """0.16 and earlier 0.17 outputs carry no marker: a re-run still finds them complete (bake, merge,
    combine), and one whose facts differ is still refused."""
    import shutil

    for name in ("a", "m", "c"):
        shutil.copytree(made / name, tmp_path / name)
        _resign(tmp_path / name, lambda md: md.pop(PLAN_DIGEST))
    assert bake(BakeConfig(output=tmp_path / "a", n_mlps=2, seed=1, **SHAPE)) == tmp_path / "a"
    with pytest.raises(OutputExistsError):
        bake(BakeConfig(output=tmp_path / "a", n_mlps=2, seed=3, **SHAPE))
    assert finished_merge([made / "p0", made / "p1"], tmp_path / "m") is not None
    assert finished_combine([made / "a", made / "h"], tmp_path / "c", default_split=None, prepared=False) is not None
    assert finished_combine([made / "a", made / "p0"], tmp_path / "c", default_split=None, prepared=False) is None


def test_a_marker_without_intact_files_is_not_complete(made, tmp_path):
    import shutil

    out = tmp_path / "m"
    shutil.copytree(made / "m", out)
    shard = next((out / "data").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes() + b"x")
    assert completed(out, _md(out)[PLAN_DIGEST], lambda md: True) is None
    assert finished_merge([made / "p0", made / "p1"], out) is None


def test_the_recompute_cache_reuses_only_an_entry_of_the_same_plan(made, tmp_path):
    """The cache entry is a bake: reused when it passes the bake's own completion test, baked again
    (its old files replaced) when its marker is another plan's."""
    from whestbench.verify.recompute import recompute

    from whestbench.compute.seeds import derived_seeds

    md, seeds = _md(made / "a"), derived_seeds(1, 2)
    entry = recompute(md, seeds[:1], device=None, root=tmp_path)
    first = (entry / "metadata.json").read_bytes()
    assert Path(recompute(md, seeds[:1], device=None, root=tmp_path)) == entry
    assert (entry / "metadata.json").read_bytes() == first  # reused, not baked again
    _resign(entry, lambda m: m.__setitem__(PLAN_DIGEST, "sha256:" + "1" * 64))
    assert Path(recompute(md, seeds[:1], device=None, root=tmp_path)) == entry
    assert _md(entry)[PLAN_DIGEST] == json.loads(first)[PLAN_DIGEST]  # baked again under its own plan
