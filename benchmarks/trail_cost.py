"""What the audit trail costs a bake: the same bake with ``--audit-segments S`` and with 0, in CPU seconds.

    python benchmarks/trail_cost.py [--width 256] [--depth 8] [--n 262144] [--segments 32] [--pairs 6]
                                    [--torch]

Runs the bake as a whole command (one MLP, one thread: ``--max-threads 1``, or ``--torch --device cpu``
with torch at one thread), alternating with and without the trail for ``--pairs`` pairs, and reports
the CPU seconds (user + system of the child) of each run, the median of each side and the median of
the per-pair ratios. CPU time rather than wall time: on a shared machine the wall time of one run
moves by tens of per cent with the load, the CPU time of a single-threaded run much less, and a pair's
two runs see about the same load. Both sides write identical numeric columns (checked: the trail
never changes the numbers).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu_seconds(cmd: list[str], env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _same_columns(a: Path, b: Path) -> bool:
    """Whether two bakes hold identical columns, every split (``sampling_budget_breakdown`` aside: it
    records wall times)."""
    from whestbench.format.reader import open_dataset, read_table

    def table(d: Path, split: str):
        t = read_table(d, split)
        return t.drop_columns(["sampling_budget_breakdown"]) if "sampling_budget_breakdown" in t.column_names else t

    return all(table(a, s).equals(table(b, s)) for s in open_dataset(a).meta().splits)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--n", type=int, default=2**18)
    ap.add_argument("--segments", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--torch", action="store_true", help="the philox torch path on the CPU (else the default pcg64 path)")
    args = ap.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    path = ["--torch", "--device", "cpu"] if args.torch else ["--max-threads", "1"]
    base = [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "1", "--seed", "11", "--quiet",
            "--width", str(args.width), "--depth", str(args.depth), "--n-samples", str(args.n), *path]
    with tempfile.TemporaryDirectory() as tmp:
        on, off = [], []
        for i in range(args.pairs):
            for segments, into in ((args.segments, on), (0, off)) if i % 2 == 0 else ((0, off), (args.segments, on)):
                out = Path(tmp) / f"ds-{segments}-{i}"
                into.append(cpu_seconds(base + ["--audit-segments", str(segments), "--output", str(out)], env))
        same = _same_columns(Path(tmp) / f"ds-{args.segments}-0", Path(tmp) / "ds-0-0")
    ratios = [a / b for a, b in zip(on, off)]
    shape = f"{args.width}x{args.depth}, N = {args.n:,}, {'torch cpu (philox)' if args.torch else 'pcg64'}"
    print(f"{shape}: with S = {args.segments}: " + ", ".join(f"{v:.2f}" for v in on) + " s CPU")
    print(f"{shape}: without (S = 0): " + ", ".join(f"{v:.2f}" for v in off) + " s CPU")
    print(f"identical columns (wall times aside) with and without the trail: {same}")
    se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
    print(f"median {statistics.median(on):.2f} s vs {statistics.median(off):.2f} s; per-pair ratio median "
          f"{statistics.median(ratios):.4f} (min {min(ratios):.4f}, max {max(ratios):.4f}), mean {statistics.mean(ratios):.4f} "
          f"± {se:.4f} (one standard error): the trail's cost is {100 * (statistics.mean(ratios) - 1):+.1f} % "
          f"± {100 * se:.1f} %")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
