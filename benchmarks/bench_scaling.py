#!/usr/bin/env python
"""Scaling benchmark: the same CPU bake on 1 worker, 2 torchrun processes, and 2 threads in 1 process.

Three ways to run one bake (default 4 MLPs, width 256, depth 8, 100k samples, seed 7):

- ``1 proc x 1 thread``   ``python -m whestbench dataset bake --max-threads 1``  (the baseline)
- ``2 procs x 1 thread``  ``torchrun --nproc-per-node 2 ... --max-threads 1``   (distributed path)
- ``1 proc x 2 threads``  ``python -m whestbench dataset bake --max-threads 2``  (threaded path)

For each it prints the whole-command wall time (what a user waits for: interpreter and torch start-up
included), the bake's own time as it reports it ("Wrote ... in X s"), and the speed-up of each over
the baseline. It then checks that all three wrote the same numeric columns (bit for bit): the
worker layout never changes results.

    .venv/bin/python benchmarks/bench_scaling.py
    .venv/bin/python benchmarks/bench_scaling.py --shape 256x8:4:100000 --repeats 3 --json scaling.json

Needs torch (for torchrun). Run it on an otherwise idle machine: it prints the load average before
and after, and on a 2-core machine any other process takes a large share from every configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path

try:
    from .shapes import Shape, shape_arg
except ImportError:  # run as a script, ``python benchmarks/bench_scaling.py``: its folder is on sys.path
    from shapes import Shape, shape_arg

CONFIGS = {
    "1 proc x 1 thread": ("single", 1),
    "2 procs x 1 thread": ("torchrun", 1),
    "1 proc x 2 threads": ("single", 2),
}
COMPARED = ("mlp_id", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance", "mlp_name")
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "LOCAL_WORLD_SIZE")


def _env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "TORCHELASTIC_"))
    }
    env["OMP_NUM_THREADS"] = "1"  # torchrun sets it anyway; same for every configuration
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(kind: str, threads: int, shape: Shape, seed: int, output: Path) -> list[str]:
    bake = [
        "-m", "whestbench", "dataset", "bake", "--n-mlps", str(shape.n_mlps), "--n-samples", str(shape.n_samples),
        "--width", str(shape.width), "--depth", str(shape.depth), "--seed", str(seed),
        "--max-threads", str(threads), "--quiet", "--output", str(output),
    ]  # fmt: skip
    if kind == "single":
        return [sys.executable, *bake]
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    return [sys.executable, "-m", "torch.distributed.run", *launcher, *bake]


def _run(cmd: list[str], timeout_s: float) -> tuple[float, float]:
    """(whole-command wall seconds, the bake's own seconds from its "Wrote ... in X s" line)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout_s)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    m = re.search(r"Wrote .* in ([0-9.]+)s", proc.stdout)
    return wall, float(m.group(1)) if m else float("nan")


def _columns(path: Path) -> dict:
    import pyarrow.parquet as pq

    cols: dict = {}
    for f in sorted((path / "data").glob("*.parquet")):
        for name, values in pq.read_table(f).to_pydict().items():
            cols.setdefault(name, []).extend(values)
    return {k: cols[k] for k in COMPARED}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=shape_arg, default=Shape(256, 8, 4, 100_000), help="WxD:N_MLPS:N_SAMPLES")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=1, help="runs per configuration (median reported)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    shape = args.shape
    print(f"shape {shape.label}, {shape.n_mlps} MLPs x {shape.n_samples:,} samples, seed {args.seed}; "
          f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.2f}")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="whest-scaling-", dir=args.workdir))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    kept: dict[str, Path] = {}
    try:
        for rep in range(args.repeats):
            for name, (kind, threads) in CONFIGS.items():  # interleaved, so drifting load hits each
                out = work / f"{kind}-{threads}-{rep}"
                runs[name].append(_run(_command(kind, threads, shape, args.seed, out), args.timeout))
                print(f"  run {rep + 1}: {name:<20} {runs[name][-1][0]:7.2f} s wall, {runs[name][-1][1]:7.2f} s bake",
                      file=sys.stderr)  # fmt: skip
                if name in kept:
                    shutil.rmtree(out)
                else:
                    kept[name] = out
        base_wall = statistics.median(w for w, _ in runs["1 proc x 1 thread"])
        base_bake = statistics.median(b for _, b in runs["1 proc x 1 thread"])
        print(f"\n{'configuration':<22}{'wall s':>9}{'speed-up':>10}{'bake s':>9}{'speed-up':>10}")
        result = {}
        for name in CONFIGS:
            wall = statistics.median(w for w, _ in runs[name])
            own = statistics.median(b for _, b in runs[name])
            result[name] = {"wall_s": wall, "bake_s": own, "runs": runs[name]}
            print(f"{name:<22}{wall:9.2f}{base_wall / wall:9.2f}x{own:9.2f}{base_bake / own:9.2f}x")
        ref = _columns(kept["1 proc x 1 thread"])
        same = all(_columns(kept[name]) == ref for name in CONFIGS)
        print(f"\nidentical numeric columns across configurations: {'yes' if same else 'NO'}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        if args.json:
            args.json.write_text(json.dumps({"shape": astuple(shape), "results": result, "identical": same}, indent=2))
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
