"""verify_dataset: integrity checks, the layer-1 statistical check, and the comparison with another bake."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from whestbench.bake.pipeline import create_dataset
from whestbench.compute.audit import bonferroni_z, chi2_mean_limit
from whestbench.verify.run import verify_dataset
from whestbench.errors import UsageError

from helpers.datasets import SMALL, tampered_copy

WIDTH, DEPTH, N = SMALL["width"], SMALL["depth"], SMALL["n_samples"]  # conftest's small_bake


@pytest.fixture
def baked(small_bake) -> Path:
    return small_bake


def by_name(report):
    return {c.name: c for c in report.checks}


def layer1_se(row) -> np.ndarray:
    """Per-neuron standard error of a layer-1 mean: sqrt(Var relu / N), Var relu = s²(1/2 - 1/2π)."""
    w1 = np.asarray(row["weights"][0], dtype=np.float64)  # (in, out)
    s = np.sqrt((w1**2).sum(axis=0))
    return s * math.sqrt((0.5 - 1 / (2 * math.pi)) / N)


# --- integrity ------------------------------------------------------------------------------


def test_a_fresh_bake_passes_every_check(baked):
    report = verify_dataset(baked)
    assert report.ok, [c for c in report.checks if not c.ok]
    names = [c.name for c in report.checks]
    for expected in ("metadata", "checksums", "schema", "mlp_id", "mlp_seed", "mlp_name", "weights",
                     "finite", "final_means", "layer-1 means", "avg_variance"):
        assert expected in names
    assert not any(c.skipped for c in report.checks)


@pytest.mark.parametrize("name", ["full-w64-d4", "merged-w64-d4", "combined-w64-d4", "full-w256-d8"])
def test_whestbench_016_golden_datasets_pass_with_checksums_skipped(golden_dir, name):
    report = verify_dataset(golden_dir / name)
    assert report.ok, [c for c in report.checks if not c.ok]
    checksums = by_name(report)["checksums"]
    assert checksums.skipped and "no checksums" in checksums.detail


def test_a_multi_split_dataset_is_checked_split_by_split(golden_dir):
    report = verify_dataset(golden_dir / "combined-w64-d4")
    checks = by_name(report)
    assert checks["public: weights"].ok and checks["holdout: weights"].ok
    assert "9 MLP(s)" in checks["layer-1 means"].detail


def test_a_partial_passes_and_says_it_is_partial(golden_dir):
    report = verify_dataset(golden_dir / "part-1-of-3")
    checks = by_name(report)
    assert report.ok
    assert "PARTIAL" in checks["metadata"].detail and "[2, 4) of 6" in checks["metadata"].detail
    assert "mlp_id 2..3" in checks["mlp_id"].detail
    assert "partial" in checks["mlp_name"].detail  # suffixes need the whole seed list


def test_a_changed_weight_is_caught_by_rederivation_alone(baked, tmp_path, rewrite_dataset):
    def bump(i, row):
        if i == 1:
            row["weights"][2][3][4] += 1e-3

    bad = rewrite_dataset(baked, tmp_path / "bad", edit_row=bump)
    checks = by_name(verify_dataset(bad))
    assert checks["checksums"].ok and checks["schema"].ok  # checksums were fixed up
    assert not checks["weights"].ok
    assert "mlp_id 1" in checks["weights"].detail and "weights[2][3][4]" in checks["weights"].detail


def test_a_layer1_mean_ten_standard_errors_off_fails_the_statistical_check(baked, tmp_path, rewrite_dataset):
    def shift(i, row):
        if i == 0:
            row["all_layer_means"][0][5] += float(10 * layer1_se(row)[5])

    bad = rewrite_dataset(baked, tmp_path / "shifted", edit_row=shift)
    report = verify_dataset(bad)
    checks = by_name(report)
    assert checks["weights"].ok and checks["finite"].ok  # integrity cannot see it
    assert not checks["layer-1 means"].ok
    assert "mlp_id 0 neuron 5" in checks["layer-1 means"].detail


def test_flipped_bytes_fail_the_checksum_without_raising(baked, tmp_path):
    copy, shard = tampered_copy(baked, tmp_path / "flipped")
    report = verify_dataset(copy)
    assert not report.ok
    checksums = by_name(report)["checksums"]
    assert not checksums.ok and "MISMATCH" in checksums.detail and shard.name in checksums.detail


def test_checksums_a_0162_merge_carried_over_are_skipped_as_another_programs(baked, tmp_path, as_0162_merge):
    partial = create_dataset(n_mlps=3, n_samples=N, width=WIDTH, depth=DEPTH, seed=1, output_path=tmp_path / "p",
                             mlp_range=(0, 1))
    as_0162_merge(partial, baked)  # the first partial's checksums, the whole bake's rows
    report = verify_dataset(partial)
    assert report.ok, [c for c in report.checks if not c.ok]
    checksums = by_name(report)["checksums"]
    assert checksums.skipped and "stale, written by another program" in checksums.detail


def test_a_metadata_fact_edited_after_the_bake_fails_the_checksum_check(baked, tmp_path):
    copy = Path(shutil.copytree(baked, tmp_path / "edited"))
    md = json.loads((copy / "metadata.json").read_text()) | {"n_samples": N * 2}
    (copy / "metadata.json").write_text(json.dumps(md, indent=2))
    checksums = by_name(verify_dataset(copy))["checksums"]
    assert not checksums.ok and f"says n_samples={2 * N} but its checksums were written for n_samples={N}" in checksums.detail


def test_final_means_must_equal_the_last_layer(baked, tmp_path, rewrite_dataset):
    def edit(i, row):
        if i == 2:
            row["final_means"][0] += 0.5

    checks = by_name(verify_dataset(rewrite_dataset(baked, tmp_path / "final", edit_row=edit)))
    assert not checks["final_means"].ok and "mlp_id 2" in checks["final_means"].detail


def test_mlp_ids_must_be_the_declared_range(baked, tmp_path, rewrite_dataset):
    def edit(i, row):
        row["mlp_id"] = i + 1

    checks = by_name(verify_dataset(rewrite_dataset(baked, tmp_path / "ids", edit_row=edit)))
    assert not checks["mlp_id"].ok and "[0, 3)" in checks["mlp_id"].detail


def test_missing_metadata_is_a_failed_check_not_an_exception(tmp_path):
    (tmp_path / "data").mkdir()
    report = verify_dataset(tmp_path)
    assert not report.ok and report.checks[0].name == "metadata"


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        verify_dataset(tmp_path / "nope")


@pytest.mark.parametrize("kw", [dict(n_check=0), dict(sample_mlps=True), dict(recompute=-1), dict(n_check=2.0)])
def test_counts_that_are_not_positive_ints_are_usage_errors(tmp_path, kw):
    flag, value = "--" + next(iter(kw)).replace("_", "-"), next(iter(kw.values()))
    with pytest.raises(UsageError, match="^" + re.escape(f"{flag} must be a positive integer; got {value!r}. Pass {flag} 1 or "
                                                   "more.") + "$"):
        verify_dataset(tmp_path, **kw)


def test_n_check_limits_the_statistical_check(baked):
    checks = by_name(verify_dataset(baked, n_check=1))
    assert "1 MLP(s) x 16 neurons (first 1)" in checks["layer-1 means"].detail


def test_thresholds_follow_bonferroni_and_chi_square():
    # Two-sided p = 1e-6 / 48 per neuron.
    assert bonferroni_z(48) == pytest.approx(5.605, abs=1e-3)
    assert bonferroni_z(10**6) > bonferroni_z(10**4) > bonferroni_z(48)
    # chi²_k/k at 1 - 1e-6 (Wilson-Hilferty): conservative against the exact chi²_3 value 30.66/3.
    assert 30.66 / 3 < chi2_mean_limit(3) < 11.5
    assert chi2_mean_limit(1000) == pytest.approx(1.227, abs=1e-3)


@pytest.mark.parametrize("damage", ["deleted", "holdout config dropped", "config renamed"])
def test_a_missing_or_edited_card_configs_block_fails_verify(golden_dir, tmp_path, damage):
    """The card decides what plain `datasets` loads: a combined dataset without README.md, or whose
    configs block lost or renamed the holdout config, fails `card`, naming the config that fails."""
    import yaml

    d = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "comb"))
    assert by_name(verify_dataset(d, n_check=1))["card"].ok
    card = d / "README.md"
    if damage == "deleted":
        card.unlink()
    else:
        _, head, body = card.read_text().split("---\n", 2)
        front = yaml.safe_load(head)
        if damage == "config renamed":
            front["configs"][1]["config_name"] = "hold"
        else:
            del front["configs"][1]
        card.write_text("---\n" + yaml.safe_dump(front) + "---\n" + body)
    report = verify_dataset(d, n_check=1)
    check = by_name(report)["card"]
    assert check.ok is False and not report.ok
    assert "holdout" in check.detail and "re-run" in check.detail
    assert [c.name for c in report.failures] == ["card"]


def test_verify_reports_its_pilots_progress(tmp_path):
    """The per-MLP pilots are the long part of a verify (issue 28): ``on_event`` hears them."""
    from whestbench.bake.pipeline import create_dataset as bake_small
    from whestbench.verify.run import verify_dataset as verify

    out = bake_small(3, 300, 4, 2, seed=2, output_path=tmp_path / "ds")
    events = []
    assert verify(out, on_event=events.append).ok
    mlps = [e.progress for e in events if e.progress is not None and e.progress.what == "MLPs"]
    assert [(p.done, p.total) for p in mlps] == [(0, 3), (1, 3), (2, 3), (3, 3)]
