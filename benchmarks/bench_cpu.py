#!/usr/bin/env python
"""CPU bake benchmark: our ``whest dataset bake`` against whestbench 0.16.2's, side by side.

SPEC §6 measures speed as a ratio against the released reference on the same machine, same shapes
and seeds, in one run. For each shape this script bakes with ours and with the reference,
alternating (ours, reference, ours, reference, ...) so drifting machine load hits both, and prints
the median wall time of each, the ratio, and the effective throughput ``2·w²·d·N·n_mlps / s``. Both
run the way users run them: ours with its default worker count (all cores), the reference with its
default BLAS threading (no ``OPENBLAS_NUM_THREADS`` pin). Times are whole-process wall times, so they
include each tool's start-up (ours ~0.4 s, ~2 s with torch; the reference's ~1.2 s: see
``bench_startup.py``), as a user's would. Our side runs this checkout's ``src/``.

It also reports this machine's fp32 matmul rate (numpy sgemm, 4096×256 @ 256×256, all threads and
one), ours as a percentage of it, our peak RSS at N and 4·N samples (memory must not grow with
n_samples), and — in a final side run with single-threaded BLAS for the reference — whether our
output is bit-identical to the reference's (SPEC §2, contract (a)).

    .venv/bin/python benchmarks/bench_cpu.py                       # defaults: about 3–5 min on 2 cores
    .venv/bin/python benchmarks/bench_cpu.py --repeats 5 --json bench.json
    .venv/bin/python benchmarks/bench_cpu.py --shape 256x8:2:100000 --reference-python /tmp/refvenv/bin/python

Needs only this environment (python stdlib, numpy, pyarrow, threadpoolctl, our package) and a
reference venv: ``--reference-python``, else ``tools/make-reference-venv.sh`` creates ``.refvenv``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from .shapes import Shape, count, shape_arg
except ImportError:  # run as a script, ``python benchmarks/bench_cpu.py``: its folder is on sys.path
    from shapes import Shape, count, shape_arg

REPO = Path(__file__).resolve().parents[1]
MAKE_VENV = REPO / "tools" / "make-reference-venv.sh"
# The reference's CLI as its console script runs it (our `whest` may come first on PATH).
REF_CLI = "import sys; from whestbench.cli import main; sys.exit(main())"
THREAD_PINS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SINGLE_THREAD = {k: "1" for k in THREAD_PINS}
BREAKDOWN = "sampling_budget_breakdown"


@dataclass
class ShapeResult:
    shape: str
    width: int
    depth: int
    n_mlps: int
    n_samples: int
    ours_s: list[float] = field(default_factory=list)
    reference_s: list[float] = field(default_factory=list)
    ours_median_s: float = 0.0
    reference_median_s: float = 0.0
    speedup: float = 0.0
    """reference seconds / our seconds."""
    paired_speedups: list[float] = field(default_factory=list)
    """run by run: reference run i / our run i (neighbours in time, so they saw the same load)."""
    ours_gflops: float = 0.0
    reference_gflops: float = 0.0
    ours_pct_of_sgemm: float = 0.0
    identical: bool | None = None
    identity_detail: str = ""
    reference_threads_detail: str = ""
    """the reference at its default BLAS threads against itself at one thread (SPEC §2 (c): it may differ)."""
    torch_s: list[float] = field(default_factory=list)
    """our torch backend on the CPU (philox sampler): not bit-compatible with the reference, faster."""
    torch_median_s: float = 0.0
    torch_speedup: float = 0.0
    torch_paired_speedups: list[float] = field(default_factory=list)
    torch_gflops: float = 0.0
    torch_pct_of_sgemm: float = 0.0


def seeds_for(n: int) -> list[int]:
    """Fixed, distinct int63 seeds (a Weyl sequence), so every run bakes the same MLPs."""
    return [(0x9E3779B97F4A7C15 * (i + 1)) % 2**63 for i in range(n)]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def base_env(workdir: Path) -> dict[str, str]:
    """This environment without BLAS thread pins, offline, with a throw-away HF cache."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_PINS and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HOME=str(workdir / "hf-home"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONWARNINGS="ignore")
    return env


