"""verify with teeth: datasets edited after the bake, with their checksums re-written (as a careful
attacker, a buggy producer or a faulty GPU would leave them), fail with a reason naming the MLP,
layer and figure. Each case is one that an independent audit found passing before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from whestbench.compute.audit import chi2_cdf, chi2_quantile, chi2_ratio_bounds
from whestbench.compute.pcg64 import chunk_rows
from whestbench.bake.pipeline import api_config, bake
from whestbench.compute.estimation import Estimation
from whestbench.errors import InvalidDatasetError
from whestbench.verify.run import verify_dataset

WIDTH, DEPTH, N = 16, 3, 200_000


def create_dataset(n_mlps, n_samples, width, depth, *, output_path, mlp_seeds=None, seed=None, split="public",
                   config="default", mlp_range=None, estimator="plain", target_stderr=None, stderr_layer="last"):
    """``create_dataset`` with no audit trail: these tests measure the pilot checks' reach alone (the
    trail's checks catch most of these edits too: tests/verify/test_trail_verify.py)."""
    return bake(api_config(n_mlps, n_samples, width, depth, output_path=output_path, mlp_seeds=mlp_seeds, seed=seed,
                           split=split, config=config, mlp_range=mlp_range, audit_segments=0,
                           estimation=Estimation(estimator, target_stderr, stderr_layer)), complete_ok=False)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return create_dataset(n_mlps=6, n_samples=N, width=WIDTH, depth=DEPTH, seed=1,
                          output_path=tmp_path_factory.mktemp("teeth") / "plain")


@pytest.fixture(scope="module")
def cv(tmp_path_factory) -> Path:
    return create_dataset(n_mlps=6, n_samples=40 * chunk_rows(WIDTH), width=WIDTH, depth=DEPTH, seed=2,
                          estimator="control-variate", output_path=tmp_path_factory.mktemp("teeth") / "cv")


def checks(report) -> dict:
    return {c.name: c for c in report.checks}


def failed(report) -> dict:
    return {c.name: c.detail for c in report.checks if not c.ok}


def test_the_honest_bakes_pass(plain, cv):
    for ds in (plain, cv):
        report = verify_dataset(ds)
        assert report.ok, failed(report)
        names = checks(report)
        for name in ("layer means", "stderr size", "avg_variance", "breakdown"):
            assert name in names and not names[name].skipped


# --- means at every layer ---------------------------------------------------------------------


def test_a_final_mean_moved_by_400_standard_errors_fails(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        if i == 0:
            row["all_layer_means"][-1][0] += 0.3
            row["final_means"][0] += 0.3

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "moved", edit_row=edit)))
    assert set(bad) == {"layer means"}, bad
    assert "mlp_id 0 layer 3 neuron 0" in bad["layer means"] and "z = " in bad["layer means"]


@pytest.mark.parametrize("factor", [0.0, 1.5])
def test_a_whole_layer_2_zeroed_or_scaled_fails(plain, tmp_path, rewrite_dataset, factor):
    def edit(i, row):
        row["all_layer_means"][1] = [factor * v for v in row["all_layer_means"][1]]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "layer2", edit_row=edit)))
    assert "layer means" in bad and "layer 2" in bad["layer means"]


# --- standard errors in both directions --------------------------------------------------------


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.1, 0.01])
def test_control_variate_error_bars_scaled_down_fail(cv, tmp_path, rewrite_dataset, factor):
    def edit(i, row):
        row["all_layer_stderr"] = [[factor * v for v in layer] for layer in row["all_layer_stderr"]]

    bad = failed(verify_dataset(rewrite_dataset(cv, tmp_path / "cvscaled", edit_row=edit)))
    assert set(bad) == {"stderr size"}, bad
    assert "layer 2" in bad["stderr size"] or "layer 3" in bad["stderr size"]


@pytest.mark.parametrize("factor", [0.0, 100.0])
def test_one_late_mlps_deeper_error_bars_zeroed_or_inflated_fail(plain, tmp_path, rewrite_dataset, factor):
    def edit(i, row):
        if i == 5:
            row["all_layer_stderr"][1:] = [[factor * v for v in layer] for layer in row["all_layer_stderr"][1:]]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "late", edit_row=edit)))
    assert "stderr size" in bad and set(bad) <= {"stderr size", "avg_variance"}, bad  # final layer: both see it
    assert "mlp_id 5 layer 2" in bad["stderr size"]


