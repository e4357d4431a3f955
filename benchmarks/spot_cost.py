"""What ``verify --spot-check K`` and ``--recompute 1`` cost against the bake they check.

    python benchmarks/spot_cost.py [--width 256] [--depth 8] [--n 524288] [--segments 32] [--mlps 2]
                                   [--k 2 8] [--samplers pcg64,philox] [--repeat 2] [--project 1e9]

Per sampler (pcg64: the CPU path; philox: ``backend="torch"`` on the CPU) it bakes ``--mlps`` MLPs with the
bake's defaults (a worker per core) and takes an MLP's bake as the bake's wall time over ``--mlps``. Then it
times verify without the pilot (``pilot=False``) alone and with ``--spot-check K`` for each K (the
fastest of ``--repeat`` runs each, alternated: a shared machine), and with ``--recompute 1`` (``--no-cache``).
The spot check's cost is the difference; its promise (docs/cli.md) is at most K/S of an MLP's bake plus a
fixed part of at most 5 s. The fixed part is read off the two K (``cost = fixed + K·per_segment``), and the
line says whether each K met the promise. The projection scales the bake's time per sample to ``--project``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

FIXED_LIMIT_S = 5.0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(sampler: str, args, tmp: Path) -> dict:
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.verify.run import verify_dataset

    out = tmp / f"{sampler}-ds"
    extra = dict(backend="torch", device="cpu", skip_device_check=True) if sampler == "philox" else {}
    bake_s = _timed(lambda: bake(BakeConfig(n_mlps=args.mlps, seed=7, n_samples=args.n, width=args.width,
                                            depth=args.depth, output=out, audit_segments=args.segments, **extra)))
    per_mlp = bake_s / args.mlps
    verify_dataset(out, pilot=False, spot_check=1, spot_seed=0, cache=False)  # warm: imports, the kernels' load
    base, spot, rec = [], {k: [] for k in args.k}, []
    for r in range(args.repeat):
        base.append(_timed(lambda: verify_dataset(out, pilot=False)))
        for k in args.k:
            def one(k=k):
                report = verify_dataset(out, pilot=False, spot_check=k, spot_seed=r, cache=False)
                assert report.get("spot-check").ok, report.get("spot-check").detail
            spot[k].append(_timed(one))
        with tempfile.TemporaryDirectory(dir=tmp) as cache:
            def recompute():
                report = verify_dataset(out, pilot=False, recompute=1, recompute_seed=r, recompute_root=cache,
                                        cache=False)
                assert report.ok, [c.detail for c in report.failures]
            rec.append(_timed(recompute))
    b = min(base)
    cost = {k: max(min(v) - b, 0.0) for k, v in spot.items()}
    k0, k1 = min(args.k), max(args.k)
    per_segment = (cost[k1] - cost[k0]) / (k1 - k0) if k1 > k0 else cost[k0] / k0
    fixed = max(cost[k0] - k0 * per_segment, 0.0)
    return dict(sampler=sampler, bake_s=bake_s, per_mlp_s=per_mlp, verify_s=b, spot=cost, fixed_s=fixed,
                per_segment_s=per_segment, recompute_s=max(min(rec) - b, 0.0),
                met={k: c <= k / args.segments * per_mlp + FIXED_LIMIT_S for k, c in cost.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--n", type=int, default=2**19)
    ap.add_argument("--segments", type=int, default=32)
    ap.add_argument("--mlps", type=int, default=2)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--samplers", default="pcg64,philox")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--project", type=float, default=1e9)
    args = ap.parse_args(argv)
    samplers = [s for s in args.samplers.split(",") if s]
    if not samplers or set(samplers) - {"pcg64", "philox"}:
        ap.error("--samplers takes pcg64, philox or both")
    print(f"{args.width}x{args.depth}, N={args.n:,}, S={args.segments}, {args.mlps} MLPs, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as d:
        for sampler in samplers:
            m = measure(sampler, args, Path(d))
            spots = "; ".join(f"--spot-check {k}: {c:.2f} s = {c / m['per_mlp_s']:.3f} of an MLP's bake "
                              f"(K/S = {k / args.segments:.3f}){'' if m['met'][k] else ' — OVER the promise'}"
                              for k, c in m["spot"].items())
            ok &= all(m["met"].values()) and m["fixed_s"] <= FIXED_LIMIT_S
            print(f"{sampler}: bake {m['bake_s']:.1f} s ({m['per_mlp_s']:.1f} s per MLP); verify (no pilot) "
                  f"{m['verify_s']:.2f} s; {spots}; fixed part {m['fixed_s']:.2f} s, {m['per_segment_s']:.2f} s per "
                  f"segment; --recompute 1: {m['recompute_s']:.1f} s = {m['recompute_s'] / m['per_mlp_s']:.2f} MLP "
                  f"bakes", flush=True)
            proj = m["per_mlp_s"] / args.n * args.project
            print(f"  projected at N={args.project:.3g}: an MLP's bake {proj / 3600:.2f} h; --spot-check 8 "
                  f"{(8 * proj / args.segments + m['fixed_s']) / 60:.1f} min", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
