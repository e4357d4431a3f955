"""Coverage of the control-variate error bars at the batch floor, against an independent high-N truth.

    python benchmarks/cv_coverage.py [--mlps-per-shape 12] [--shapes 8x3,...] [--samplers pcg64,philox]
                                     [--targets 2e-3,8e-4] [--truth-factor 20] [--truth-min-batches 160]
                                     [--cache /tmp/cv_coverage_truth] [--jobs 2] [--rule R] [--no-truth] [--json FILE]

Bakes control-variate target bakes (``--estimator control-variate --target-stderr E``) of small
shapes (widths 8-32, depths 3-5) on the default pcg64 path and on the philox (torch-CPU) path, and
compares every stored mean of layers 2.. with an independent truth:

- **The truth** is written here, in numpy float64, and shares no code or stream with a bake: inputs
  from ``SeedSequence([TRUTH_TAG, seed, b])`` (batch ``b`` of ``TRUTH_BATCH`` rows), a float64 forward
  pass of the MLP's weights, fp64 sums per batch. Its estimate is the plain mean of those samples
  *and*, beside it, the same samples' mean with control variates of its own (``φ = [y₁ − E y₁,
  z₂² − E z₂²]`` with coefficients fitted in float64 on a pilot of its own stream): at widths 8-32 a
  plain truth at 20× N has a variance 1.3-1.5× the bake's at layer 2 (the controls reduce it ~28×), which
  would swamp the error being measured. The controls' exact means are the only shared mathematics;
  the plain and the control-variate truths are compared (their z-scores, ``truth check``) so a
  wrong exact mean would show. Its standard error is by batch means over ``≥ 160`` batches.
  ``--truth-factor`` (default 20) sets its N relative to each MLP's largest baked N; truths are
  cached per MLP (``--cache``) and extended, batch by batch, when a later run needs more.
- **Per (sampler, E) and layer** it prints: ``var`` = the mean over neurons of
  ``((m − t)² − se_t²) / se²`` (stored mean m, stored standard error se, truth t and its standard
  error se_t; honest batch means on k batches give E[(m−μ)²/se²] = (k−1)/(k−3) under normality,
  1.069 at k = 32); ``cov z`` = the fraction of neurons with ``|m − t| ≤ 1.96·sqrt(se² + se_t²)``;
  ``cov t`` = the same with Student-t's quantile on k−1 degrees of freedom in place of 1.96
  (``compute.audit.t_quantile``; the interval ``verify`` and the docs state); and ``n``, neurons
  counted (neurons whose stored standard error is 0, never active, are left out and counted apart);
  and the neuron of largest |z| with its truth and stored mean (a rarely active neuron, typically).
- **Per (sampler, E)**: the fraction of MLPs whose largest final-layer standard error exceeds E, and
  the largest ratio; and the final layer's mean z-score ``(m − t)/se`` (averaged per MLP, then over
  MLPs: MLP is the unit, neurons of one MLP are correlated) for MLPs that stopped at the first check
  point past the floor and for the others (the "first-check-point bias" of issue 29).

The batch floor: 32 batches (``MIN_RELIABLE_BATCHES``): pcg64 chunks of 16,384 rows at widths ≤ 64
(524,288 samples), philox batches of 4,096 (131,072 samples). ``--no-truth`` bakes only and prints the
above-E figures; ``--rule pilot-planned`` bakes with the control-variate rule of before issue 29.
The figures of 2026-11-27 are in docs/error-bars.md, "Coverage at the batch floor".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

TRUTH_TAG = 0x7E57_C0DE_2029  # entropy word of the truth's streams: no bake stream starts with it
TRUTH_BATCH = 1 << 16  # rows per truth batch (one stream each)
TRUTH_PILOT = 1 << 16  # float64 pilot of the truth's own controls
SHAPES = ((8, 3), (8, 5), (16, 3), (16, 5), (24, 4), (32, 3))


# ----------------------------------------------------------------------------------------------
# The independent truth (float64, its own streams, its own code)


def _exact_controls(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E y₁ and E z₂² of a float64 MLP ``w`` (depth, width, width), inputs x ~ N(0, I)."""
    w1, w2 = w[0], w[1]
    cov = w1.T @ w1
    sd = np.sqrt(np.diag(cov))
    ey1 = sd / math.sqrt(2 * math.pi)
    rho = np.clip(cov / np.outer(sd, sd), -1.0, 1.0)
    ang = np.arccos(rho)
    eyy = np.outer(sd, sd) * (np.sin(ang) + (math.pi - ang) * np.cos(ang)) / (2 * math.pi)  # E[y₁ y₁ᵀ]
    ez2sq = np.einsum("aj,ab,bj->j", w2, eyy, w2)
    return ey1, ez2sq


