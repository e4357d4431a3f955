"""The cost of ``verify --spot-check 1`` against the bake of the MLP it checks, and its projection.

    python benchmarks/spot_cost.py [--width 256] [--depth 8] [--n 1048576] [--segments 32]

Bakes one MLP (pcg64, one thread), times the bake, then times verify without and with ``--spot-check 1``
(the pilot checks left out: ``pilot=False``); the difference is the spot check. A segment is 1/S of the
MLP's samples, so at N = 10⁹ the projected spot check is the bake's time per sample × N/S plus the
fixed cost measured here.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--n", type=int, default=2**20)
    ap.add_argument("--segments", type=int, default=32)
    ap.add_argument("--project", type=float, default=1e9)
    args = ap.parse_args(argv)
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.verify.run import verify_dataset

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ds"
        t0 = time.perf_counter()
        bake(BakeConfig(n_mlps=1, mlp_seeds=(7,), n_samples=args.n, width=args.width, depth=args.depth, output=out,
                        max_threads=1, audit_segments=args.segments))
        bake_s = time.perf_counter() - t0
        verify_dataset(out, pilot=False)  # warm: imports, the fused kernels' load
        base, spot = [], []
        for _ in range(3):  # alternate, keep the fastest of each (a shared machine)
            t0 = time.perf_counter()
            verify_dataset(out, pilot=False)
            base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = verify_dataset(out, pilot=False, spot_check=1)
            spot.append(time.perf_counter() - t0)
            assert report.get("spot-check").ok, report.get("spot-check").detail
        base_s, spot_s = min(base), min(spot) - min(base)
    per_sample = bake_s / args.n
    segment_s = per_sample * args.n / args.segments
    fixed = max(spot_s - segment_s, 0.0)
    print(f"{args.width}x{args.depth}, N={args.n:,}, S={args.segments}: bake {bake_s:.1f} s; verify (no pilot) "
          f"{base_s:.2f} s; spot check of 1 segment {spot_s:.2f} s = {spot_s / bake_s:.3f} of the bake "
          f"(1/S = {1 / args.segments:.3f}); fixed part ~{fixed:.2f} s")
    proj_bake = per_sample * args.project
    print(f"projected at N={args.project:.3g}: bake {proj_bake / 3600:.2f} h per MLP; --spot-check 1 "
          f"{(proj_bake / args.segments + fixed) / 60:.1f} min")


if __name__ == "__main__":
    main()
