"""How often the trail's checks fail an honest bake: many small honest bakes, each verified (``pilot=False``:
the trail checks need no pilot), every trail check's verdict and margin counted.

    .venv/bin/python benchmarks/trail_false_alarms.py --datasets 120 [--seed 0] [--torch] [--json out.json]

Each dataset draws its shape at random (``--seed``): width 4–48, depth 1–4, 2–4 MLPs, N from 1.5·10⁵ to
8·10⁵ (pcg64 segments of one to two chunks, 6–32 of them), plain or control variates, ``--audit-segments``
8, 16, 32 or 64, ``--target-stderr`` on some; ``--torch``: torch CPU bakes (philox, aligned segments). It prints, per check (``trail contract``, ``trail``,
``trail segments``, ``trail drift``), how many datasets it failed, how many tests the segment families made,
and the largest statistic seen as a fraction of its limit (the margin an honest bake keeps). The checks are
Bonferroni-bounded at 10⁻⁶ per family per dataset, so a failure here is a bug, not bad luck.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

CHECKS = ("trail contract", "trail", "trail segments", "trail drift")


def one(rng: random.Random, root: Path, k: int, torch: bool = False) -> dict:
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation
    from whestbench.verify.run import verify_dataset

    width, depth = rng.choice([4, 8, 12, 16, 24, 32, 48]), rng.randint(1, 4)
    n_mlps, n = rng.randint(2, 4), rng.randint(150_000, 800_000)
    estimator = rng.choice(["plain", "control-variate"])
    target = rng.random() < 0.2
    est = Estimation(estimator, (0.004 if estimator == "plain" else 0.0005) if target else None, "last")
    segments = rng.choice([8, 16, 32, 64])
    out = root / f"ds{k}"
    bake(BakeConfig(n_mlps=n_mlps, n_samples=n, width=width, depth=depth, seed=rng.randrange(2**31), output=out,
                    estimation=est, audit_segments=segments,
                    **(dict(backend="torch", device="cpu", skip_device_check=True) if torch else dict(max_threads=1))))
    report = verify_dataset(out, pilot=False)
    row = {"shape": f"{width}x{depth}", "n_mlps": n_mlps, "n_samples": n, "estimator": estimator, "target": target,
           "segments": segments, "failed": [c.name for c in report.failures], "checks": {}}
    for c in report.checks:
        if c.name in CHECKS:
            row["checks"][c.name] = {"ok": c.ok, "skipped": c.skipped, "detail": c.detail}
    shutil.rmtree(out)
    return row


def margins(detail: str) -> dict[str, tuple[int, float]]:
    """``family -> (tests, largest fraction of its limit)`` from a passed ``trail segments`` line."""
    return {m[0]: (int(m[1].replace(",", "")), float(m[2]))
            for m in re.findall(r"(\w[\w ]*?) \(([\d,]+) tests; largest ([\d.]+) of its limit\)", detail)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--torch", action="store_true", help="torch CPU bakes (the philox sampler's aligned segments)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="trail-fa-") as tmp:
        for k in range(args.datasets):
            rows.append(one(rng, Path(tmp), k, args.torch))
            if rows[-1]["failed"]:
                print(f"dataset {k} ({rows[-1]['shape']}, {rows[-1]['estimator']}): FAILED {rows[-1]['failed']}",
                      flush=True)
    failed = {c: sum(1 for r in rows if c in r["failed"]) for c in CHECKS}
    ran = {c: sum(1 for r in rows if c in r["checks"] and not r["checks"][c]["skipped"]) for c in CHECKS}
    fams: dict[str, list] = {}
    for r in rows:
        seg = r["checks"].get("trail segments")
        if seg and seg["ok"] and not seg["skipped"]:
            for fam, (n, worst) in margins(seg["detail"]).items():
                fams.setdefault(fam, []).append((n, worst))
    print(f"{len(rows)} honest datasets in {time.time() - t0:.0f} s "
          f"({sum(r['n_mlps'] for r in rows)} MLPs; {sum(r['estimator'] != 'plain' for r in rows)} control-variate, "
          f"{sum(r['target'] for r in rows)} with a target)")
    for c in CHECKS:
        print(f"  {c}: ran on {ran[c]}, failed {failed[c]}")
    for fam, vals in fams.items():
        print(f"  trail segments / {fam}: {sum(n for n, _ in vals):,} tests, largest {max(w for _, w in vals):.2f} of "
              f"its limit (median dataset's largest {sorted(w for _, w in vals)[len(vals) // 2]:.2f})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
