#!/usr/bin/env python
"""Slice of a long seed list: how long a 2-MLP bake of a 10⁶-seed list takes, and its peak memory.

A slice's names are made unique over the whole seed list (whestbench 0.16's rule), and every other
set-up step (reading and validating the seeds, deriving them from ``--seed``, their digest) is
O(n_mlps), so a 2-MLP slice pays for the whole list. This times the two ways to give that list,
each a fresh ``python -m whestbench dataset bake`` (what a user waits for, start-up included):

- ``--mlp-seeds FILE``  a seeds file of ``--n-mlps`` seeds (made with ``generate-seeds --seed 1``);
- ``--seed 7``          the list derived from a root seed;

both with ``--mlp-range`` in the middle of the list (default ``N/2 .. N/2+1``), width 8, depth 2,
1000 samples, and a tiny 2-MLP bake for the fixed cost of any bake. Peak RSS is the child's
``ru_maxrss``.

    .venv/bin/python benchmarks/bench_seed_list.py
    .venv/bin/python benchmarks/bench_seed_list.py --n-mlps 1000000 --repeats 3 --check-names 100000

``--check-names N`` also compares the names of N random estimator seeds with faker's own
(``Faker("en_US").seed_instance``, ~100 µs a name) and checks the ``--seed`` slice's names against a
faker walk of the list up to the slice (the reference's definition; ~1 minute at 10⁶).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = ["--n-samples", "1000", "--width", "8", "--depth", "2"]


def run(args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``python -m whestbench ARGS`` in a fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "whestbench", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        sys.exit(f"whest {' '.join(args)} failed (exit {proc.returncode}):\n{err}")
    return wall, usage.ru_maxrss * 1024  # Linux: KiB


def check_names(n: int, slice_dir: Path, root: int, start: int, end: int) -> None:
    import numpy as np
    import pyarrow.parquet as pq
    from faker import Faker

    from whestbench.compute.naming import base_names, slug
    from whestbench.compute.seeds import derived_seeds, estimator_seeds

    fake = Faker("en_US")

    def faker_name(s: int) -> str:
        fake.seed_instance(int(s))
        return f"{slug(fake.first_name())}-{slug(fake.last_name())}"

    seeds = np.random.default_rng(2024).integers(0, 2**32, n, dtype=np.int64).tolist() + [0, 1, 2**32 - 1]
    t = time.perf_counter()
    ok = base_names(seeds) == [faker_name(s) for s in seeds]
    print(f"names of {len(seeds):,} seeds equal faker's: {ok} ({time.perf_counter() - t:.1f} s)")
    counts: dict[str, int] = {}
    want = []
    t = time.perf_counter()
    for i, s in enumerate(estimator_seeds(derived_seeds(root, end)).tolist()):
        base = faker_name(s)
        counts[base] = counts.get(base, 0) + 1
        if i >= start:
            want.append(base if counts[base] == 1 else f"{base}-{counts[base]}")
    got = pq.read_table(sorted(slice_dir.glob("data/*.parquet")), columns=["mlp_name"]).column("mlp_name").to_pylist()
    print(f"--seed {root} slice names {got} equal a faker walk of its {end:,}-seed prefix: {got == want} "
          f"({time.perf_counter() - t:.1f} s)")
    if not ok or got != want:
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-mlps", type=int, default=1_000_000)
    ap.add_argument("--start", type=int, help="first MLP of the slice (default n_mlps // 2)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--check-names", type=int, default=0, metavar="N", help="also compare N names with faker's")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    start = a.n_mlps // 2 if a.start is None else a.start
    rng = f"{start}-{start + 1}"
    with tempfile.TemporaryDirectory(prefix="bench-seed-list-") as tmp:
        tmp = Path(tmp)
        seeds_file = tmp / "seeds.json"
        with open(seeds_file, "w") as f:
            subprocess.run([sys.executable, "-m", "whestbench", "dataset", "generate-seeds", "--n-mlps", str(a.n_mlps),
                            "--seed", "1"], stdout=f, check=True)
        commands = {
            "2-MLP bake (fixed cost)": ["dataset", "bake", "--n-mlps", "2", "--seed", "7", *SHAPE],
            f"--mlp-seeds FILE, --mlp-range {rng}": ["dataset", "bake", "--n-mlps", str(a.n_mlps), "--mlp-seeds",
                                                     str(seeds_file), "--mlp-range", rng, *SHAPE],
            f"--seed 7, --mlp-range {rng}": ["dataset", "bake", "--n-mlps", str(a.n_mlps), "--seed", "7",
                                             "--mlp-range", rng, *SHAPE],
        }
        print(f"{a.n_mlps:,}-seed list, slice {rng}, {a.repeats} run(s) each; load average {os.getloadavg()[0]:.2f}")
        results = {}
        for label, args in commands.items():
            runs = []
            for r in range(a.repeats):
                out = tmp / f"out-{len(results)}-{r}"
                runs.append(run([*args, "--output", str(out)]))
            wall = statistics.median(w for w, _ in runs)
            rss = max(m for _, m in runs)
            results[label] = {"wall_s": [w for w, _ in runs], "peak_rss_bytes": rss}
            print(f"  {label:<42} {wall:6.2f} s (median)   peak RSS {rss / 2**20:6.0f} MiB")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        if a.check_names:
            check_names(a.check_names, tmp / f"out-2-{a.repeats - 1}", 7, start, start + 2)
        if a.json:
            a.json.write_text(json.dumps({"n_mlps": a.n_mlps, "range": rng, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