@pytest.mark.parametrize("value", [0.0, 1e-9])
def test_a_single_neurons_error_bar_zeroed_fails(plain, tmp_path, rewrite_dataset, value):
    def edit(i, row):
        if i == 3:
            row["all_layer_stderr"][2][5] = value

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "one", edit_row=edit)))
    assert "stderr size" in bad and "mlp_id 3 layer 3 neuron 5" in bad["stderr size"]


def test_a_single_layer_1_error_bar_zeroed_fails(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        if i == 2:
            row["all_layer_stderr"][0][1] = 0.0

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "l1", edit_row=edit)))
    assert "mlp_id 2" in " ".join(bad.values())


# --- avg_variance and the breakdown -----------------------------------------------------------


def test_avg_variance_swapped_between_rows_fails(plain, tmp_path, rewrite_dataset):
    values = {}

    def collect(i, row):
        values[i] = row["avg_variance"]

    rewrite_dataset(plain, tmp_path / "read", edit_row=collect)

    def edit(i, row):
        if i in (1, 2):
            row["avg_variance"] = values[3 - i]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "swap", edit_row=edit)))
    assert set(bad) == {"avg_variance"}, bad
    assert "mlp_id 1" in bad["avg_variance"] and "mean_j(stderr_j²·(N−1))" in bad["avg_variance"]


@pytest.mark.parametrize("which", ["plain", "cv"])
def test_avg_variance_set_to_5_fails(plain, cv, tmp_path, rewrite_dataset, which):
    def edit(i, row):
        if i == 4:
            row["avg_variance"] = 5.0

    bad = failed(verify_dataset(rewrite_dataset({"plain": plain, "cv": cv}[which], tmp_path / "five", edit_row=edit)))
    assert set(bad) == {"avg_variance"}, bad
    assert "mlp_id 4" in bad["avg_variance"]


def test_a_breakdown_that_is_not_json_fails(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        if i == 2:
            row["sampling_budget_breakdown"] = "not json"

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "bd", edit_row=edit)))
    assert set(bad) == {"breakdown"}, bad
    assert "mlp_id 2" in bad["breakdown"] and "not JSON" in bad["breakdown"]


# --- one metadata validator -------------------------------------------------------------------


@pytest.mark.parametrize("update, words", [
    ({"format": "evil"}, "format 'evil'"),
    ({"sampler": {"name": "mt19937", "version": "1", "block_size": 16384}}, "sampler 'mt19937'"),
    ({"sampler": {"name": "pcg64", "version": "1", "block_size": 0}}, "block_size 0"),
    ({"width": 16.0}, "width 16.0"),
    ({"estimator": {"name": "magic", "version": "1"}}, "estimator 'magic'"),
    ({"target_stderr": {"value": -1, "layer": "last"}}, "target_stderr"),
])
def test_metadata_every_reader_refuses_with_the_same_words(plain, tmp_path, rewrite_dataset, update, words):
    import whestbench
    from whestbench.hub.push import plan_push
    from whestbench.assemble.merge import merge_datasets

    bad = tmp_path / "bad"
    shutil.copytree(plain, bad)
    md = json.loads((bad / "metadata.json").read_text())
    md.update(update)
    (bad / "metadata.json").write_text(json.dumps(md))
    report = verify_dataset(bad)
    detail = failed(report)["metadata"]
    assert words in detail
    messages = {detail.removesuffix(" (no further checks possible)")}
    for call in (lambda: whestbench.load_dataset(str(bad)), lambda: plan_push(bad, "org/name"),
                 lambda: merge_datasets([bad], output_dir=tmp_path / "m")):
        with pytest.raises(InvalidDatasetError) as e:
            call()
        assert words in str(e.value)
        messages.add(str(e.value).split(": ", 1)[-1] if str(e.value).startswith(str(bad)) else str(e.value))
    assert not (tmp_path / "m").exists()


