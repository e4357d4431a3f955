"""benchmarks/cv_coverage.py: its independent truth is right (against exact layer-1 means and an
independent plain estimate), cached truths extend batch by batch to the same numbers, and a tiny run
prints every figure it promises."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import cv_coverage
from whestbench.compute.estimators import layer1_means
from whestbench.compute.mlp import weights_for_seed


def test_the_truth_is_unbiased_and_extends_to_the_same_numbers(tmp_path):
    w = weights_for_seed(123, 8, 3)
    small = cv_coverage.truth(w, 123, 1, tmp_path, min_batches=16)  # 16 batches of 65,536
    assert small["n"] == 16 * cv_coverage.TRUTH_BATCH
    # layer 1 of the plain truth against its exact means (the plain part shares nothing with the controls)
    z1 = (small["plain"][0] - layer1_means(w[0])) / small["plain_se"][0]
    assert np.all(np.abs(z1) < 5.5)
    # the control-variate truth against the plain one on layers 2..: unbiased, and far more precise
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (small["plain"][1:] - small["cv"][1:]) / small["plain_se"][1:]
    live = small["plain_se"][1:] > 0
    assert np.mean(z[live] ** 2) < 2.0 and np.median(small["cv_se"][1:][live] / small["plain_se"][1:][live]) < 0.7
    more = cv_coverage.truth(w, 123, 20 * cv_coverage.TRUTH_BATCH, tmp_path, min_batches=16)  # extends the cache by 4
    fresh = cv_coverage.truth(w, 123, 20 * cv_coverage.TRUTH_BATCH, None, min_batches=16)
    assert more["n"] == fresh["n"] == 20 * cv_coverage.TRUTH_BATCH
    for key in ("plain", "cv", "cv_se"):
        np.testing.assert_allclose(more[key], fresh[key], rtol=1e-12, atol=1e-15)


@pytest.mark.slow
def test_a_tiny_run_prints_every_figure(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cv_coverage.main(["--shapes", "8x3", "--mlps-per-shape", "2", "--samplers", "pcg64", "--targets", "2e-3",
                             "--truth-factor", "1", "--jobs", "1", "--cache", str(tmp_path / "cache"),
                             "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cov ±t" in text and "final-layer se > E" in text and "first check point" in text
    res = json.loads(out.read_text())["pcg64 E=0.002"]
    assert res["mlps"] == 2 and set(res["layers"]) == {"1", "2"}
    assert all(0.0 <= v["cov_t"] <= 1.0 and math.isfinite(v["var"]) for v in res["layers"].values())
