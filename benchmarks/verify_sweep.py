"""False alarms of ``whest dataset verify`` on honest bakes, and its cost.

    python benchmarks/verify_sweep.py [--quick] [--json FILE]

Bakes a sweep of honest datasets — widths 1 to 256, depths 1 to 8, N from 10⁴ to 2·10⁶, the plain
and control-variate estimators, the pcg64 (CPU) and philox (torch, if installed) samplers, bakes to
a target standard error, merged slices and combined splits — and runs ``verify`` on each. Every one
must pass: the statistical checks are built to fail an honest dataset with probability ≤ 10⁻⁶, so a
single failure here is a bug. Prints one line per bake (shape, N, estimator, sampler, verify's
seconds, its worst statistical margin) and a summary; ``--json`` writes the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def cases(quick: bool) -> list[dict]:
    out = []
    shapes = [(1, 1), (1, 8), (2, 3), (3, 5), (5, 2), (8, 8), (16, 3), (37, 4), (64, 2), (64, 6), (128, 3), (256, 2),
              (256, 8)]
    for k, (w, d) in enumerate(shapes):
        big = w * w * d >= 64 * 64 * 6
        out.append(dict(width=w, depth=d, n=10_000 if big else 200_000, estimator="plain", sampler="pcg64"))
        out.append(dict(width=w, depth=d, n=2_000_000 if w * w * d <= 16 * 16 * 3 else 40_000, estimator="control-variate",
                        sampler="pcg64"))
        if k % 2 == 0:
            out.append(dict(width=w, depth=d, n=10_000 if big else 150_000, estimator="plain", sampler="philox"))
        if k % 3 == 0:
            out.append(dict(width=w, depth=d, n=300_000, estimator="control-variate", sampler="philox"))
    for w, d, est in ((8, 3, "plain"), (16, 4, "control-variate"), (4, 1, "plain"), (32, 2, "plain")):
        out.append(dict(width=w, depth=d, n=2_000_000, estimator=est, sampler="pcg64", target=2e-3))
    out.append(dict(width=16, depth=3, n=400_000, estimator="plain", sampler="philox", target=3e-3))
    out.append(dict(width=16, depth=4, n=100_000, estimator="plain", sampler="pcg64", kind="merged"))
    out.append(dict(width=16, depth=4, n=100_000, estimator="control-variate", sampler="pcg64", kind="merged"))
    out.append(dict(width=12, depth=3, n=100_000, estimator="plain", sampler="pcg64", kind="combined"))
    out.append(dict(width=12, depth=3, n=60_000, estimator="control-variate", sampler="pcg64", kind="combined"))
    return out[::4] if quick else out


def bake_case(root: Path, c: dict, k: int) -> Path:
    from whestbench.bake.pipeline import create_dataset
    from whestbench.dataset_io import combine_split_datasets, merge_datasets

    def one(out, **kw):
        args = dict(n_samples=c["n"], width=c["width"], depth=c["depth"], estimator=c["estimator"],
                    target_stderr=c.get("target"), output_path=out) | kw
        if c["sampler"] == "philox":
            from whestbench.dataset_torch import create_dataset_torch

            return create_dataset_torch(**args, device="cpu")
        return create_dataset(**args)

    kind = c.get("kind")
    if kind == "merged":
        seeds = [9000 + 10 * k + i for i in range(4)]
        parts = [one(root / f"p{j}", n_mlps=4, mlp_seeds=seeds, mlp_range=r) for j, r in enumerate([(0, 2), (2, 4)])]
        return merge_datasets(parts, output_dir=root / "merged")
    if kind == "combined":
        a = one(root / "a", n_mlps=3, seed=500 + k)
        b = one(root / "b", n_mlps=2, seed=600 + k, split="holdout", config="holdout")
        return combine_split_datasets([a, b], output_dir=root / "combined", write_prepared_arrow=False)
    return one(root / "ds", n_mlps=4, seed=100 + k)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every fourth case only")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    from whestbench.verify.run import verify_dataset

    results, alarms = [], 0
    for k, c in enumerate(cases(args.quick)):
        if c["sampler"] == "philox" and not have_torch:
            continue
        root = Path(tempfile.mkdtemp(prefix="whest-sweep-"))
        try:
            t0 = time.perf_counter()
            ds = bake_case(root, c, k)
            t_bake = time.perf_counter() - t0
            t0 = time.perf_counter()
            report = verify_dataset(ds)
            t_verify = time.perf_counter() - t0
        finally:
            shutil.rmtree(root, ignore_errors=True)
        failed = [f"{x.name}: {x.detail}" for x in report.failures]
        alarms += bool(failed)
        row = dict(c, ok=report.ok, bake_s=round(t_bake, 2), verify_s=round(t_verify, 2), failed=failed)
        results.append(row)
        what = f"{c['width']}x{c['depth']} N={c['n']:,} {c['estimator']} {c['sampler']}"
        what += f" target={c['target']:g}" if c.get("target") else ""
        what += f" {c['kind']}" if c.get("kind") else ""
        print(f"{'ok  ' if report.ok else 'FAIL'} {what:58s} bake {t_bake:6.1f} s  verify {t_verify:5.1f} s"
              + (f"  {failed[0][:160]}" if failed else ""), flush=True)
    print(f"{len(results)} honest bakes, {alarms} false alarm(s)")
    if args.json:
        args.json.write_text(json.dumps({"cases": results, "false_alarms": alarms}, indent=2))
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