# --- --against compares every numeric column --------------------------------------------------


@pytest.mark.parametrize("factor", [0.0, 0.5])
def test_against_compares_standard_errors(plain, tmp_path, rewrite_dataset, factor):
    def edit(i, row):
        row["all_layer_stderr"] = [[factor * v for v in layer] for layer in row["all_layer_stderr"]]

    edited = rewrite_dataset(plain, tmp_path / "se", edit_row=edit)
    bad = failed(verify_dataset(edited, against=plain))
    assert "against: standard errors" in bad and "layer 1" in bad["against: standard errors"]
    assert checks(verify_dataset(plain, against=plain))["against: standard errors"].ok


# --- merge refuses a damaged partial ----------------------------------------------------------


def test_merge_refuses_a_partial_with_a_moved_mean_naming_it(tmp_path, rewrite_dataset):
    from whestbench.assemble.merge import merge_datasets

    seeds = list(range(101, 105))
    parts = [create_dataset(n_mlps=4, n_samples=N, width=WIDTH, depth=DEPTH, mlp_seeds=seeds, mlp_range=r,
                            output_path=tmp_path / f"p{k}") for k, r in enumerate([(0, 2), (2, 4)])]

    def edit(i, row):
        row["all_layer_means"][1][3] += 0.5

    md = json.loads((parts[1] / "metadata.json").read_text())
    damaged = tmp_path / "p1-edited"
    _rewrite_partial(parts[1], damaged, edit, md)
    with pytest.raises(InvalidDatasetError) as e:
        merge_datasets([parts[0], damaged], output_dir=tmp_path / "merged")
    assert "p1-edited" in str(e.value) and "layer means" in str(e.value) and "layer 2 neuron 3" in str(e.value)
    assert not (tmp_path / "merged").exists()
    merge_datasets(parts, output_dir=tmp_path / "merged-ok")


def _rewrite_partial(src: Path, dst: Path, edit, md: dict) -> None:
    import pyarrow.parquet as pq

    from whestbench.format.reader import data_files
    from whestbench.format.writer import write_dataset

    md = dict(md)
    md.pop("checksums", None)
    rows = pq.read_table(data_files(src, md["split"])[0]).to_pylist()
    for i, row in enumerate(rows):
        edit(i, row)
    write_dataset(dst, md["split"], rows, len(rows), md["width"], md["depth"], md)


# --- the bounds themselves --------------------------------------------------------------------


def test_chi2_quantiles_are_exact():
    # reference values (R: qchisq)
    assert chi2_quantile(0.5, 1) == pytest.approx(0.4549364, rel=1e-6)
    assert chi2_quantile(0.975, 10) == pytest.approx(20.48318, rel=1e-6)
    assert chi2_quantile(1e-6, 31) == pytest.approx(6.6194883035, rel=1e-9)  # mpmath
    for k in (1, 4, 31, 500):
        for p in (1e-8, 0.01, 0.5, 0.99):
            assert chi2_cdf(chi2_quantile(p, k), k) == pytest.approx(p, rel=1e-8)
    lo, hi = chi2_ratio_bounds(100_000, 1e-6)
    assert 0.97 < lo < 1 < hi < 1.03


def test_honest_bakes_do_not_false_alarm_over_seeds_and_shapes(tmp_path):
    """Forty honest bakes: widths 1 to 64, depths 1 to 5, both estimators, N 1e4 to 3e5."""
    shapes = [(1, 3), (2, 4), (5, 2), (8, 5), (16, 1), (37, 3), (64, 2), (3, 4)]
    k = 0
    for width, depth in shapes:
        for estimator, n in (("plain", 10_000), ("plain", 300_000), ("control-variate", 40 * chunk_rows(width))):
            if estimator == "control-variate" and width * depth > 100:
                continue
            k += 1
            ds = create_dataset(n_mlps=3, n_samples=n, width=width, depth=depth, seed=1000 + k, estimator=estimator,
                                output_path=tmp_path / f"h{k}")
            report = verify_dataset(ds)
            assert report.ok, (width, depth, estimator, n, failed(report))
            shutil.rmtree(ds)
    assert k >= 20


