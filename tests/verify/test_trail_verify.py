"""verify's audit-trail checks (verify/trail.py): honest bakes pass; damage re-signed with fresh checksums
(inflated N, error bars scaled on one MLP, a shifted mean, an edited segment) fails the exact check; a
device fault in the second half of one MLP's bake fails the drift check."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.bake.pipeline import BakeConfig, bake, create_dataset
from whestbench.compute.mlp import weights_for_seed
from whestbench.verify.run import verify_dataset

from helpers.device_faults import scaled_weights


SHAPE = dict(n_samples=200_000, width=8, depth=3)
SEEDS = [11, 22, 33]


def _verdict(path, name="trail"):
    report = verify_dataset(path)
    return report.get(name), report


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return create_dataset(3, mlp_seeds=SEEDS, output_path=tmp_path_factory.mktemp("p") / "ds", **SHAPE)


@pytest.fixture(scope="module")
def cv(tmp_path_factory):
    return create_dataset(3, mlp_seeds=SEEDS, output_path=tmp_path_factory.mktemp("c") / "ds",
                          estimator="control-variate", **SHAPE)


def test_honest_trails_pass(plain, cv):
    for ds in (plain, cv):
        check, report = _verdict(ds)
        assert check.ok and not check.skipped, check.detail
        drift = report.get("trail drift")
        assert drift.ok and not drift.skipped, drift.detail
        assert not report.failures, [c.detail for c in report.failures]


def test_honest_philox_trail_passes(tmp_path):
    cfg = BakeConfig(n_mlps=2, mlp_seeds=(5, 6), output=tmp_path / "ds", backend="torch", device="cpu",
                     audit_segments=8, skip_device_check=True, n_samples=5 * 4096 * 16 + 1000, width=8, depth=2)
    bake(cfg)
    md = json.loads((tmp_path / "ds" / "metadata.json").read_text())
    assert md["audit"]["aligned"] and "audit/public.parquet" in md["checksums"]
    check, report = _verdict(tmp_path / "ds")
    assert check.ok and not check.skipped, check.detail
    assert not report.failures, [c.detail for c in report.failures]


def test_n_samples_inflated_fails_trail(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        row["all_layer_stderr"] = (np.asarray(row["all_layer_stderr"], dtype=np.float32) / np.sqrt(2)).tolist()

    md = json.loads((plain / "metadata.json").read_text())
    command = md["bake_command"].replace(f"--n-samples {SHAPE['n_samples']}", f"--n-samples {2 * SHAPE['n_samples']}")
    assert command != md["bake_command"]
    for update, said in (({}, "bake_command says --n-samples 200000, the metadata 400000"),  # the command left alone
                         ({"bake_command": command}, "segments cover [0, 200,000), not the [0, 400,000)")):  # both edited
        bad = rewrite_dataset(plain, tmp_path / f"bad{len(update)}", edit_row=edit,
                              md_update={"n_samples": 2 * SHAPE["n_samples"], **update})
        check, report = _verdict(bad, "trail contract")
        assert not check.ok and said in check.detail, check.detail


@pytest.mark.parametrize("scale", [0.8, 1.25])
@pytest.mark.parametrize("which", ["plain", "cv"])
def test_stderr_scaled_one_mlp_fails_trail(plain, cv, tmp_path, rewrite_dataset, scale, which):
    src = plain if which == "plain" else cv

    def edit(i, row):
        if i == 1:
            row["all_layer_stderr"] = (np.asarray(row["all_layer_stderr"], dtype=np.float32) * np.float32(scale)).tolist()

    check, _ = _verdict(rewrite_dataset(src, tmp_path / "bad", edit_row=edit))
    assert not check.ok and "mlp_id 1" in check.detail and "standard error" in check.detail, check.detail


def test_mean_shifted_20_se_one_neuron_fails_trail(plain, tmp_path, rewrite_dataset):
    def edit(i, row):
        if i == 2:
            m = np.array(row["all_layer_means"], dtype=np.float32)
            se = np.array(row["all_layer_stderr"], dtype=np.float32)
            m[1, 3] += 20 * se[1, 3]
            row["all_layer_means"] = m.tolist()

    check, _ = _verdict(rewrite_dataset(plain, tmp_path / "bad", edit_row=edit))
    assert not check.ok and "mlp_id 2: layer 2 neuron 3: stored mean" in check.detail, check.detail


def test_trail_segment_edited_fails(plain, tmp_path, rewrite_dataset):
    t = pq.read_table(plain / "audit" / "public.parquet")
    means = np.array(t.column("means").to_pylist(), dtype=np.float32)
    means[4, 5] *= np.float32(1.01)  # one segment of mlp 0, one value
    col = pa.FixedSizeListArray.from_arrays(pa.array(means.reshape(-1)), means.shape[1])
    edited = tmp_path / "edited.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("means"), "means", col), edited)
    check, _ = _verdict(rewrite_dataset(plain, tmp_path / "bad", audit_from=edited))
    assert not check.ok and "mlp_id 0" in check.detail, check.detail


def test_missing_trail_file_fails(plain, tmp_path):
    shutil.copytree(plain, tmp_path / "ds")
    (tmp_path / "ds" / "audit" / "public.parquet").unlink()
    _, report = _verdict(tmp_path / "ds")
    assert not report.get("checksums").ok and not report.get("trail contract").ok
    assert "audit/public.parquet is missing" in report.get("trail contract").detail


def test_device_fault_in_second_half_fails_drift(tmp_path, monkeypatch):
    target = weights_for_seed(SEEDS[1], SHAPE["width"], SHAPE["depth"])
    scaled_weights(monkeypatch, target, 1.05, lambda stream: stream.position >= stream.n_samples // 2)
    out = create_dataset(3, mlp_seeds=SEEDS, output_path=tmp_path / "ds", max_threads=1, **SHAPE)
    monkeypatch.undo()
    check, report = _verdict(out)
    assert check.ok, check.detail  # the stored numbers are the faulty samples' own: consistent
    drift = report.get("trail drift")
    assert not drift.ok and "mlp_id 22" not in drift.detail and "mlp_id 1 " in drift.detail, drift.detail


def test_control_variates_at_depth_1_pass(tmp_path):
    """Depth 1 under control variates stores no control-variate columns (the one layer is exact)."""
    ds = create_dataset(2, mlp_seeds=[3, 4], output_path=tmp_path / "ds", n_samples=100_000, width=4, depth=1,
                        estimator="control-variate")
    check, report = _verdict(ds)
    assert check.ok and not report.failures, [c.detail for c in report.failures]
    assert verify_dataset(ds, spot_check=3).get("spot-check").ok
