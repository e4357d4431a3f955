"""False alarms of verify's audit-trail checks (``trail``, ``trail drift``) on honest bakes.

    python benchmarks/trail_sweep.py [--bakes 48] [--json FILE]

Bakes that many small honest datasets with different seeds — widths 1 to 32, depths 1 to 4, N from
2·10⁴ to 6·10⁵, plain and control-variate, pcg64 and (every fourth, torch installed) philox, some to a
target standard error, S from 4 to 32 — and runs ``verify`` on each. The ``trail`` check is an
identity (it cannot fail an honest bake); ``trail drift`` is built to fail one with probability
≤ 10⁻⁶. Prints one line per bake and the count of failures (any failure is a bug).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path


def cases(n: int) -> list[dict]:
    rnd = random.Random(29)
    out = []
    for k in range(n):
        w, d = rnd.choice([1, 2, 4, 8, 12, 16, 32]), rnd.choice([1, 2, 3, 4])
        out.append(dict(seed=1000 + k, width=w, depth=d, n=rnd.choice([20_000, 100_000, 200_000, 600_000]),
                        estimator=rnd.choice(["plain", "control-variate"]),
                        sampler="philox" if k % 4 == 3 else "pcg64", segments=rnd.choice([4, 8, 16, 32, 32]),
                        target=rnd.choice([None, None, None, 4e-3])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bakes", type=int, default=48)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation
    from whestbench.verify.run import verify_dataset

    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    rows, failures = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, c in enumerate(cases(args.bakes)):
            if c["sampler"] == "philox" and not have_torch:
                continue
            torch_kw = dict(backend="torch", device="cpu", skip_device_check=True) if c["sampler"] == "philox" else {}
            cfg = BakeConfig(n_mlps=3, seed=c["seed"], n_samples=c["n"], width=c["width"], depth=c["depth"],
                             output=Path(tmp) / f"ds{k}", audit_segments=c["segments"],
                             estimation=Estimation(c["estimator"], c["target"]), **torch_kw)
            bake(cfg)
            t0 = time.perf_counter()
            report = verify_dataset(cfg.output)
            wall = time.perf_counter() - t0
            trail = [ch for ch in report.checks if ch.name.endswith("trail") or ch.name.endswith("trail drift")]
            bad = [ch for ch in trail if not ch.ok]
            failures += bool(bad)
            drift = next((ch for ch in trail if ch.name.endswith("drift")), None)
            rows.append(dict(case=c, verify_s=round(wall, 2), ok=not bad,
                             drift="skipped" if drift is None or drift.skipped else drift.detail,
                             failed=[f"{ch.name}: {ch.detail}" for ch in bad]))
            print(f"{k:3d} {c['sampler']:6s} {c['estimator']:15s} {c['width']:3d}x{c['depth']} N={c['n']:>7,} "
                  f"S={c['segments']:2d} target={c['target']} -> {'ok' if not bad else 'FAIL ' + bad[0].detail}",
                  flush=True)
    print(f"{len(rows)} honest bakes, {failures} with a trail false alarm")
    if args.json:
        args.json.write_text(json.dumps({"bakes": len(rows), "false_alarms": failures, "rows": rows}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
