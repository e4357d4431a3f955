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

``--forgeries`` (issue 34's table, docs/cli.md "Forgeries: who catches them") instead bakes plain and
control-variate datasets with 32 segments per MLP and forges each (``FORGERIES``) twice, re-signed: leaving
the trail alone, and rewriting it to match (``forge``: the segments edited, every column rebuilt from them
as verify's trail check combines them); per forgery, plain verify's verdict and ``--spot-check K``'s catch
rate over ``--trials`` spot seeds beside the chance the check states. ``--above-e M`` bakes plain target
bakes of M MLPs per shape and E and prints the share of MLPs whose final-layer standard error ends above E.
"""

from __future__ import annotations

import argparse
import json
import math
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


def write(dst: Path, rows: list, width: int, depth: int, md: dict, trail: Path | None) -> Path:
    """``rows`` through the bake's writer; ``trail``: an audit trail file carried in as ``md``'s side file."""
    from whestbench.format.checksums import dataset_checksums
    from whestbench.format.writer import finish_dataset_dir, write_dataset

    if trail is None:
        return write_dataset(dst, md["split"], rows, len(rows), width, depth, md)
    write_dataset(dst, md["split"], rows, len(rows), width, depth, {k: v for k, v in md.items() if k != "audit"})
    (dst / md["audit"]["file"]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(trail, dst / md["audit"]["file"])
    finish_dataset_dir(dst, md, dataset_checksums(dst))
    return dst


def rewrite(src: Path, dst: Path, edit_row=None, md_update=None) -> Path:
    import pyarrow.parquet as pq

    from whestbench.format.reader import data_files

    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    md = md_update(md) if callable(md_update) else md | (md_update or {})
    rows = pq.read_table(data_files(src, md["split"])[0]).to_pylist()
    for i, row in enumerate(rows):
        if edit_row is not None:
            edit_row(i, row)
    audit = src / md["audit"]["file"] if "audit" in md else None
    return write(dst, rows, md["width"], md["depth"], md, audit)


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



# ------------------------------------------------------------------------------------------------
# Issue 34's forgeries: what plain verify and --spot-check K catch, against a forger who leaves the
# trail alone (the columns edited, the trail carried) and one who rewrites it to match (the segments
# edited, every column rebuilt from them with the combination verify's trail check uses).

FORGERIES = ("N x2", "N x4", "error bars x0.8", "error bars x1.25", "one neuron +20 SE", "one neuron +40 SE",
             "segments copied", "one segment's variance /4", "final layer +10 SE")


class Trail:
    """An audit trail as arrays: ``values[name]`` (rows, layers, width) float64 (``cv_*``: layers 2..)."""

    def __init__(self, path: Path, depth: int, width: int):
        import pyarrow.parquet as pq

        self.table = pq.read_table(str(path))
        self.schema = self.table.schema
        self.ids = self.table.column("mlp_id").to_numpy()
        self.start = self.table.column("sample_start").to_numpy().copy()
        self.end = self.table.column("sample_end").to_numpy().copy()
        self.values = {}
        for name in ("means", "var", "cv_means", "cv_var"):
            if name in self.schema.names:
                flat = self.table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
                self.values[name] = flat.astype(np.float64).reshape(len(self.ids), -1, width)

    def rows_of(self, mlp: int) -> np.ndarray:
        return np.flatnonzero(self.ids == mlp)

    def write(self, path: Path) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = {n: self.table.column(n) for n in self.schema.names}
        cols["sample_start"], cols["sample_end"] = pa.array(self.start, pa.int64()), pa.array(self.end, pa.int64())
        for name, v in self.values.items():
            flat = v.astype(np.float32).reshape(len(self.ids), -1)
            cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), pa.float32()), flat.shape[1])
        pq.write_table(pa.Table.from_arrays([cols[n] for n in self.schema.names], schema=self.schema), str(path))
        return path


def rebuild(row: dict, trail: Trail, mlp: int, cv: bool, step: int) -> None:
    """``row``'s means, standard errors, final means and avg_variance as the segments of ``mlp`` combine
    (docs: verify/trail.py's identities), as a forger who rewrote the trail writes them."""
    from whestbench.compute.estimators import n_batches

    r = trail.rows_of(mlp)
    sizes = (trail.end[r] - trail.start[r]).astype(np.float64)[:, None, None]
    n = float(sizes.sum())
    means = np.array(row["all_layer_means"], dtype=np.float64)
    se = np.array(row["all_layer_stderr"], dtype=np.float64)
    m_name, v_name, first = ("cv_means", "cv_var", 1) if cv else ("means", "var", 0)
    m, v = trail.values[m_name][r], trail.values[v_name][r]
    mean = (sizes * m).sum(0) / n
    k = float(n_batches(int(n), step)) if cv else n
    spread = (sizes * v).sum(0) + (sizes * (m - mean) ** 2).sum(0)
    means[first:], se[first:] = mean, np.sqrt(spread / ((k - 1) * n))
    final = means[-1].astype(np.float32)
    pm, pv = trail.values["means"][r][:, -1], trail.values["var"][r][:, -1]
    second = (sizes[:, 0] * (pv + pm**2)).sum(0) / n
    row.update(all_layer_means=means.astype(np.float32).tolist(), all_layer_stderr=se.astype(np.float32).tolist(),
               final_means=final.tolist(), avg_variance=float(np.mean(second - final.astype(np.float64) ** 2)))


def forge(src: Path, dst: Path, forgery: str, consistent: bool, tmp: Path) -> tuple[Path, int, int]:
    """``src`` forged by ``forgery`` and re-signed at ``dst``: ``(dst, segments whose regeneration
    differs, segments in all)``. MLP 1 is the forged one where a forgery touches one MLP."""
    import pyarrow.parquet as pq

    from whestbench.compute.segments import segment_bounds
    from whestbench.format.reader import data_files

    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    width, depth, n = md["width"], md["depth"], md["n_samples"]
    cv = md.get("estimator", {}).get("name") == "control-variate"
    rows = pq.read_table(data_files(src, md["split"])[0]).to_pylist()
    audit = md["audit"]
    step, segs, aligned = int(audit["step_samples"]), int(audit["segments"]), bool(audit["aligned"])
    trail = Trail(src / audit["file"], depth, width)
    total, mlp, per = len(trail.ids), 1, len(trail.rows_of(1))
    m_name, v_name, off = ("cv_means", "cv_var", 1) if cv else ("means", "var", 0)
    touched = [mlp]  # the MLPs whose columns a consistent forger rebuilds
    if forgery.startswith("N x"):
        k = float(forgery[3:])
        md["n_samples"] = int(n * k)
        if consistent:  # the recorded command too, as a careful forger would
            import re

            for holder in [md] + [v for v in (md.get("splits") or {}).values() if isinstance(v, dict)]:
                if isinstance(holder.get("bake_command"), str):
                    holder["bake_command"] = re.sub(r"(--n-samples[ =])\S+", rf"\g<1>{int(n * k)}", holder["bake_command"])
            bounds = np.array(segment_bounds(int(n * k), step, segs, aligned))
            for i in set(trail.ids.tolist()):
                r = trail.rows_of(i)
                trail.start[r], trail.end[r] = bounds[:, 0], bounds[:, 1]
            touched, bad = sorted(set(trail.ids.tolist())), total
        else:
            for row in rows:
                row["all_layer_stderr"] = (np.asarray(row["all_layer_stderr"], np.float32) / np.float32(np.sqrt(k))).tolist()
            bad = 0
    elif forgery.startswith("error bars x"):
        f = float(forgery[len("error bars x"):])
        if consistent:  # the scatter and the within-segment spread both scaled: se ×f, the means kept
            r = trail.rows_of(mlp)
            sizes = (trail.end[r] - trail.start[r]).astype(np.float64)[:, None, None]
            m = trail.values[m_name][r]
            mean = (sizes * m).sum(0) / sizes.sum()
            trail.values[m_name][r] = mean + f * (m - mean)
            trail.values[v_name][r] *= f * f
        else:
            rows[mlp]["all_layer_stderr"] = (np.asarray(rows[mlp]["all_layer_stderr"], np.float32) * np.float32(f)).tolist()
        bad = per if consistent else 0
    elif forgery.startswith(("one neuron +", "final layer +")):
        z = float(forgery.split("+")[1].split()[0])
        layer = 1 if forgery.startswith("one neuron") else depth - 1
        cols = slice(0, 1) if forgery.startswith("one neuron") else slice(None)
        se = np.asarray(rows[mlp]["all_layer_stderr"], np.float64)
        if consistent:
            r = trail.rows_of(mlp)
            trail.values[m_name][r, layer - off, cols] += z * se[layer, cols]
            if cv:  # the plain sums move too, as they would had the samples moved
                trail.values["means"][r, layer, cols] += z * se[layer, cols]
        else:
            _shift(mlp, z, layer, 0 if forgery.startswith("one neuron") else None)(mlp, rows[mlp])
        bad = per if consistent else 0
    elif forgery == "segments copied":  # the second half of every MLP's segments copied from the first
        for i in set(trail.ids.tolist()):
            r = trail.rows_of(i)
            half = len(r) // 2
            for name in trail.values:
                trail.values[name][r[half:2 * half]] = trail.values[name][r[:half]]
        touched, bad = sorted(set(trail.ids.tolist())), sum(len(trail.rows_of(i)) // 2 for i in set(trail.ids.tolist()))
    elif forgery == "one segment's variance /4":
        r = trail.rows_of(mlp)[per // 2]
        for name in ("var", "cv_var"):
            if name in trail.values:
                trail.values[name][r] /= 4
        bad = 1
    else:
        raise ValueError(forgery)
    if consistent:
        for i in touched:
            rebuild(rows[i], trail, i, cv, step)
    audit_from = trail.write(tmp / "trail.parquet") if consistent or forgery in ("segments copied",
                                                                                 "one segment's variance /4") else src / audit["file"]
    shutil.rmtree(dst, ignore_errors=True)
    return write(dst, rows, width, depth, md, audit_from), bad, total


def forgery_rows(src: Path, tmp: Path, k: int, trials: int) -> list[dict]:
    """Every forgery, both forgers: plain verify's verdict, and ``--spot-check k``'s catch rate over
    ``trials`` spot seeds beside the chance the draw states for that forgery (hypergeometric)."""
    from whestbench.verify.run import verify_dataset
    from whestbench.verify.spot_draw import miss

    out = []
    for forgery in FORGERIES:
        for consistent in (False, True):
            ds, bad, total = forge(src, tmp / "forged", forgery, consistent, tmp)
            plain = verify_dataset(ds)
            failed = [c.name for c in plain.failures]
            row = dict(forgery=forgery, forger="rewrites the trail" if consistent else "leaves the trail",
                       plain=not plain.ok, checks=failed, k=k, trials=trials, bad=bad, total=total,
                       stated=1 - miss(total, bad, k))
            if any(c.endswith(("trail", "trail contract")) for c in failed):
                row["caught"] = None  # the spot check is skipped once the trail fails
            else:
                row["caught"] = sum(not verify_dataset(ds, pilot=False, spot_check=k, spot_seed=1000 + s,
                                                       cache=False).get("spot-check").ok for s in range(trials))
            out.append(row)
            spot = ("skipped (the trail fails)" if row["caught"] is None else
                    f"{row['caught']}/{trials} (stated {row['stated']:.3f})")
            print(f"{forgery:28s} {row['forger']:20s} plain verify: {'CAUGHT' if row['plain'] else 'passes':7s} "
                  f"{', '.join(failed[:3]):40s} --spot-check {k}: {spot}", flush=True)
    return out


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
    ap.add_argument("--spot-check", type=int, default=8, metavar="K", help="K of the device-fault row and the forgery table")
    ap.add_argument("--forgeries", action="store_true",
                    help="instead of the ladders: issue 34's forgeries, both forgers, plain verify and --spot-check K "
                         "(--bakes plain,control-variate; N raised to 32 sampler steps)")
    ap.add_argument("--trials", type=int, default=20, help="spot seeds per forgery (--forgeries)")
    ap.add_argument("--above-e", type=int, default=0, metavar="M",
                    help="instead: plain target bakes of M MLPs per shape and E, the share above E")
    ap.add_argument("--shapes", default="8x3,16x3,16x5,32x3", help="of --above-e")
    ap.add_argument("--targets", default="2e-3,8e-4", help="E of --above-e")
    args = ap.parse_args(argv)
    if args.above_e:
        return above_e(args)
    if args.forgeries:
        return forgery_table(args)
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


def above_e(args) -> int:
    """``--above-e M``: plain target bakes (pcg64, last layer) of M MLPs per shape and E: the share of MLPs
    whose largest final-layer stored standard error exceeds E, and the largest ratio (docs/cli.md's
    ``--target-stderr`` row, docs/error-bars.md)."""
    import pyarrow.parquet as pq

    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation
    from whestbench.format.reader import data_files

    ratios_all = []
    with tempfile.TemporaryDirectory() as d:
        for shape in args.shapes.split(","):
            width, depth = map(int, shape.split("x"))
            for e in (float(v) for v in args.targets.split(",")):
                out = bake(BakeConfig(n_mlps=args.above_e, seed=34 + width * 10 + depth, n_samples=1 << 24, width=width,
                                      depth=depth, output=Path(d) / f"{shape}-{e:g}", audit_segments=0,
                                      estimation=Estimation("plain", e, "last")))
                t = pq.read_table(data_files(out, "public")[0], columns=["all_layer_stderr"]).to_pylist()
                ratios = [max(r["all_layer_stderr"][-1]) / e for r in t]
                ratios_all += ratios
                above = sum(x > 1.0 for x in ratios)
                print(f"{shape} E={e:g}: {above}/{len(ratios)} above E, largest {max(ratios):.4f} E", flush=True)
    n, above = len(ratios_all), sum(x > 1.0 for x in ratios_all)
    p = above / n
    print(f"all: {above}/{n} = {100 * p:.1f} % ± {100 * math.sqrt(p * (1 - p) / n):.1f} % of MLPs above E, "
          f"largest {max(ratios_all):.4f} E")
    return 0


def forgery_table(args) -> int:
    """``--forgeries``: bake each kind (pcg64, S = 32), forge, verify; one markdown table."""
    from whestbench.compute.pcg64 import chunk_rows

    kinds = [k for k in args.bakes.split(",") if k in ("plain", "control-variate")] or ["plain", "control-variate"]
    n = max(args.n[0], 32 * chunk_rows(args.width))
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for kind in kinds:
            print(f"-- {kind}: {args.mlps} MLPs of {args.width}x{args.depth}, N = {n:,}", flush=True)
            results[kind] = forgery_rows(bake_kind(kind, 32, args, n, tmp), tmp, args.spot_check, args.trials)
    print(f"\n{args.mlps} MLPs of {args.width}x{args.depth}, N = {n:,}, S = 32 (pcg64); --spot-check {args.spot_check} "
          f"over {args.trials} spot seeds each; cells: plain verify / --spot-check {args.spot_check} caught (the chance "
          "the check states for this forgery)")
    print("| forgery | forger | " + " | ".join(kinds) + " |")
    print("|---|---|" + "---|" * len(kinds))
    for i, row in enumerate(results[kinds[0]]):
        cells = []
        for kind in kinds:
            r = results[kind][i]
            first = f"caught ({r['checks'][0]})" if r["plain"] else "passes"
            spot = ("— (skipped: trail fails)" if r["caught"] is None else
                    f"{r['caught']}/{r['trials']} ({r['stated']:.2f})")
            cells.append(f"{first} / {spot}")
        print(f"| {row['forgery']} | {row['forger']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