def _forward(w: np.ndarray, x: np.ndarray, ey1: np.ndarray, ez2sq: np.ndarray):
    """(ysum (depth, width), psum (2·width)): the float64 sums of the activations and of the
    controls ``φ = [y₁ − E y₁, z₂² − E z₂²]`` over the rows of ``x``."""
    depth, width, _ = w.shape
    rows = x.shape[0]
    ysum = np.empty((depth, width))
    psum = np.empty(2 * width)
    h = x
    for layer in range(depth):
        z = h @ w[layer]
        if layer == 1:
            psum[width:] = np.einsum("ij,ij->j", z, z) - rows * ez2sq
        h = np.maximum(z, 0.0, out=z)
        ysum[layer] = h.sum(axis=0)
        if layer == 0:
            psum[:width] = ysum[0] - rows * ey1
    return ysum, psum


def _truth_coef(w: np.ndarray, seed: int, ey1: np.ndarray, ez2sq: np.ndarray) -> np.ndarray:
    """The truth's own control-variate coefficients: least squares of layers 2.. on φ, float64, on a
    pilot of the truth's own stream (any fixed coefficients leave its estimate unbiased)."""
    rng = np.random.default_rng(np.random.SeedSequence([TRUTH_TAG, seed & 0xFFFFFFFF, seed >> 32, 1 << 40]))
    h = rng.standard_normal((TRUTH_PILOT, w.shape[1]))
    ys = []
    for layer, wl in enumerate(w):
        z = h @ wl
        if layer == 1:
            z2sq = z * z - ez2sq
        h = np.maximum(z, 0.0)
        ys.append(h)
    phi = np.concatenate([ys[0] - ey1, z2sq], axis=1)
    y = np.concatenate(ys[1:], axis=1)
    pc = phi - phi.mean(axis=0)
    g = pc.T @ pc / TRUTH_PILOT
    return np.linalg.solve(g + 1e-9 * np.trace(g) / g.shape[0] * np.eye(g.shape[0]), pc.T @ (y - y.mean(axis=0)) / TRUTH_PILOT)


def _truth_batches(w: np.ndarray, seed: int, first: int, count: int, ey1, ez2sq) -> dict[str, np.ndarray]:
    depth, width, _ = w.shape
    ysum = np.empty((count, depth, width))
    psum = np.empty((count, 2 * width))
    for i in range(count):
        rng = np.random.default_rng(np.random.SeedSequence([TRUTH_TAG, seed & 0xFFFFFFFF, seed >> 32, first + i]))
        ysum[i], psum[i] = _forward(w, rng.standard_normal((TRUTH_BATCH, width)), ey1, ez2sq)
    return {"ysum": ysum, "psum": psum}


