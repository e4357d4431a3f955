#!/usr/bin/env python
"""Accuracy per second: the time to reach a standard error E, whestbench 0.16.2 against ours, plain and
control-variate; and what computing the standard errors costs (issue 14).

Two parts (``--part accuracy|cost|all``, default all).

**accuracy.** Ground truth is as good as its standard error, so the figure of merit is how fast a tool
gets the final layer's median standard error (over neurons) down to ``E``, at 256×8 on this CPU. For
each estimator the N that reaches E is found from a pilot bake (not timed): the median per-sample
standard deviation ``sd`` of each MLP's final layer, ``N = (sd / E)²`` for the worst MLP, rounded up to a
whole 4096-row chunk. Then, alternating for ``--repeats`` rounds (machine load hits all alike):

- the reference, plain, at the plain N (its CPU path, default BLAS threading, as users run it);
- ours, plain (the default path, the reference's samples and means), at the plain N;
- ours, control-variate (default path) at the control-variate N;
- ours, control-variate with ``--torch --device cpu`` (the philox sampler), when torch is installed.

Every run is a whole ``whest dataset bake`` command (start-up, the control-variate pilot and writing
included). The reference stores no standard errors; its samples are ours-plain's (the same MLPs,
seeds and sampler: our default path is the reference's bits), so its standard errors are ours-plain's
at the same N. The report gives each run's seconds, the median standard error it reached at the final
layer and at layer 2, and the accuracy per second ``1 / (median stderr² · seconds)`` (samples-worth of
precision per second), with ratios to the reference. Issue 14's goal: control-variate ≥ 4× the
reference at the final layer and ≥ 10× at layer 2.

**cost.** The standard errors need a sum of squares beside every sum: one multiply-add per
activation, fused into the ReLU pass. This part times one 256×8 chunk's compute on one core (normals,
eight sgemms, eight fused ReLU+sum passes) with the squares and without, for the default path
(pcg64, 4096 rows, numba sums only vs ``relu_colsum_sq``) and for the torch CPU path (philox,
1024 rows, ``relu_tree`` without and with squares), interleaved, and prints the cost in per cent
(issue 14: under 3 %). It also times the control-variate estimator's extras: the pilot fit per MLP
and the per-chunk ``z₂²`` sums.

    .venv/bin/python benchmarks/bench_accuracy.py                        # ~10 min on 2 cores
    .venv/bin/python benchmarks/bench_accuracy.py --part cost
    .venv/bin/python benchmarks/bench_accuracy.py --target 3e-4 --repeats 3 --json acc.json

Needs this environment (numpy, pyarrow, threadpoolctl, our package; torch optional) and a reference
venv: ``--reference-python``, else ``tools/make-reference-venv.sh`` creates ``.refvenv``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from .bench_cpu import REF_CLI, REPO, base_env, log, machine_info, reference_python, run_timed, seeds_for
except ImportError:  # run as a script: its folder is on sys.path
    from bench_cpu import REF_CLI, REPO, base_env, log, machine_info, reference_python, run_timed, seeds_for

CHUNK = 4096  # N is rounded up to whole chunks of the default path at width 256 (and whole philox batches)


# --- pure parts (tests/benchmarks/ imports these) ----------------------------------------------------


def samples_for(sd_median: list[float], target: float, multiple: int = CHUNK) -> int:
    """The N at which every MLP's median standard error ``sd/√N`` is at most ``target``: the worst
    MLP's ``(sd/target)²``, rounded up to ``multiple``."""
    worst = max(sd_median)
    n = math.ceil((worst / target) ** 2)
    return max(multiple, -(-n // multiple) * multiple)


def accuracy_per_second(stderr_median: float, seconds: float) -> float:
    """``1 / (stderr² · s)``: the precision (inverse variance) a run buys per second; a plain bake of N
    samples with per-sample sd σ scores N / (σ² · s)."""
    return 1.0 / (stderr_median**2 * seconds)


def median_stderr(stderr, layer: int) -> list[float]:
    """Per MLP, the median over neurons of the standard errors of ``layer`` (``stderr`` (n, depth, w)),
    ignoring dead neurons (standard error 0 in every estimator: they are always 0)."""
    import numpy as np

    out = []
    for s in np.asarray(stderr, dtype=np.float64)[:, layer, :]:
        live = s[s > 0]
        out.append(float(np.median(live)) if live.size else 0.0)
    return out


# --- the accuracy part -------------------------------------------------------------------------------


@dataclass
class Run:
    who: str
    estimator: str
    n_samples: int
    seconds: list[float] = field(default_factory=list)
    median_s: float = 0.0
    stderr_final: list[float] = field(default_factory=list)
    """per MLP: median final-layer standard error reached"""
    stderr_layer2: list[float] = field(default_factory=list)
    acc_final: float = 0.0
    """accuracy per second at the final layer (worst MLP's median stderr)"""
    acc_layer2: float = 0.0
    ratio_final: float = 0.0
    ratio_layer2: float = 0.0


def read_stderr(output: Path):
    import numpy as np
    import pyarrow.parquet as pq

    rows = [r for p in sorted((output / "data").glob("*.parquet")) for r in pq.read_table(p).column("all_layer_stderr").to_pylist()]
    return np.asarray(rows, dtype=np.float64)


def read_means(output: Path):
    import numpy as np
    import pyarrow.parquet as pq

    rows = [r for p in sorted((output / "data").glob("*.parquet")) for r in pq.read_table(p).column("all_layer_means").to_pylist()]
    return np.asarray(rows, dtype=np.float64)


class Baker:
    def __init__(self, our_python: str, ref_python: str, workdir: Path, width: int, depth: int, n_mlps: int):
        self.our_python, self.ref_python, self.workdir = our_python, ref_python, workdir
        self.width, self.depth, self.n_mlps = width, depth, n_mlps
        self.env = base_env(workdir)
        self.seeds = workdir / "seeds.json"
        self.seeds.write_text(json.dumps(seeds_for(n_mlps)))
        self.n = 0

    def bake(self, who: str, n_samples: int, *, keep: bool = True) -> tuple[float, Path]:
        self.n += 1
        output = self.workdir / f"{self.n:03d}-{who}"
        args = ["dataset", "bake", "--n-mlps", str(self.n_mlps), "--n-samples", str(n_samples), "--width", str(self.width),
                "--depth", str(self.depth), "--mlp-seeds", str(self.seeds), "--output", str(output)]
        if who == "reference":
            cmd, env = [self.ref_python, "-c", REF_CLI] + args, self.env
        else:
            cmd = [self.our_python, "-m", "whestbench"] + args
            if "cv" in who:
                cmd += ["--estimator", "control-variate"]
            if "torch" in who:
                cmd += ["--torch", "--device", "cpu"]
            env = {**self.env, "PYTHONPATH": str(REPO / "src")}
        wall, _ = run_timed(cmd, env, output.with_suffix(".log"))
        if not keep:
            shutil.rmtree(output, ignore_errors=True)
        return wall, output


def accuracy(args, ref_python: str, workdir: Path) -> dict:
    width, depth = args.width, args.depth
    baker = Baker(sys.executable, ref_python, workdir, width, depth, args.n_mlps)
    with_torch = importlib.util.find_spec("torch") is not None and not args.no_torch
    # 1. pilot bakes (not timed): each estimator's per-sample sd at the final layer
    sd = {}
    for est, who in (("plain", "ours"), ("control-variate", "ours-cv")):
        _, out = baker.bake(f"pilot-{who}", args.pilot_samples)
        sd[est] = [s * math.sqrt(args.pilot_samples) for s in median_stderr(read_stderr(out), depth - 1)]
        shutil.rmtree(out, ignore_errors=True)
        log(f"pilot {est}: median final-layer sd per MLP {[round(x, 4) for x in sd[est]]}")
    n_plain, n_cv = samples_for(sd["plain"], args.target), samples_for(sd["control-variate"], args.target)
    log(f"target E = {args.target:g}: plain N = {n_plain:,}, control-variate N = {n_cv:,}")
    runs = {"reference": Run("reference", "plain", n_plain), "ours": Run("ours", "plain", n_plain),
            "ours-cv": Run("ours-cv", "control-variate", n_cv)}
    if with_torch:
        runs["ours-torch-cv"] = Run("ours-torch-cv", "control-variate", n_cv)
    # 2. timed runs, alternating
    last: dict[str, Path] = {}
    for r in range(args.repeats):
        for who, run in runs.items():
            wall, out = baker.bake(who, run.n_samples)
            run.seconds.append(wall)
            log(f"round {r + 1}/{args.repeats}: {who:14s} N = {run.n_samples:>11,}  {wall:8.2f} s")
            if who in last:
                shutil.rmtree(last[who], ignore_errors=True)
            last[who] = out
    # 3. the standard errors reached; the reference's are ours-plain's (same samples)
    agree = float(abs(read_means(last["ours"]) - read_means(last["reference"])).max())
    for who, run in runs.items():
        se = read_stderr(last["ours" if who == "reference" else who])
        run.stderr_final, run.stderr_layer2 = median_stderr(se, depth - 1), median_stderr(se, 1)
        run.median_s = statistics.median(run.seconds)
        run.acc_final = accuracy_per_second(max(run.stderr_final), run.median_s)
        run.acc_layer2 = accuracy_per_second(max(run.stderr_layer2), run.median_s)
    for run in runs.values():
        run.ratio_final = run.acc_final / runs["reference"].acc_final
        run.ratio_layer2 = run.acc_layer2 / runs["reference"].acc_layer2
    for out in last.values():
        shutil.rmtree(out, ignore_errors=True)
    return {"target": args.target, "width": width, "depth": depth, "n_mlps": args.n_mlps,
            "pilot_samples": args.pilot_samples, "pilot_sd": sd, "means_max_abs_diff_ours_vs_reference": agree,
            "runs": [asdict(r) for r in runs.values()]}


def print_accuracy(res: dict) -> None:
    w, d = res["width"], res["depth"]
    print(f"\n## Accuracy per second at {w}x{d}, {res['n_mlps']} MLPs, target median final-layer stderr E = {res['target']:g}\n")
    print("| run | estimator | N | seconds (median) | final-layer median stderr | layer-2 median stderr "
          "| accuracy/s final | vs reference | accuracy/s layer 2 | vs reference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in res["runs"]:
        flops = 2 * w * w * d * r["n_samples"] * res["n_mlps"] / r["median_s"] / 1e9
        print(f"| {r['who']} | {r['estimator']} | {r['n_samples']:,} | {r['median_s']:.2f} ({flops:.1f} GFLOP/s) "
              f"| {max(r['stderr_final']):.3g} | {max(r['stderr_layer2']):.3g} | {r['acc_final']:.4g} | **{r['ratio_final']:.2f}×** "
              f"| {r['acc_layer2']:.4g} | **{r['ratio_layer2']:.2f}×** |")
    print(f"\nours plain vs reference, all_layer_means: max |Δ| = {res['means_max_abs_diff_ours_vs_reference']:.3g} "
          "(the reference at its default BLAS threads; identical at one thread, see bench_cpu.py)")
    print("runs (s): " + "; ".join(f"{r['who']} " + ", ".join(f"{s:.2f}" for s in r["seconds"]) for r in res["runs"]))


# --- the cost part -----------------------------------------------------------------------------------


def _median_ms(fns: dict, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up (and compile)
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def cost(args) -> dict:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from numba import njit

    from whestbench.compute import estimators, fused, seeds
    from whestbench.compute.mlp import weights_for_seed

    @njit(nogil=True, fastmath=False)
    def relu_colsum(x, out):  # the sums-only baseline of fused.relu_colsum_sq: ReLU in place, out <- column sums
        n, w = x.shape
        for j in range(w):
            out[j] = 0.0
        for i in range(n):
            for j in range(w):
                v = x[i, j]
                if v < 0.0:
                    v = np.float32(0.0)
                    x[i, j] = v
                out[j] += np.float64(v)

    width, depth = args.width, args.depth
    w = weights_for_seed(1, width, depth)
    res: dict = {"width": width, "depth": depth}
    with threadpool_limits(limits=1, user_api="blas"):
        # default path: one 4096-row chunk, as Pcg64Stream.step runs it
        rows = CHUNK
        rng = np.random.default_rng(0)
        bufs = [np.empty((rows, width), dtype=np.float32) for _ in range(2)]
        out, out_sq = np.empty((depth, width)), np.empty((depth, width))

        def pcg64_chunk(with_sq: bool, z2: bool = False):
            def run():
                x = rng.standard_normal((rows, width), dtype=np.float32)
                for layer in range(depth):
                    h = bufs[layer % 2]
                    np.matmul(x, w[layer], out=h)
                    if z2 and layer == 1:
                        np.einsum("ij,ij->j", h, h, dtype=np.float64)
                    if with_sq:
                        fused.relu_colsum_sq(h, out[layer], out_sq[layer])
                    else:
                        relu_colsum(h, out[layer])
                    x = h
            return run

        t = _median_ms({"sums": pcg64_chunk(False), "sums+squares": pcg64_chunk(True),
                        "sums+squares+cv": pcg64_chunk(True, z2=True)}, args.cost_rounds)
        res["pcg64"] = {"rows": rows, "ms": t, "stderr_cost_pct": 100 * (t["sums+squares"] / t["sums"] - 1),
                        "cv_chunk_cost_pct": 100 * (t["sums+squares+cv"] / t["sums+squares"] - 1)}
        fit = []
        for _ in range(3):
            t0 = time.perf_counter()
            estimators.fit_controls(w, seeds.stream(1, seeds.PILOT))
            fit.append(time.perf_counter() - t0)
        res["cv_pilot_s_per_mlp"] = statistics.median(fit)
        if importlib.util.find_spec("torch") is not None and not args.no_torch:
            res["philox"] = _philox_cost(w, args.cost_rounds)
    return res


def _philox_cost(w, rounds: int) -> dict:
    import numpy as np
    import torch

    from whestbench.compute.philox import spec as philox
    from whestbench.compute.philox import numba_kernels as philox_numba

    torch.set_num_threads(1)
    depth, width, _ = w.shape
    rows = 1024
    layers = [torch.from_numpy(np.ascontiguousarray(w[i])) for i in range(depth)]
    x = np.empty((rows, width), dtype=np.float32)
    h = np.empty((rows, width), dtype=np.float32)
    levels = philox.level_of(rows) + 1
    stack, stack_sq = np.empty((levels, width)), np.empty((levels, width))
    used = np.empty(levels, dtype=np.bool_)
    out, out_sq = np.empty((depth, width)), np.empty((depth, width))
    philox_numba.load_kernels()

    def chunk(with_sq: bool):
        def run():
            philox_numba.normals_into((1, 2), 0, x)
            a, b = x, h
            for layer in range(depth):
                torch.mm(torch.from_numpy(a), layers[layer], out=torch.from_numpy(b))
                philox_numba.relu_tree(b, rows, with_sq, out[layer], out_sq[layer], stack, stack_sq, used)
                a, b = b, a
        return run

    t = _median_ms({"sums": chunk(False), "sums+squares": chunk(True)}, rounds)
    return {"rows": rows, "ms": t, "stderr_cost_pct": 100 * (t["sums+squares"] / t["sums"] - 1)}


def print_cost(res: dict) -> None:
    w, d = res["width"], res["depth"]
    print(f"\n## Cost of the standard errors at {w}x{d} (one chunk, one core, medians)\n")
    print("| path | rows | sums only | sums + squares | cost |")
    print("|---|---|---|---|---|")
    for name in ("pcg64", "philox"):
        if name in res:
            r = res[name]
            print(f"| {name} | {r['rows']} | {r['ms']['sums']:.2f} ms | {r['ms']['sums+squares']:.2f} ms | **{r['stderr_cost_pct']:+.2f} %** |")
    p = res["pcg64"]
    print(f"\ncontrol-variate extras: z₂² sums {p['cv_chunk_cost_pct']:+.2f} % per chunk ({p['ms']['sums+squares+cv']:.2f} ms); "
          f"pilot fit {res['cv_pilot_s_per_mlp']:.2f} s per MLP (once per MLP, whatever N)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("accuracy", "cost", "all"), default="all")
    p.add_argument("--target", type=float, default=4e-4, help="median final-layer standard error to reach (default 4e-4)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--n-mlps", type=int, default=2, help="MLPs per bake (default 2: one per core here)")
    p.add_argument("--pilot-samples", type=int, default=1 << 18, help="samples of the untimed pilot bakes (default 2^18)")
    p.add_argument("--repeats", type=int, default=1, help="timed rounds (default 1)")
    p.add_argument("--cost-rounds", type=int, default=30, help="timed chunks per variant in the cost part (default 30)")
    p.add_argument("--no-torch", action="store_true", help="leave out the torch CPU path")
    p.add_argument("--reference-python", help="python of a whestbench==0.16.2 venv (default: create/reuse .refvenv)")
    p.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    if not args.target > 0:
        p.error("--target must be positive")
    results: dict = {}
    if args.part in ("cost", "all"):
        results["cost"] = cost(args)
        print_cost(results["cost"])
    if args.part in ("accuracy", "all"):
        ref = reference_python(args.reference_python)
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="whest-bench-acc-"))
        workdir.mkdir(parents=True, exist_ok=True)
        results["machine"] = machine_info(ref)
        results["accuracy"] = accuracy(args, ref, workdir)
        results["machine"]["loadavg_end"] = list(os.getloadavg())
        print(f"\nmachine: {results['machine']['cpu']}, {results['machine']['logical_cpus']} CPUs; load average "
              f"{results['machine']['loadavg_start'][0]:.1f} → {results['machine']['loadavg_end'][0]:.1f}")
        print_accuracy(results["accuracy"])
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
