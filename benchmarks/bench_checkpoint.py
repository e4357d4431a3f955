#!/usr/bin/env python
"""What checkpoints inside a unit cost (issue 12: under 1 % of bake time at the default 60 s).

Two measurements:

1. **Per checkpoint**, in process: the unit's state (``Pcg64Stream.state()`` on the default path,
   the pairwise tree's levels on the torch path), encoded as a checked record and written through
   the ledger (temp file, fsync, rename), at a given shape. The cost at the default interval is
   that time over 60 s.
2. **Whole bakes**, alternating: one MLP with ``--checkpoint-every 60`` (the default; the bake is
   shorter, so it never checkpoints) against ``--checkpoint-every 0.5`` (a checkpoint every half
   second), medians of ``--repeats``, so the cost of frequent checkpoints is seen end to end.

    .venv/bin/python benchmarks/bench_checkpoint.py                  # ~2 min on 2 cores
    .venv/bin/python benchmarks/bench_checkpoint.py --width 256 --depth 8 --n-samples 1e6 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from .bench_cpu import REPO, base_env, log
    from .shapes import count
except ImportError:  # run as a script
    from bench_cpu import REPO, base_env, log
    from shapes import count


def per_checkpoint(width: int, depth: int, workdir: Path, rounds: int) -> dict[str, float]:
    """Median seconds to take and save one checkpoint, default path and torch path states."""
    import numpy as np

    from whestbench.compute.philox import spec as philox
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.pcg64 import Pcg64Stream
    from whestbench.work.ledger import Ledger

    ledger = Ledger(workdir / "ckpt-bench.whest-work", {"bench": True})
    stream = Pcg64Stream(weights_for_seed(1, width, depth), np.random.SeedSequence(1), 10**9, fused=False)
    stream.step()
    tree = philox.PairwiseStack()
    rng = np.random.default_rng(0)
    for _ in range(1000):  # a tree a thousand blocks deep in: its levels are what a checkpoint holds
        tree.push(rng.standard_normal((1, 2 * depth + 1, width)), 0)
    levels, values = tree.state()
    out = {}
    for name, state in (("pcg64", stream.state),
                        ("philox", lambda: ({"next_block": 1000, "samples": 1000 * 65536, "levels": levels},
                                            {f"level{i}": np.asarray(v) for i, v in enumerate(values)}))):
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            meta, arrays = state()
            ledger.save_checkpoint("mlp00000000", meta, arrays)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    ledger.remove()
    return out


def whole_bakes(args, workdir: Path) -> dict[str, list[float]]:
    env = {**base_env(workdir), "PYTHONPATH": str(REPO / "src")}
    times: dict[str, list[float]] = {"60": [], "0.5": []}
    for r in range(args.repeats):
        for every in times:
            out = workdir / f"bake-{r}-{every}"
            cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "1", "--n-samples", str(args.n_samples),
                   "--width", str(args.width), "--depth", str(args.depth), "--seed", "1", "--quiet",
                   "--checkpoint-every", every, "--output", str(out)]
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            times[every].append(time.perf_counter() - t0)
            log(f"round {r + 1}: --checkpoint-every {every:>4}: {times[every][-1]:.2f} s")
            shutil.rmtree(out, ignore_errors=True)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--n-samples", type=count, default=count("1e6"), help="samples of the whole-bake runs (default 1e6)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=50, help="checkpoints timed per state kind (default 50)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="whest-bench-ckpt-"))
    try:
        one = per_checkpoint(args.width, args.depth, workdir, args.rounds)
        bakes = whole_bakes(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n## Checkpoint cost at {args.width}x{args.depth}\n")
    for name, s in one.items():
        print(f"- {name}: {s * 1e3:.2f} ms per checkpoint (state + record + fsync + rename) = "
              f"{100 * s / 60:.4f} % of a unit's time at --checkpoint-every 60")
    m60, m05 = statistics.median(bakes["60"]), statistics.median(bakes["0.5"])
    print(f"- whole bake, 1 MLP × {args.n_samples:,}: --checkpoint-every 60 (none taken) {m60:.2f} s, "
          f"--checkpoint-every 0.5 {m05:.2f} s ({100 * (m05 / m60 - 1):+.1f} %, medians of {args.repeats}); "
          "runs: " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(bakes["60"], bakes["0.5"])))
    if args.json:
        args.json.write_text(json.dumps({"per_checkpoint_s": one, "whole_bake_s": bakes, "args": vars(args) | {"json": str(args.json)}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