# --- --recompute ------------------------------------------------------------------------------


def test_recompute_is_bit_identical_on_an_honest_bake_and_reuses_its_work(plain, tmp_path):
    report = verify_dataset(plain, recompute=2, recompute_seed=1, recompute_root=tmp_path / "rc")
    c = checks(report)
    assert report.ok, failed(report)
    assert "mlp_id" in c["recompute"].detail and "bit-identical" in c["recompute: ground truth"].detail
    assert c["recompute: standard errors"].detail.startswith("bit-identical")
    (done,) = list((tmp_path / "rc").iterdir())
    stamp = (done / "metadata.json").stat().st_mtime_ns
    assert verify_dataset(plain, recompute=2, recompute_seed=1, recompute_root=tmp_path / "rc").ok
    assert (done / "metadata.json").stat().st_mtime_ns == stamp  # reused, not baked again


def test_recompute_sees_a_five_standard_error_shift_that_the_pilot_cannot(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        se = row["all_layer_stderr"][2][4]
        row["all_layer_means"][2][4] += 5 * se
        row["final_means"][4] = row["all_layer_means"][2][4]

    shifted = rewrite_dataset(plain, tmp_path / "shift5", edit_row=edit)
    assert verify_dataset(shifted).ok  # 5 standard errors at N = 2e5: below any pilot's resolution
    bad = failed(verify_dataset(shifted, recompute=1, recompute_root=tmp_path / "rc"))
    assert "recompute: ground truth" in bad and "NOT bit-identical" in bad["recompute: ground truth"]


def test_recompute_of_a_philox_bake_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    from whestbench.dataset_torch import create_dataset_torch

    ds = create_dataset_torch(n_mlps=3, n_samples=20_000, width=8, depth=2, seed=5, device="cpu",
                              output_path=tmp_path / "philox")
    report = verify_dataset(ds, recompute=1, device="cpu", recompute_root=tmp_path / "rc")
    assert report.ok, failed(report)
    assert "torch on cpu" in checks(report)["recompute"].detail


def test_recompute_refuses_a_device_for_a_pcg64_dataset_before_any_check(plain):
    from whestbench.errors import UsageError

    with pytest.raises(UsageError, match="philox datasets only"):
        verify_dataset(plain, recompute=1, device="cuda", on_check=lambda c: pytest.fail("a check ran"))
    with pytest.raises(UsageError, match="--device applies to --recompute and --spot-check only"):
        verify_dataset(plain, device="cpu")


def test_error_bars_understated_three_times_fail_even_for_few_mlps(plain, tmp_path, rewrite_dataset):
    """--against's mean z² bound is loose for 3 MLPs (neurons of an MLP are correlated), but the
    stored error bars are held to the pilot per MLP and layer: a 3x understatement fails verify."""
    def edit(i, row):
        row["all_layer_stderr"] = [[v / 3 for v in layer] for layer in row["all_layer_stderr"]]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "third", edit_row=edit), n_check=3))
    assert "stderr size" in bad


def test_combine_splits_refuses_a_damaged_input_naming_it(plain, tmp_path, rewrite_dataset):
    from whestbench.dataset_io import combine_split_datasets

    def edit(i, row):
        if i == 1:
            row["avg_variance"] = 5.0

    damaged = rewrite_dataset(plain, tmp_path / "damaged", edit_row=edit)
    holdout = create_dataset(n_mlps=2, n_samples=N, width=WIDTH, depth=DEPTH, seed=99, split="holdout",
                             config="holdout", output_path=tmp_path / "holdout")
    with pytest.raises(InvalidDatasetError) as e:
        combine_split_datasets([damaged, holdout], output_dir=tmp_path / "eval", write_prepared_arrow=False)
    assert "damaged fails verify: avg_variance: mlp_id 1" in str(e.value)
    assert not (tmp_path / "eval").exists()


