"""The smallest damage ``whest dataset verify`` catches, with and without the audit trail.

    python benchmarks/verify_power.py [--n 200000] [--width 16] [--depth 3] [--mlps 4] [--json FILE]

Bakes one dataset per estimator (plain, control-variate) twice — with the audit trail (S = 32) and
without (``--audit-segments 0``) — then damages a copy and re-signs its checksums (rows rewritten
through the writer, the trail carried unchanged), as a careful forger or a faulty device would leave
it, and runs verify. Each damage grows until verify fails; the table gives the smallest caught:

- ``stderr xF`` / ``stderr /F``: one MLP's ``all_layer_stderr`` scaled;
- ``N xK``: ``n_samples`` inflated K-fold with every error bar scaled by 1/sqrt(K) to match;
- ``neuron +Z se``: one neuron of layer 2 of one MLP moved by Z stored standard errors;
- ``layer +Z se``: every neuron of one MLP's last layer moved by Z stored standard errors.

A spot check (``--spot-check``) adds the regenerated segments' own power, ``1 − (1 − f)^K``, against
a trail forged together with the columns: tests/verify/test_spot_check.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

STDERR_UP = [1.01, 1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 4.0]
STDERR_DOWN = [0.99, 0.98, 0.95, 0.9, 0.8, 0.67, 0.5, 0.25]
N_UP = [1.05, 1.1, 1.25, 1.5, 2.0, 4.0, 8.0]
SHIFTS = [0.5, 1, 2, 5, 10, 20, 50, 100, 500, 2000, 10000]


def rewrite(src: Path, dst: Path, edit_row=None, md_update=None) -> Path:
    import pyarrow.parquet as pq

    from whestbench.format.reader import data_files
    from whestbench.format.writer import write_dataset

    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    md.update(md_update or {})
    rows = pq.read_table(data_files(src, md["split"])[0]).to_pylist()
    for i, row in enumerate(rows):
        if edit_row is not None:
            edit_row(i, row)
    audit = src / md["audit"]["file"] if "audit" in md else None
    return write_dataset(dst, md["split"], rows, len(rows), md["width"], md["depth"], md, audit_from=audit)


def caught(src: Path, tmp: Path, edit_row=None, md_update=None) -> tuple[bool, list[str]]:
    from whestbench.verify.run import verify_dataset

    out = tmp / "damaged"
    shutil.rmtree(out, ignore_errors=True)
    report = verify_dataset(rewrite(src, out, edit_row, md_update))
    return not report.ok, [c.name for c in report.failures]


def _scale_stderr(mlp: int, f: float):
    def edit(i, row):
        if i == mlp:
            row["all_layer_stderr"] = (np.asarray(row["all_layer_stderr"], dtype=np.float32) * np.float32(f)).tolist()
    return edit


def _all_stderr(f: float):
    def edit(i, row):
        row["all_layer_stderr"] = (np.asarray(row["all_layer_stderr"], dtype=np.float32) * np.float32(f)).tolist()
    return edit


def _shift(mlp: int, z: float, layer: int, neuron: int | None):
    def edit(i, row):
        if i != mlp:
            return
        m = np.array(row["all_layer_means"], dtype=np.float32)
        se = np.array(row["all_layer_stderr"], dtype=np.float32)
        if neuron is None:
            m[layer] += np.float32(z) * se[layer]
        else:
            m[layer, neuron] += np.float32(z) * se[layer, neuron]
        row["all_layer_means"] = m.tolist()
        row["final_means"] = m[-1].tolist()
    return edit


def smallest(src: Path, tmp: Path, values, make) -> tuple[str, list[str]]:
    for v in values:
        edit, upd = make(v)
        hit, names = caught(src, tmp, edit, upd)
        if hit:
            return f"{v:g}", names
    return "not caught", []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--mlps", type=int, default=4)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation

    results = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for est in ("plain", "control-variate"):
            for segments in (0, 32):
                src = bake(BakeConfig(n_mlps=args.mlps, seed=29, n_samples=args.n, width=args.width, depth=args.depth,
                                      output=tmp / f"{est}-{segments}", audit_segments=segments,
                                      estimation=Estimation(est)))
                neuron = (1, 0) if est == "plain" else (1, 0)
                rows = {
                    "stderr xF (one MLP)": smallest(src, tmp, STDERR_UP, lambda f: (_scale_stderr(1, f), None)),
                    "stderr xF, F<1 (one MLP)": smallest(src, tmp, STDERR_DOWN, lambda f: (_scale_stderr(1, f), None)),
                    "N xK, error bars /sqrt(K) (all MLPs)": smallest(
                        src, tmp, N_UP, lambda k: (_all_stderr(1 / np.sqrt(k)), {"n_samples": int(args.n * k)})),
                    "neuron +Z se (layer 2, one MLP)": smallest(
                        src, tmp, SHIFTS, lambda z: (_shift(1, z, neuron[0], neuron[1]), None)),
                    "layer +Z se (last layer, one MLP)": smallest(
                        src, tmp, SHIFTS, lambda z: (_shift(1, z, args.depth - 1, None), None)),
                }
                for damage, (value, names) in rows.items():
                    results.append(dict(estimator=est, trail=bool(segments), damage=damage, smallest=value,
                                        checks=names))
                    print(f"{est:15s} trail={'yes' if segments else 'no ':3s} {damage:40s} {value:>10s}  "
                          f"{', '.join(names[:4])}", flush=True)
    print()
    print(f"N = {args.n:,}, {args.mlps} MLPs of {args.width}x{args.depth}: smallest damage verify catches")
    print("| damage | plain, no trail | plain, trail | control-variate, no trail | control-variate, trail |")
    print("|---|---|---|---|---|")
    for damage in dict.fromkeys(r["damage"] for r in results):
        cells = [next(r["smallest"] for r in results if r["damage"] == damage and r["estimator"] == e and r["trail"] == t)
                 for e in ("plain", "control-variate") for t in (False, True)]
        print(f"| {damage} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
