"""What ``whest dataset verify`` costs: a 100-MLP 256×8 dataset, and ``--recompute 1`` against a bake.

    python benchmarks/bench_verify.py [--n-mlps 100] [--width 256] [--depth 8] [--n-samples 20000]
                                      [--estimator plain|control-variate|both] [--keep DIR] [--json FILE]

Bakes the dataset once per estimator (or reuses it from --keep), then times, as whole commands:
``whest dataset verify DIR`` (every check, the pilot of every MLP), ``verify --recompute 1`` and a
bake of one MLP with the same recipe. Prints wall and CPU seconds (CPU = user + system of the child:
on a shared machine the wall time depends on the load, the CPU time much less).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command; raises if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-mlps", type=int, default=100)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--n-samples", type=int, default=20_000)
    ap.add_argument("--estimator", choices=["plain", "control-variate", "both"], default="both")
    ap.add_argument("--keep", type=Path, default=None, help="bake into (or reuse) this directory")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    whest = [sys.executable, "-m", "whestbench"]
    root = args.keep or Path(tempfile.mkdtemp(prefix="whest-bench-verify-"))
    root.mkdir(parents=True, exist_ok=True)
    shape = ["--width", str(args.width), "--depth", str(args.depth), "--n-samples", str(args.n_samples)]
    results = []
    for est in (["plain", "control-variate"] if args.estimator == "both" else [args.estimator]):
        ds = root / f"{est}-{args.n_mlps}x{args.width}x{args.depth}"
        if not (ds / "metadata.json").exists():
            run(whest + ["dataset", "bake", "--n-mlps", str(args.n_mlps), *shape, "--seed", "3", "--estimator", est,
                         "--output", str(ds)])
        wall, cpu = run(whest + ["dataset", "verify", str(ds)])
        rc_root = Path(tempfile.mkdtemp(prefix="whest-rc-"))
        env = dict(os.environ, WHEST_RECOMPUTE_DIR=str(rc_root))
        rwall, rcpu = run(whest + ["dataset", "verify", str(ds), "--recompute", "1"], env=env)
        one = rc_root / "one"
        bwall, bcpu = run(whest + ["dataset", "bake", "--n-mlps", "1", *shape, "--seed", "3", "--estimator", est,
                                   "--output", str(one)])
        shutil.rmtree(rc_root, ignore_errors=True)
        row = dict(estimator=est, n_mlps=args.n_mlps, width=args.width, depth=args.depth, n_samples=args.n_samples,
                   verify_wall_s=round(wall, 1), verify_cpu_s=round(cpu, 1),
                   recompute1_wall_s=round(rwall, 1), recompute1_cpu_s=round(rcpu, 1),
                   bake1_wall_s=round(bwall, 1), bake1_cpu_s=round(bcpu, 1))
        results.append(row)
        print(f"{est:16s} verify {wall:6.1f} s wall ({cpu:6.1f} s CPU); verify --recompute 1 {rwall:6.1f} s "
              f"({rcpu:6.1f} s CPU) = verify + {rwall - wall:5.1f} s; bake of 1 MLP {bwall:5.1f} s ({bcpu:5.1f} s CPU)",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