def test_the_cli_prints_the_sample_and_exits_1_on_damage(plain, tmp_path, rewrite_dataset):
    from whestbench.cli import main

    assert main(["dataset", "verify", str(plain), "--sample-mlps", "2", "--sample-seed", "4"]) == 0

    def edit(i, row):
        row["all_layer_means"][1] = [0.0 for _ in row["all_layer_means"][1]]

    bad = rewrite_dataset(plain, tmp_path / "zero", edit_row=edit)
    assert main(["dataset", "verify", str(bad)]) == 1
    assert main(["dataset", "verify", str(plain), "--sample-mlps", "0"]) == 2


def test_against_a_bake_of_other_samples_holds_its_error_bars_too(plain, tmp_path, rewrite_dataset):
    """Statistical mode (another sampler): neither side's error bars may be scaled to pass the z-test."""
    pytest.importorskip("torch")
    from whestbench.format.reader import read_metadata
    from whestbench.dataset_torch import create_dataset_torch

    import pyarrow.parquet as pq

    seeds = pq.read_table(next((plain / "data").glob("*.parquet")), columns=["mlp_seed"]).column(0).to_pylist()
    other = create_dataset_torch(n_mlps=6, n_samples=N, width=WIDTH, depth=DEPTH, mlp_seeds=seeds, device="cpu",
                                 output_path=tmp_path / "philox")
    assert read_metadata(other)["sampler"]["name"] == "philox"
    ok = checks(verify_dataset(plain, against=other))
    assert ok["against: ground truth"].ok and ok["against: standard errors"].ok, ok["against: standard errors"].detail

    def inflate(i, row):
        row["all_layer_stderr"] = [[10 * v for v in layer] for layer in row["all_layer_stderr"]]

    bad = failed(verify_dataset(plain, against=rewrite_dataset(other, tmp_path / "inflated", edit_row=inflate)))
    assert "stderr·√N is 0.1x" in bad["against: standard errors"]


@pytest.mark.parametrize("how", ["reversed", "dropped"])
def test_rows_reordered_or_dropped_with_the_counts_edited_fail(plain, tmp_path, how):
    import pyarrow.parquet as pq

    from whestbench.format.reader import data_files
    from whestbench.format.writer import write_dataset

    md = json.loads((plain / "metadata.json").read_text())
    md.pop("checksums", None)
    rows = pq.read_table(data_files(plain, "public")[0]).to_pylist()
    rows = rows[::-1] if how == "reversed" else rows[:-1]
    for k, row in enumerate(rows):
        row["mlp_id"] = k
    md["n_mlps"] = len(rows)
    out = write_dataset(tmp_path / how, "public", rows, len(rows), WIDTH, DEPTH, md)
    bad = failed(verify_dataset(out))
    assert "seed list" in bad and "seed_list_digest" in bad["seed list"], bad


def test_recompute_does_not_trust_a_damaged_cache_and_skips_a_damaged_dataset(plain, tmp_path, rewrite_dataset):
    import pyarrow.parquet as pq

    root = tmp_path / "rc"
    assert verify_dataset(plain, recompute=1, recompute_root=root).ok
    (cached,) = list(root.iterdir())
    shard = next((cached / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.slice(0, 1), shard)  # the cache edited, its checksums not re-written
    assert verify_dataset(plain, recompute=1, recompute_root=root).ok  # baked again, not trusted
    assert next((cached / "data").glob("*.parquet")).stat().st_size > 0

    def edit(i, row):
        row["avg_variance"] = 5.0

    report = verify_dataset(rewrite_dataset(plain, tmp_path / "bad", edit_row=edit), recompute=1,
                            recompute_root=tmp_path / "rc2")
    assert checks(report)["recompute"].skipped and "avg_variance" in checks(report)["recompute"].detail
    assert not (tmp_path / "rc2").exists()


def test_a_shift_of_a_few_standard_errors_on_every_mean_fails(plain, tmp_path, rewrite_dataset):
    """No single neuron's z passes its limit, but their signed average does: per MLP and layer against
    the pilot (≈13 stored standard errors on layers 2-3), and layer 1 against its exact value (+2)."""
    def deep(i, row):
        for layer in (1, 2):
            row["all_layer_means"][layer] = [m + 0.03 * s * N**0.5 for m, s in
                                             zip(row["all_layer_means"][layer], row["all_layer_stderr"][layer])]
        row["final_means"] = row["all_layer_means"][2]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "deep", edit_row=deep)))
    assert "layer means" in bad and "pilot standard errors off on average" in bad["layer means"]

    def first(i, row):
        row["all_layer_means"][0] = [m + 2 * s for m, s in zip(row["all_layer_means"][0], row["all_layer_stderr"][0])]

    bad = failed(verify_dataset(rewrite_dataset(plain, tmp_path / "first", edit_row=first)))
    assert "layer-1 means" in bad and "signed" in bad["layer-1 means"]


