"""The Plan line's sizes count the audit trail (issue 34: "output ≈" left ``audit/<split>.parquet`` out)."""

from __future__ import annotations

import pytest

from whestbench.bake.pipeline import BakeConfig, bake
from whestbench.bake.plan import plan_bake
from whestbench.compute.estimation import Estimation


@pytest.mark.parametrize("estimator", ["plain", "control-variate"])
def test_the_plan_counts_the_trail_it_writes(tmp_path, estimator):
    cfg = BakeConfig(n_mlps=2, n_samples=100_000, width=32, depth=3, seed=1, max_threads=1,
                     estimation=Estimation(estimator), output=tmp_path / "ds")
    needs = plan_bake(cfg, probe=False).needs
    written = bake(cfg)
    trail = (written / "audit" / "public.parquet").stat().st_size
    assert trail / 2 <= needs.trail_bytes and trail <= needs.trail_bytes * 1.05  # an upper estimate, not a wild one
    assert f"(audit trail {needs.summary().split('(audit trail ')[1].split(')')[0]})" in needs.summary()
    untracked = plan_bake(BakeConfig(**{**cfg.__dict__, "audit_segments": 0, "output": tmp_path / "other"}), probe=False).needs
    assert needs.output_bytes - untracked.output_bytes == needs.trail_bytes and untracked.trail_bytes == 0
    assert "audit trail" not in untracked.summary()
