"""benchmarks/verify_power.py: the bisection finds the smallest rung caught, and the target and torch bakes
it measures are what they claim (a target bake's inflated N keeps its metadata consistent and is still
caught by the trail; the torch bake is philox's)."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import verify_power


@pytest.mark.parametrize("threshold", [0, 1, 5, 9, 10, None])
def test_smallest_bisects_to_the_first_rung_caught(monkeypatch, threshold):
    values = list(range(1, 12))
    calls = []

    def caught(src, tmp, edit, upd):
        calls.append(edit)
        hit = threshold is not None and edit >= values[threshold]
        return hit, (["x"] if hit else [])

    monkeypatch.setattr(verify_power, "caught", caught)
    value, names = verify_power.smallest(None, None, values, lambda v: (v, None))
    assert value == ("not caught" if threshold is None else f"{values[threshold]:g}")
    assert names == ([] if threshold is None else ["x"])
    assert len(calls) == len(set(calls)) <= 6  # the first rung, the last, then at most ceil(log2 10) = 4


def test_target_and_torch_bakes(tmp_path):
    pytest.importorskip("torch")
    args = argparse.Namespace(mlps=1, width=8, depth=2, target_stderr=None)
    n = 40_000
    target = verify_power.bake_kind("target", 8, args, n, tmp_path)
    md = json.loads((target / "metadata.json").read_text())
    assert md["target_stderr"]["value"] == pytest.approx(4e-3 * (2e5 / n) ** 0.5)
    edit, upd = verify_power._inflate_n(n, 2.0, True)
    forged = upd(md)
    assert forged["n_samples"] == 2 * n and forged["samples_used"]["total"] == 2 * md["samples_used"]["total"]
    hit, names = verify_power.caught(target, tmp_path, edit, upd)
    assert hit and "trail" in names, names
    torch_ds = verify_power.bake_kind("torch", 8, args, n, tmp_path)
    md = json.loads((torch_ds / "metadata.json").read_text())
    assert md["sampler"]["name"] == "philox" and md["audit"]["segments"] == 8
    assert verify_power.caught(torch_ds, tmp_path, *verify_power._inflate_n(n, 1.05, False))[0]


def test_device_fault_row_injects_one_segment_per_mlp_that_only_a_spot_check_sees(tmp_path):
    """The fault lands in exactly one segment of each MLP: the exact checks and the pilot pass, a spot
    check of every segment names each MLP once, and the catch rate is a rate of real catches."""
    from whestbench.verify.run import verify_dataset

    args = argparse.Namespace(mlps=2, width=8, depth=2)
    from whestbench.compute.pcg64 import chunk_rows

    n = 32 * chunk_rows(8)  # 32 sampler steps: 32 segments
    row = verify_power.device_fault(args, n, tmp_path, k=4, seeds=40)  # caught with chance 0.123 per seed
    assert row["segments"] == 32 and not row["caught_without_spot_check"], row
    assert 0 < row["caught"] < 20 and row["exact"] == pytest.approx(1 - (62 * 61 * 60 * 59) / (64 * 63 * 62 * 61))
    every = verify_dataset(tmp_path / f"fault-{n}", pilot=False, spot_check=64).get("spot-check")
    assert not every.ok
    assert every.detail.count("mlp_id 0 segment") == 1 and every.detail.count("mlp_id 1 segment") == 1, every.detail


def test_forgeries_rewritten_to_match_keep_every_trail_identity_and_fail_a_full_spot_check(tmp_path):
    """The forgery table measures what it claims: a forger who rewrites the trail leaves every exact identity
    intact (the trail check passes) and only regenerated segments see the forgery; one who leaves the trail
    alone fails the trail check (or an exact column check) at once."""
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.pcg64 import chunk_rows
    from whestbench.verify.run import verify_dataset

    src = bake(BakeConfig(n_mlps=2, seed=4, n_samples=32 * chunk_rows(8), width=8, depth=2, output=tmp_path / "src"))
    # now caught without a spot check (issue 34): copied segments hold identical means (trail); the spot
    # check is then not run
    plain_catches = {"segments copied": "trail"}
    for forgery in ("N x2", "error bars x0.8", "one neuron +20 SE", "segments copied"):
        ds, bad, total = verify_power.forge(src, tmp_path / "forged", forgery, True, tmp_path)
        report = verify_dataset(ds, pilot=False, spot_check="32/mlp", spot_seed=0, cache=False)
        if forgery in plain_catches:
            assert not report.get(plain_catches[forgery]).ok and report.get("spot-check").skipped, forgery
        else:
            assert report.get("trail").ok and report.get("trail contract").ok, (forgery, report.get("trail").detail)
            assert not report.get("spot-check").ok, forgery
        assert total == 64 and bad == {"N x2": 64, "segments copied": 32}.get(forgery, 32)
        ds, bad, _ = verify_power.forge(src, tmp_path / "forged", forgery, False, tmp_path)
        assert not verify_dataset(ds, pilot=False).ok, forgery