def test_against_a_bake_of_other_samples_sees_a_common_shift(plain, tmp_path, rewrite_dataset):
    pytest.importorskip("torch")
    import pyarrow.parquet as pq

    from whestbench.dataset_torch import create_dataset_torch

    seeds = pq.read_table(next((plain / "data").glob("*.parquet")), columns=["mlp_seed"]).column(0).to_pylist()
    other = create_dataset_torch(n_mlps=6, n_samples=N, width=WIDTH, depth=DEPTH, mlp_seeds=seeds, device="cpu",
                                 output_path=tmp_path / "philox")

    def shift(i, row):
        for layer in (1, 2):
            row["all_layer_means"][layer] = [m + 4 * s for m, s in
                                             zip(row["all_layer_means"][layer], row["all_layer_stderr"][layer])]
        row["final_means"] = row["all_layer_means"][2]

    shifted = rewrite_dataset(plain, tmp_path / "shift4", edit_row=shift)
    gt = checks(verify_dataset(shifted, against=other))["against: ground truth"]
    assert not gt.ok and "signed mean per layer" in gt.detail
    assert checks(verify_dataset(plain, against=other))["against: ground truth"].ok


def test_control_variate_error_bars_inflated_on_the_whole_fail(cv, tmp_path, rewrite_dataset):
    def edit(i, row):
        row["all_layer_stderr"][1:] = [[1.3 * v for v in layer] for layer in row["all_layer_stderr"][1:]]

    bad = failed(verify_dataset(rewrite_dataset(cv, tmp_path / "x13", edit_row=edit)))
    assert "stderr size" in bad and "overstated" in bad["stderr size"], bad


def test_a_dead_neurons_mean_set_high_fails(tmp_path, rewrite_dataset):
    """A neuron the pilot (almost) never activates has no usable z-score; its mean is still bounded by
    what its dense pre-activation allows."""
    from whestbench.compute.audit import pilot_moments
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.seeds import derived_seeds

    ds = create_dataset(n_mlps=8, n_samples=N, width=4, depth=8, seed=900, output_path=tmp_path / "deep4")
    seeds = derived_seeds(900, 8)
    target = None
    for k, seed in enumerate(seeds):
        pm = pilot_moments(weights_for_seed(seed, 4, 8), seed)
        quiet = np.argwhere(pm.active[1:] < 64)
        if len(quiet):
            target = (k, int(quiet[0][0]) + 1, int(quiet[0][1]))
            break
    assert target is not None
    k, layer, j = target

    def edit(i, row):
        if i == k:
            row["all_layer_means"][layer][j] = 0.5
            row["final_means"] = row["all_layer_means"][-1]

    bad = failed(verify_dataset(rewrite_dataset(ds, tmp_path / "dead", edit_row=edit)))
    assert "layer means" in bad and f"layer {layer + 1} neuron {j}" in bad["layer means"], bad
    assert verify_dataset(ds).ok