def truth(w32: np.ndarray, seed: int, n_needed: int, cache: Path | None, min_batches: int = 160) -> dict[str, np.ndarray]:
    """The truth of one MLP on at least ``n_needed`` samples and ``min_batches`` batches (all a cache
    holds, if more): ``plain``/``plain_se`` and ``cv``/``cv_se`` (depth, width) float64, ``n``."""
    w = np.asarray(w32, dtype=np.float32).astype(np.float64)
    depth, width, _ = w.shape
    want = max(min_batches, -(-int(n_needed) // TRUTH_BATCH))
    path = None if cache is None else cache / f"{width}x{depth}_{seed}.npz"
    have: dict[str, np.ndarray] = {}
    if path is not None and path.exists():
        with np.load(path) as f:
            have = {k: f[k] for k in f.files}
    ey1, ez2sq = _exact_controls(w)
    n_have = 0 if not have else have["ysum"].shape[0]
    if n_have < want:
        more = _truth_batches(w, seed, n_have, want - n_have, ey1, ez2sq)
        have = more if not have else {k: np.concatenate([have[k], more[k]]) for k in more}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, **have)
            tmp.replace(path)
    ysum, psum = have["ysum"], have["psum"]
    k = ysum.shape[0]
    coef = _truth_coef(w, seed, ey1, ez2sq)  # (2w, (depth-1)·w)
    yb = ysum / TRUTH_BATCH  # (k, depth, w) batch means
    rb = yb.copy()
    rb[:, 1:] -= (psum / TRUTH_BATCH @ coef).reshape(k, depth - 1, width)
    rb[:, 0] = ey1  # layer 1 is exact
    return {"plain": yb.mean(axis=0), "plain_se": yb.std(axis=0, ddof=1) / math.sqrt(k),
            "cv": rb.mean(axis=0), "cv_se": rb.std(axis=0, ddof=1) / math.sqrt(k), "n": k * TRUTH_BATCH}


def _truth_job(job):
    from threadpoolctl import threadpool_limits

    wts, seed, n, cache, min_batches = job
    with threadpool_limits(1):
        return truth(wts, seed, n, cache, min_batches)


# ----------------------------------------------------------------------------------------------
# Bakes


def bake_rows(root: Path, sampler: str, target: float, width: int, depth: int, n_mlps: int, seed: int,
              cap: int, rule: str | None = None) -> list[dict]:
    import pyarrow.parquet as pq

    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation

    out = root / f"{sampler}_{target:g}_{width}x{depth}_{seed}"
    torch_kw = dict(backend="torch", device="cpu", skip_device_check=True) if sampler == "philox" else {}
    cfg = BakeConfig(n_mlps=n_mlps, seed=seed, n_samples=cap, width=width, depth=depth, output=out, audit_segments=0,
                     estimation=Estimation("control-variate", target, rule=rule), **torch_kw)
    bake(cfg)
    md = json.loads((out / "metadata.json").read_text())
    rows = []
    for f in sorted((out / "data").glob("*.parquet")):
        t = pq.read_table(f, columns=["mlp_seed", "weights", "all_layer_means", "all_layer_stderr", "n_samples_used"])
        for r in t.to_pylist():
            rows.append(dict(seed=int(r["mlp_seed"]), n=int(r["n_samples_used"]),
                             weights=np.asarray(r["weights"], dtype=np.float32).reshape(depth, width, width),
                             means=np.asarray(r["all_layer_means"], dtype=np.float64).reshape(depth, width),
                             se=np.asarray(r["all_layer_stderr"], dtype=np.float64).reshape(depth, width),
                             batch=int(md["estimator"]["batch_samples"]), step=int(md["target_stderr"]["step_samples"])))
    return rows


# ----------------------------------------------------------------------------------------------
# Statistics


def analyse(rows: list[dict], truths: dict, target: float, floor_of) -> dict:
    from whestbench.compute.audit import t_quantile

    depth = max(r["means"].shape[0] for r in rows)
    per_layer = {l: {"var": [], "cz": [], "ct": [], "n": 0, "zero": 0, "worst": (0.0, "")} for l in range(1, depth)}
    above, ratios, zfirst, zlater, truth_z2 = 0, [], [], [], []
    for r in rows:
        t = truths[(r["seed"], r["means"].shape)]
        k = -(-r["n"] // r["batch"])
        q = t_quantile(0.975, k - 1)
        d = r["means"].shape[0]
        ratio = float(np.max(r["se"][-1])) / target
        ratios.append(ratio)
        above += ratio > 1.0
        live_t = t["plain_se"][1:] > 0
        truth_z2.append(float(np.mean(((t["plain"][1:] - t["cv"][1:])[live_t] / t["plain_se"][1:][live_t]) ** 2)))
        for l in range(1, d):
            live = r["se"][l] > 0
            per_layer[l]["zero"] += int(np.sum(~live))
            err = r["means"][l][live] - t["cv"][l][live]
            se, se_t = r["se"][l][live], t["cv_se"][l][live]
            per_layer[l]["var"] += list((err**2 - se_t**2) / se**2)
            wide = np.sqrt(se**2 + se_t**2)
            per_layer[l]["cz"] += list(np.abs(err) <= 1.96 * wide)
            per_layer[l]["ct"] += list(np.abs(err) <= q * wide)
            per_layer[l]["n"] += int(live.sum())
            if live.any():
                zz = np.abs(err) / se
                j = int(np.argmax(zz))
                if zz[j] > per_layer[l]["worst"][0]:
                    per_layer[l]["worst"] = (float(zz[j]), f"|z| {zz[j]:.1f}: mlp_seed {r['seed']}, truth {t['cv'][l][live][j]:.3g}, "
                                                        f"stored {r['means'][l][live][j]:.3g} ± {se[j]:.2g}")
        live = r["se"][-1] > 0
        if not live.any():
            continue
        z_last = float(np.mean((r["means"][-1][live] - t["cv"][-1][live]) / r["se"][-1][live]))
        (zfirst if r["n"] <= floor_of(r) else zlater).append(z_last)

    def mz(v):
        return (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan"), len(v))

    return {"layers": {l: {"var": float(np.mean(v["var"])), "cov_z": float(np.mean(v["cz"])),
                           "cov_t": float(np.mean(v["ct"])), "n": v["n"], "zero_se": v["zero"], "worst": v["worst"][1]}
                       for l, v in per_layer.items() if v["n"]},
            "mlps": len(rows), "above_E": above / len(rows), "largest_ratio": max(ratios),
            "z_first": mz(zfirst), "z_later": mz(zlater), "truth_check_mean_z2": float(np.mean(truth_z2))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlps-per-shape", type=int, default=12)
    ap.add_argument("--shapes", default=",".join(f"{w}x{d}" for w, d in SHAPES))
    ap.add_argument("--samplers", default="pcg64,philox")
    ap.add_argument("--targets", default="2e-3,8e-4")
    ap.add_argument("--seed", type=int, default=2029)
    ap.add_argument("--cap", type=int, default=1 << 24, help="--n-samples of the bakes (the cap)")
    ap.add_argument("--truth-factor", type=float, default=20.0)
    ap.add_argument("--truth-min-batches", type=int, default=160, help="of 65,536 samples: the truth's standard error's degrees of freedom")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/cv_coverage_truth"))
    ap.add_argument("--jobs", type=int, default=2, help="processes computing truths")
    ap.add_argument("--rule", default=None, help="the target rule to bake with (default: this version's; "
                    "'pilot-planned' is the control-variate rule before issue 29)")
    ap.add_argument("--no-truth", action="store_true", help="only the stored standard errors against E (no truth)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from whestbench.compute.estimators import cv_floor_samples

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    configs = [(s, float(e)) for s in args.samplers.split(",") for e in args.targets.split(",")]
    rows_by = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for sampler, target in configs:
            rows = []
            for j, (w, d) in enumerate(shapes):
                rows += bake_rows(Path(tmp), sampler, target, w, d, args.mlps_per_shape, args.seed + j, args.cap, args.rule)
            rows_by[(sampler, target)] = rows
            print(f"baked {sampler} E={target:g}: {len(rows)} MLPs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.no_truth:
        for (sampler, target), rows in rows_by.items():
            ratios = np.array([float(np.max(r["se"][-1])) / target for r in rows])
            floor = np.mean([r["n"] <= cv_floor_samples(args.cap, r["step"], r["batch"]) for r in rows])
            print(f"{sampler}, E = {target:g}, rule {args.rule or 'default'}: {len(rows)} MLPs ({args.shapes}); final-layer "
                  f"se > E: {100 * np.mean(ratios > 1):.1f} % of MLPs, largest {ratios.max():.3f} E, median "
                  f"{np.median(ratios):.3f} E; {100 * floor:.0f} % at the floor; mean N {np.mean([r['n'] for r in rows]):,.0f}")
        return 0
    need: dict = {}
    for rows in rows_by.values():
        for r in rows:
            key = (r["seed"], r["means"].shape)
            need[key] = max(need.get(key, (0, None))[0], r["n"]), r["weights"]
    truths = {}
    keys = list(need)
    jobs = [(need[k][1], k[0], int(args.truth_factor * need[k][0]), args.cache, args.truth_min_batches) for k in keys]
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, (key, res) in enumerate(zip(keys, pool.map(_truth_job, jobs))):
            truths[key] = res
            if i % 20 == 19:
                print(f"truth {i + 1}/{len(need)}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    report = {}
    for (sampler, target), rows in rows_by.items():
        res = analyse(rows, truths, target, lambda r: cv_floor_samples(args.cap, r["step"], r["batch"]))
        report[f"{sampler} E={target:g}"] = res
        print(f"\n{sampler}, E = {target:g}: {res['mlps']} MLPs ({args.shapes}), truth ≥ {args.truth_factor:g}× N "
              f"(truth check: mean z² plain vs control-variate truth {res['truth_check_mean_z2']:.3f})")
        print("  layer   var(m−t)/se²   cov ±1.96   cov ±t   neurons  (se=0)")
        for l, v in res["layers"].items():
            print(f"  {l + 1:>5}   {v['var']:>12.3f}   {100 * v['cov_z']:>8.1f}%  {100 * v['cov_t']:>6.1f}%   {v['n']:>7}  ({v['zero_se']})"
                  f"   largest {v['worst']}")
        zf, zl = res["z_first"], res["z_later"]
        print(f"  final-layer se > E: {100 * res['above_E']:.1f} % of MLPs, largest {res['largest_ratio']:.3f} E")
        print(f"  final-layer mean z: first check point {zf[0]:+.3f} ± {zf[1]:.3f} ({zf[2]} MLPs), "
              f"later {zl[0]:+.3f} ± {zl[1]:.3f} ({zl[2]} MLPs)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
