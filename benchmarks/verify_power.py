"""The smallest damage ``whest dataset verify`` catches, with and without the audit trail.

    python benchmarks/verify_power.py [--n 200000 2000000] [--width 16] [--depth 3] [--mlps 4]
                                      [--target-stderr E] [--bakes plain,control-variate,target,torch] [--json FILE]

Bakes one dataset per kind of bake twice — with the audit trail (S = 32) and without
(``--audit-segments 0``) — then damages a copy and re-signs its checksums (rows rewritten through the
writer, the trail carried unchanged), as a careful forger or a faulty device would leave it, and runs
verify. The kinds: ``plain`` and ``control-variate`` (pcg64, the CPU path), ``target`` (plain with
``--target-stderr E`` on the last layer, the cap N; E defaults to 4e-3·√(2·10⁵/N), which stops these
MLPs before the cap) and ``torch`` (philox, ``backend="torch"`` on the CPU, plain). Each damage grows
along its ladder until verify fails (the smallest rung first, then a bisection: detection is taken as
monotone in the damage, so a bake costs ~5 verifies per damage, not 11); the table gives the smallest
caught:

- ``stderr xF`` / ``stderr /F``: one MLP's ``all_layer_stderr`` scaled;
- ``N xK``: ``n_samples`` (a target bake: the cap, every ``n_samples_used`` and ``samples_used``)
  inflated K-fold with every error bar scaled by 1/sqrt(K) to match (a target bake: K = 2, 4, 8 only,
  which keep the counts at check points; ×1.05 leaves them and the ``target`` check catches it);
- ``neuron +Z se``: one neuron of layer 2 of one MLP moved by Z stored standard errors;
- ``layer +Z se``: every neuron of one MLP's last layer moved by Z stored standard errors.

One markdown table per N is printed (cells: without trail / with trail), the one docs/cli.md shows.
A spot check (``--spot-check``) adds the regenerated segments' own power against a trail written
together with the columns, as a faulty device leaves it (``--fault-seeds R``, after the tables): one
bake of the MLPs above (pcg64, S = 32) in which one segment of every MLP ran on weights ×1.001 (a
device fault injected through the sampler's step), verified once without a spot check (every exact
check passes: the stored numbers are the faulty samples' own) and then with ``--spot-check K`` under
R spot seeds. The catch rate printed beside the stated bound ``1 − (1 − f)^K`` (f = 1/S, S the
segments per MLP: 32 unless N holds fewer sampler steps) and the exact one (K of the M·S segments
drawn without replacement, M of them faulty).
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
N_UP_TARGET = [2.0, 4.0, 8.0]  # a target bake stops at check points (powers of two steps): a forger keeps to them
SHIFTS = [0.5, 1, 2, 5, 10, 20, 50, 100, 500, 2000, 10000]


def rewrite(src: Path, dst: Path, edit_row=None, md_update=None) -> Path:
    import pyarrow.parquet as pq

    from whestbench.format.reader import data_files
    from whestbench.format.writer import write_dataset

    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    md = md_update(md) if callable(md_update) else md | (md_update or {})
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
    """The smallest rung of ``values`` caught: the first rung, else the last (not caught: none is), then
    a bisection between the largest missed and the smallest caught."""
    seen: dict[int, tuple[bool, list[str]]] = {}

    def test(i: int) -> bool:
        if i not in seen:
            edit, upd = make(values[i])
            seen[i] = caught(src, tmp, edit, upd)
        return seen[i][0]

    if test(0):
        return f"{values[0]:g}", seen[0][1]
    if not test(len(values) - 1):
        return "not caught", []
    lo, hi = 0, len(values) - 1  # lo missed, hi caught
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if test(mid) else (mid, hi)
    return f"{values[hi]:g}", seen[hi][1]


def _inflate_n(n: int, k: float, target: bool):
    """``n_samples`` ×k with every error bar /√k; a target bake's cap, rows' ``n_samples_used`` and the
    ``samples_used`` summary too (as a forger keeping the metadata consistent would)."""
    scale = _all_stderr(1 / np.sqrt(k))

    def edit(i, row):
        scale(i, row)
        if target and row.get("n_samples_used") is not None:
            row["n_samples_used"] = int(round(row["n_samples_used"] * k))
    return edit, lambda md: md | {"n_samples": int(round(n * k))} | (
        {"samples_used": {key: (int(round(v * k)) if key != "at_cap" else v) for key, v in md["samples_used"].items()}}
        if target and isinstance(md.get("samples_used"), dict) else {})


KINDS = ("plain", "control-variate", "target", "torch")


def bake_kind(kind: str, segments: int, args, n: int, tmp: Path) -> Path:
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation

    target = args.target_stderr or 4e-3 * np.sqrt(2e5 / n)
    est = {"control-variate": Estimation("control-variate"), "target": Estimation("plain", float(target), "last")}
    extra = dict(backend="torch", device="cpu", skip_device_check=True) if kind == "torch" else {}
    return bake(BakeConfig(n_mlps=args.mlps, seed=29, n_samples=n, width=args.width, depth=args.depth,
                           output=tmp / f"{kind}-{n}-{segments}", audit_segments=segments,
                           estimation=est.get(kind, Estimation("plain")), **extra))


def device_fault(args, n: int, tmp: Path, k: int, seeds: int) -> dict:
    """One segment of every MLP computed on weights ×1.001 (a device fault, through the sampler's step);
    verify without a spot check, then ``--spot-check k`` under ``seeds`` spot seeds."""
    from math import comb

    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.pcg64 import Pcg64Stream
    from whestbench.verify.run import verify_dataset

    mlp_seeds = tuple(range(101, 101 + args.mlps))
    rng = np.random.default_rng(5)
    faulty = {s: int(rng.integers(32)) for s in mlp_seeds}  # the segment of each MLP that faults
    weights = {s: weights_for_seed(s, args.width, args.depth) for s in mlp_seeds}
    orig = Pcg64Stream.step
    per_mlp = []  # segments per MLP (fewer than 32 when N holds fewer sampler steps)

    def step(self):
        for s, g in faulty.items():
            if not self.segments:
                continue
            per_mlp.append(len(self.segments))
            if self.position == self.segments[g % len(self.segments)][0] and np.array_equal(self.weights, weights[s]):
                self.weights = weights[s] * np.float32(1.001)
                try:
                    return orig(self)
                finally:
                    self.weights = weights[s]
        return orig(self)

    Pcg64Stream.step = step
    try:
        ds = bake(BakeConfig(n_mlps=args.mlps, mlp_seeds=mlp_seeds, n_samples=n, width=args.width, depth=args.depth,
                             output=tmp / f"fault-{n}", audit_segments=32, max_threads=1))
    finally:
        Pcg64Stream.step = orig
    plain = verify_dataset(ds)
    hits = sum(not verify_dataset(ds, pilot=False, spot_check=k, spot_seed=s).get("spot-check").ok
               for s in range(seeds))
    per = max(per_mlp)
    total = per * args.mlps
    return dict(n=n, mlps=args.mlps, k=k, seeds=seeds, segments=per, caught_without_spot_check=not plain.ok,
                failed_checks=[c.name for c in plain.failures], caught=hits, rate=hits / seeds,
                stated=1 - (1 - 1 / per) ** k, exact=1 - comb(total - args.mlps, k) / comb(total, k))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[200_000])
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--mlps", type=int, default=4)
    ap.add_argument("--target-stderr", type=float, default=None,
                    help="E of the target bake (default 4e-3·sqrt(2e5/N): an early stop before the cap)")
    ap.add_argument("--bakes", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fault-seeds", type=int, default=200,
                    help="spot seeds of the device-fault row (--spot-check K on a bake with one faulty segment per MLP); 0: none")
    ap.add_argument("--spot-check", type=int, default=8, metavar="K", help="K of the device-fault row")
    args = ap.parse_args(argv)
    kinds = [k for k in args.bakes.split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--bakes takes a comma-separated list of {', '.join(KINDS)}")

    results = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n in args.n:
            for kind in kinds:
                for segments in (0, 32):
                    src = bake_kind(kind, segments, args, n, tmp)
                    rows = {
                        "stderr xF (one MLP)": smallest(src, tmp, STDERR_UP, lambda f: (_scale_stderr(1, f), None)),
                        "stderr xF, F<1 (one MLP)": smallest(src, tmp, STDERR_DOWN, lambda f: (_scale_stderr(1, f), None)),
                        "N xK, error bars /sqrt(K) (all MLPs)": smallest(
                            src, tmp, N_UP_TARGET if kind == "target" else N_UP, lambda k: _inflate_n(n, k, kind == "target")),
                        "neuron +Z se (layer 2, one MLP)": smallest(src, tmp, SHIFTS, lambda z: (_shift(1, z, 1, 0), None)),
                        "layer +Z se (last layer, one MLP)": smallest(
                            src, tmp, SHIFTS, lambda z: (_shift(1, z, args.depth - 1, None), None)),
                    }
                    for damage, (value, names) in rows.items():
                        results.append(dict(n=n, bake=kind, trail=bool(segments), damage=damage, smallest=value,
                                            checks=names))
                        print(f"N={n:<9d} {kind:15s} trail={'yes' if segments else 'no ':3s} {damage:40s} {value:>10s}  "
                              f"{', '.join(names[:4])}", flush=True)
            if args.fault_seeds > 0:  # N raised where needed so that every MLP has its 32 segments
                from whestbench.compute.pcg64 import chunk_rows

                n_fault = max(n, 32 * chunk_rows(args.width))
                results.append(dict(damage="device fault", **device_fault(args, n_fault, tmp, args.spot_check, args.fault_seeds),
                                    table_n=n))
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
    tables = [r for r in results if r["damage"] != "device fault"]
    for n in args.n:
        print()
        print(f"N = {n:,}, {args.mlps} MLPs of {args.width}x{args.depth}: smallest damage verify catches "
              "(without the trail / with it)")
        print("| damage | " + " | ".join(kinds) + " |")
        print("|---|" + "---|" * len(kinds))
        for damage in dict.fromkeys(r["damage"] for r in tables):
            cells = [" / ".join(next(r["smallest"] for r in tables if r["n"] == n and r["damage"] == damage
                                     and r["bake"] == k and r["trail"] == t) for t in (False, True)) for k in kinds]
            print(f"| {damage} | " + " | ".join(cells) + " |")
        for r in (r for r in results if r.get("table_n") == n and r["damage"] == "device fault"):
            print(f"\nA device fault in 1 of {r['segments']} segments of each of {r['mlps']} MLPs (plain, pcg64, with the trail, "
                  f"N = {r['n']:,}): "
                  f"{'caught' if r['caught_without_spot_check'] else 'passes'} without a spot check"
                  f"{' (' + ', '.join(r['failed_checks']) + ')' if r['failed_checks'] else ''}; "
                  f"--spot-check {r['k']} caught it under {r['caught']} of {r['seeds']} spot seeds ({r['rate']:.3f}): "
                  f"stated at least 1 - (1 - 1/{r['segments']})^{r['k']} = {r['stated']:.3f}, exact {r['exact']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