def run_timed(cmd: list[str], env: dict[str, str], log_path: Path) -> tuple[float, int]:
    """Run ``cmd`` to completion; return (wall seconds, the child's peak RSS in bytes)."""
    with open(log_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's maximum
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    rss_kib = usage.ru_maxrss  # Linux reports KiB
    return wall, rss_kib * 1024 if sys.platform != "darwin" else rss_kib


class Bakers:
    """Builds and runs the two bake commands for a shape, in a scratch directory."""

    def __init__(self, our_python: str, ref_python: str, workdir: Path):
        self.our_python, self.ref_python, self.workdir = our_python, ref_python, workdir
        self.env = base_env(workdir)
        self.n = 0

    def _args(self, shape: Shape, output: Path) -> list[str]:
        seeds = self.workdir / f"seeds-{shape.n_mlps}.json"
        if not seeds.exists():
            seeds.write_text(json.dumps(seeds_for(shape.n_mlps)))
        return [
            "dataset", "bake", "--n-mlps", str(shape.n_mlps), "--n-samples", str(shape.n_samples),
            "--width", str(shape.width), "--depth", str(shape.depth), "--mlp-seeds", str(seeds), "--output", str(output),
        ]

    def bake(self, who: str, shape: Shape, *, extra_env: dict[str, str] | None = None, keep: bool = False) -> tuple[float, int, Path]:
        self.n += 1
        output = self.workdir / f"{self.n:03d}-{who}-{shape.label}"
        ours = who.startswith("ours")
        head = [self.our_python, "-m", "whestbench"] if ours else [self.ref_python, "-c", REF_CLI]
        tail = ["--torch", "--device", "cpu"] if who == "ours-torch" else []
        env = {**self.env, **({"PYTHONPATH": str(REPO / "src")} if ours else {}), **(extra_env or {})}  # this checkout's code
        wall, rss = run_timed(head + self._args(shape, output) + tail, env, output.with_suffix(".log"))
        if not keep:
            shutil.rmtree(output, ignore_errors=True)
        return wall, rss, output


def sgemm_gflops(threads: int, seconds: float = 0.4, trials: int = 5) -> float:
    """Peak fp32 matmul rate of numpy's BLAS here: (4096, 256) @ (256, 256), best of ``trials``."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    out = np.empty((4096, 256), dtype=np.float32)
    flops = 2 * 4096 * 256 * 256
    best = 0.0
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(a, b, out=out)
        for _ in range(trials):
            reps, t0 = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - t0) < seconds:
                np.matmul(a, b, out=out)
                reps += 1
            best = max(best, flops * reps / elapsed / 1e9)
    return best


def compare(ours: Path, ref: Path) -> tuple[bool, str]:
    """Bit identity of every column but the breakdown; the breakdown's FLOP counts (not its times)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(d: Path) -> pa.Table:
        return pa.concat_tables([pq.read_table(p) for p in sorted((d / "data").glob("*.parquet"))])

    def leaf_bytes(t: pa.Table, name: str) -> bytes:
        arr = t.column(name).combine_chunks()
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        while pa.types.is_list(arr.type) or pa.types.is_fixed_size_list(arr.type) or pa.types.is_large_list(arr.type):
            arr = arr.flatten()
        if pa.types.is_string(arr.type):
            return json.dumps(arr.to_pylist()).encode()
        return np.asarray(arr.to_numpy(zero_copy_only=False)).tobytes()

    def counts(text: str) -> dict:
        bd = json.loads(text)
        return {
            "flops_used": bd["flops_used"],
            "ops": {ns: [(op, o["flop_cost"], o["calls"]) for op, o in v["operations"].items()] for ns, v in bd["by_namespace"].items()},
        }

    a, b = table(ours), table(ref)
    differ = [c for c in a.column_names if c != BREAKDOWN and leaf_bytes(a, c) != leaf_bytes(b, c)]
    if [counts(s) for s in a.column(BREAKDOWN).to_pylist()] != [counts(s) for s in b.column(BREAKDOWN).to_pylist()]:
        differ.append(f"{BREAKDOWN} (FLOP counts)")
    if differ:
        return False, "differs in " + ", ".join(differ)
    return True, f"{len(a.column_names)} columns identical ({BREAKDOWN}: FLOP counts) over {a.num_rows} MLPs"


def means_drift(a: Path, b: Path) -> str:
    """How far two bakes of the same MLPs are apart in ``all_layer_means`` (identical, or the largest |Δ|)."""
    import numpy as np
    import pyarrow.parquet as pq

    def means(d: Path):
        rows = [m for p in sorted((d / "data").glob("*.parquet")) for m in pq.read_table(p).column("all_layer_means").to_pylist()]
        return np.asarray(rows, dtype=np.float32)

    x, y = means(a), means(b)
    if x.tobytes() == y.tobytes():
        return "identical"
    return f"max |Δ all_layer_means| = {np.max(np.abs(x.astype(np.float64) - y)):.3g}"


def reference_python(given: str | None) -> str:
    if given:
        return given
    log(f"no --reference-python: creating/reusing .refvenv with {MAKE_VENV.relative_to(REPO)}")
    made = subprocess.run(["bash", str(MAKE_VENV)], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise SystemExit(f"{MAKE_VENV} failed: {made.stderr.strip()[-2000:]}\nPass --reference-python PATH instead.")
    return made.stdout.strip().splitlines()[-1]


def machine_info(ref_python: str) -> dict:
    import numpy
    from threadpoolctl import threadpool_info

    blas = [{k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")} for i in threadpool_info() if i.get("user_api") == "blas"]
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ref_versions = subprocess.run(
        [ref_python, "-c", "from importlib.metadata import version as v; print(v('whestbench'), v('numpy'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    return {
        "cpu": cpu, "logical_cpus": os.cpu_count(), "python": platform.python_version(),
        "numpy": numpy.__version__, "blas": blas, "reference_whestbench": ref_versions[0], "reference_numpy": ref_versions[1],
        "loadavg_start": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", type=shape_arg, metavar="WxD:N_MLPS:N_SAMPLES",
                   help="shape to time (repeatable; default: 256x8:4:200000 and 64x4:8:1000000)")
    p.add_argument("--repeats", type=int, default=3, help="timed bakes per tool per shape (default 3)")
    p.add_argument("--reference-python", help="python of a whestbench==0.16.2 venv (default: create/reuse .refvenv)")
    p.add_argument("--rss-shape", type=shape_arg, default=shape_arg("64x4:2:250000"),
                   help="our peak RSS is measured at this shape's N and 4N (default 64x4:2:250000)")
    p.add_argument("--identity-samples", type=count, default=20001,
                   help="n_samples of the bit-identity side run (default 20001: several chunks and a ragged tail)")
    p.add_argument("--skip-identity", action="store_true", help="skip the bit-identity side run")
    p.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the results as JSON")
    p.add_argument("--no-torch", action="store_true", help="skip our torch backend (--torch --device cpu)")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401

        with_torch = not args.no_torch
    except ImportError:
        with_torch = False
    shapes = args.shape or [Shape(256, 8, 4, 200_000), Shape(64, 4, 8, 1_000_000)]
    if args.repeats < 1:
        p.error("--repeats must be at least 1")

    ref_python = reference_python(args.reference_python)
    info = machine_info(ref_python)
    cores = os.cpu_count() or 1
    if info["loadavg_start"][0] > 0.25 * cores:
        log(f"warning: load average {info['loadavg_start'][0]:.2f} on {cores} CPUs: other work is running; timings will be noisy")

    with tempfile.TemporaryDirectory(prefix="whest-bench-", dir=args.workdir) as tmp:
        bakers = Bakers(sys.executable, ref_python, Path(tmp))
        log("measuring numpy sgemm (4096x256 @ 256x256) ...")
        sgemm_runs = [{"all_threads": sgemm_gflops(cores), "one_thread": sgemm_gflops(1)}]

        log("warming up both tools (imports, numba cache) ...")
        for who in ("ours", "reference"):
            bakers.bake(who, Shape(64, 4, 1, 2000))
        # a second tiny bake each: what every timed run pays besides the sampling (start-up, writing)
        overhead = {who: bakers.bake(who, Shape(64, 4, 1, 2000))[0] for who in ("ours", "reference")}

        results = []
        for shape in shapes:
            r = ShapeResult(shape.label, shape.width, shape.depth, shape.n_mlps, shape.n_samples)
            contenders = [("ours", r.ours_s), ("reference", r.reference_s)]
            if with_torch:
                contenders.insert(1, ("ours-torch", r.torch_s))
            for i in range(args.repeats):
                for who, times in contenders:
                    wall, _, _ = bakers.bake(who, shape)
                    times.append(wall)
                    log(f"  {shape.label} {shape.n_mlps}x{shape.n_samples:,} run {i + 1}/{args.repeats} {who:9s} {wall:7.2f} s "
                        f"({shape.flops / wall / 1e9:6.1f} GFLOP/s)")
            r.ours_median_s = statistics.median(r.ours_s)
            r.reference_median_s = statistics.median(r.reference_s)
            r.speedup = r.reference_median_s / r.ours_median_s
            r.paired_speedups = [ref / o for ref, o in zip(r.reference_s, r.ours_s)]
            r.ours_gflops = shape.flops / r.ours_median_s / 1e9
            r.reference_gflops = shape.flops / r.reference_median_s / 1e9
            if r.torch_s:
                r.torch_median_s = statistics.median(r.torch_s)
                r.torch_speedup = r.reference_median_s / r.torch_median_s
                r.torch_paired_speedups = [ref / t for ref, t in zip(r.reference_s, r.torch_s)]
                r.torch_gflops = shape.flops / r.torch_median_s / 1e9
            results.append(r)
        # measured again after the timed bakes and the best kept: it is a ceiling, and load is transient
        sgemm_runs.append({"all_threads": sgemm_gflops(cores), "one_thread": sgemm_gflops(1)})
        sgemm = {k: max(run[k] for run in sgemm_runs) for k in sgemm_runs[0]}
        if cores > 1 and sgemm["all_threads"] < 1.2 * sgemm["one_thread"]:
            log("warning: sgemm on all threads is barely faster than on one: the CPUs are shared with other work")
        for r in results:
            r.ours_pct_of_sgemm = 100 * r.ours_gflops / sgemm["all_threads"]
            r.torch_pct_of_sgemm = 100 * r.torch_gflops / sgemm["all_threads"]

        rss_shape = args.rss_shape
        rss = []
        for who in ("ours", "ours-torch") if with_torch else ("ours",):
            for n in (rss_shape.n_samples, 4 * rss_shape.n_samples):
                s = Shape(rss_shape.width, rss_shape.depth, rss_shape.n_mlps, n)
                wall, peak, _ = bakers.bake(who, s)
                rss.append({"who": who, "n_samples": n, "peak_rss_mib": peak / 2**20, "seconds": wall})
                log(f"  RSS {who} {s.label} {s.n_mlps}x{n:,}: {peak / 2**20:.0f} MiB")

        if not args.skip_identity:
            for r, shape in zip(results, shapes):
                s = Shape(shape.width, shape.depth, shape.n_mlps, args.identity_samples)
                _, _, ours = bakers.bake("ours", s, keep=True)
                _, _, ref = bakers.bake("reference", s, extra_env=SINGLE_THREAD, keep=True)
                _, _, ref_threads = bakers.bake("reference", s, keep=True)  # its default BLAS threads
                r.identical, r.identity_detail = compare(ours, ref)
                r.reference_threads_detail = means_drift(ref_threads, ref)
                for d in (ours, ref, ref_threads):
                    shutil.rmtree(d, ignore_errors=True)
                log(f"  identity {shape.label}: {r.identity_detail}; reference all vs 1 BLAS thread: {r.reference_threads_detail}")
    info["loadavg_end"] = list(os.getloadavg())

    print_report(info, sgemm, overhead, results, rss, args)
    if args.json:
        report = {"machine": info, "sgemm_gflops": sgemm, "sgemm_runs": sgemm_runs, "tiny_bake_s": overhead, "shapes": [asdict(r) for r in results], "rss": rss,
                  "repeats": args.repeats, "identity_samples": None if args.skip_identity else args.identity_samples}
        args.json.write_text(json.dumps(report, indent=2))
        log(f"wrote {args.json}")
    return 0 if all(r.identical is not False for r in results) else 1


def print_report(info: dict, sgemm: dict, overhead: dict, results: list[ShapeResult], rss: list[dict], args) -> None:
    blas = info["blas"][0] if info["blas"] else {}
    print(f"\nmachine: {info['cpu']}, {info['logical_cpus']} logical CPUs; numpy {info['numpy']} "
          f"({blas.get('internal_api')} {blas.get('version')} {blas.get('architecture')}); "
          f"reference whestbench {info['reference_whestbench']} (numpy {info['reference_numpy']}); "
          f"load avg {info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f}")
    print(f"numpy sgemm 4096x256 @ 256x256 (best of before/after): {sgemm['all_threads']:.1f} GFLOP/s all threads, "
          f"{sgemm['one_thread']:.1f} GFLOP/s one thread")
    print(f"fixed cost per run (start-up + writing; a 1-MLP 64x4 bake of 2,000 samples): "
          f"ours {overhead['ours']:.2f} s, reference {overhead['reference']:.2f} s (included in the times below)")
    print(f"median of {args.repeats} alternating runs each; ours = default workers, reference = default BLAS threads\n")
    head = f"{'shape':>7} {'MLPs':>5} {'N':>11} {'ours s':>8} {'ref s':>8} {'ref/ours':>8} {'ours GF/s':>10} {'ref GF/s':>9} {'ours %sgemm':>11}  identical (ref 1 BLAS thread)"
    print(head)
    print("-" * len(head))
    for r in results:
        ident = "skipped" if r.identical is None else ("yes" if r.identical else "NO: " + r.identity_detail)
        print(f"{r.shape:>7} {r.n_mlps:>5} {r.n_samples:>11,} {r.ours_median_s:>8.2f} {r.reference_median_s:>8.2f} "
              f"{r.speedup:>7.2f}x {r.ours_gflops:>10.1f} {r.reference_gflops:>9.1f} {r.ours_pct_of_sgemm:>10.0f}%  {ident}")
    drift = [r for r in results if r.reference_threads_detail]
    if drift:
        print("\nthe reference at its default BLAS threads vs at one thread (SPEC §2 (c): not required to agree): "
              + "; ".join(f"{r.shape} {r.reference_threads_detail}" for r in drift))
    torch_rows = [r for r in results if r.torch_s]
    if torch_rows:
        print("\nour torch backend on the CPU (--torch --device cpu, philox sampler; same runs, alternating):")
        for r in torch_rows:
            print(f"{r.shape:>7} {r.n_mlps:>5} {r.n_samples:>11,} {r.torch_median_s:>8.2f} {r.reference_median_s:>8.2f} "
                  f"{r.torch_speedup:>7.2f}x {r.torch_gflops:>10.1f} {r.reference_gflops:>9.1f} {r.torch_pct_of_sgemm:>10.0f}%")
    print("\nrun by run (reference run i / ours run i; each pair ran back to back):")
    for r in results:
        for who, ratios in (("ours", r.paired_speedups), ("ours-torch", r.torch_paired_speedups)):
            if ratios:
                print(f"{r.shape:>7} {who:>10}: " + "  ".join(f"{x:.2f}x" for x in ratios)
                      + f"   (median {statistics.median(ratios):.2f}x, min {min(ratios):.2f}x)")
    for who in sorted({x["who"] for x in rss}):
        rows = [x for x in rss if x["who"] == who]
        a, b = rows[0], rows[-1]
        print(f"\npeak RSS of {who} at {args.rss_shape.label} x {args.rss_shape.n_mlps} MLPs: "
              + ", ".join(f"N={x['n_samples']:,}: {x['peak_rss_mib']:.0f} MiB" for x in rows)
              + f" (x{b['peak_rss_mib'] / a['peak_rss_mib']:.2f} for x{b['n_samples'] // a['n_samples']} samples)")


if __name__ == "__main__":
    sys.exit(main())