def test_merge_refuses_a_partial_whose_name_suffix_was_edited(tmp_path):
    from whestbench.assemble.merge import merge_datasets

    seeds = list(range(201, 205))
    parts = [create_dataset(n_mlps=4, n_samples=20_000, width=WIDTH, depth=DEPTH, mlp_seeds=seeds, mlp_range=r,
                            output_path=tmp_path / f"p{k}") for k, r in enumerate([(0, 2), (2, 4)])]
    md = json.loads((parts[1] / "metadata.json").read_text())

    def edit(i, row):
        if i == 0:
            row["mlp_name"] += "-2"

    damaged = tmp_path / "p1-named"
    _rewrite_partial(parts[1], damaged, edit, md)
    assert verify_dataset(damaged).ok  # a partial cannot check its uniqueness suffixes
    with pytest.raises(InvalidDatasetError, match="mlp_name of MLP 2"):
        merge_datasets([parts[0], damaged], output_dir=tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_push_refuses_a_target_bake_without_its_sample_count_column(tmp_path):
    """Issue 21's case: a target_stderr block, no n_samples_used column: refused before any network call."""
    import pyarrow.parquet as pq

    from whestbench.hub.push import plan_push
    from whestbench.format.reader import data_files
    from whestbench.format.writer import write_dataset

    src = create_dataset(n_mlps=2, n_samples=100_000, width=8, depth=2, seed=3, target_stderr=5e-3,
                         output_path=tmp_path / "target")
    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    target = md.pop("target_stderr")
    rows = pq.read_table(data_files(src, "public")[0]).drop_columns(["n_samples_used"]).to_pylist()
    out = write_dataset(tmp_path / "cut", "public", rows, len(rows), 8, 2, md)
    edited = json.loads((out / "metadata.json").read_text())
    edited["target_stderr"] = target
    (out / "metadata.json").write_text(json.dumps(edited))
    with pytest.raises(InvalidDatasetError, match="n_samples_used"):
        plan_push(out, "org/name")
    plan_push(src, "org/name")  # the honest one is planned


# --- prepared Arrow copies --------------------------------------------------------------------


def test_a_resigned_prepared_copy_that_differs_from_its_rows_fails_verify(plain, tmp_path, damage_prepared):
    from whestbench.dataset_io import combine_split_datasets

    holdout = create_dataset(n_mlps=2, n_samples=N, width=WIDTH, depth=DEPTH, seed=99, split="holdout",
                             config="holdout", output_path=tmp_path / "holdout")
    comb = Path(combine_split_datasets([plain, holdout], output_dir=tmp_path / "comb"))
    honest = checks(verify_dataset(comb, n_check=1))
    assert honest["holdout: prepared"].ok and "2 rows, 9 columns bit-identical" in honest["holdout: prepared"].detail
    assert honest["public: prepared"].ok
    damage_prepared(comb, "holdout", resign=True)
    report = verify_dataset(comb, n_check=1)
    assert checks(report)["checksums"].ok  # re-signed: only the comparison sees it
    bad = checks(report)["holdout: prepared"]
    assert bad.ok is False and "column all_layer_means, row 0" in bad.detail
    assert "prepare-arrow" in bad.detail and not report.ok


# --- the pilot's resolution, stated on the OK line --------------------------------------------


@pytest.fixture(scope="module")
def million(tmp_path_factory) -> Path:
    return create_dataset(n_mlps=2, n_samples=1_000_000, width=8, depth=3, seed=5,
                          output_path=tmp_path_factory.mktemp("resolution") / "honest")


@pytest.mark.parametrize("factor, caught", [(0.5, False), (2.0, True)])
def test_ok_line_states_the_pilots_resolution(million, tmp_path, rewrite_dataset, factor, caught):
    """At N = 10⁶ the stated figure is honest: one neuron moved by half of it (in its own stored standard
    errors) passes verify, moved by twice it fails `layer means` (the plan: ≈ 65 at N = 10⁶)."""
    import re

    report = verify_dataset(million)
    assert report.ok, failed(report)
    m = re.fullmatch(r"a single-neuron error below ~([\d,.]+) standard errors is invisible to the pilot at "
                     r"N=1,000,000; --recompute K checks it", report.blind_spot)
    figure = float(m.group(1).replace(",", ""))
    assert 40 < figure < 90

    def edit(i, row):
        if i == 1:
            row["all_layer_means"][1][3] += factor * figure * row["all_layer_stderr"][1][3]

    bad = failed(verify_dataset(rewrite_dataset(million, tmp_path / "moved", edit_row=edit)))
    assert ("layer means" in bad) is caught, bad
    if caught:
        assert "mlp_id 1 layer 2 neuron 3" in bad["layer means"]
