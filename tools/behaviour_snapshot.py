"""A snapshot of what whestbench does, to prove a refactor changed nothing a user sees.

    python tools/behaviour_snapshot.py > before.json     # on main
    python tools/behaviour_snapshot.py > after.json      # on the branch
    diff before.json after.json                           # empty: same behaviour

It runs a fixed list of CPU commands (small bakes: plain, control variates, a target, torch on the
CPU; slices and their merge; combine-splits; verify passing and failing; inspect; status; push
--dry-run; a few API calls; bad inputs) in a fresh temporary directory, one process each, and
writes one JSON: for every command its exit code and its stdout/stderr lines, with what differs
from run to run masked (clocks, rates, durations, the temporary directory); for every dataset
directory left behind, its files, the sha256 of each Parquet column (numeric and identity
columns, the audit trail's too) and its metadata.json with the machine's facts and times masked.

Deterministic by construction (the numbers depend on the seeds only) and quick (about 50 s of CPU;
the torch bake's start-up is its longest step). Run it with the interpreter that has whestbench and torch:
``.venv/bin/python tools/behaviour_snapshot.py`` (its commands import the src/ beside the tool, whichever checkout that is). ``--keep DIR`` bakes in DIR and
leaves it there (to look at a difference).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BAKE = ["dataset", "bake", "--n-mlps", "3", "--n-samples", "2000", "--width", "8", "--depth", "3", "--seed", "1"]

# (name, argv after `python -m whestbench`, or a callable run in the work directory before a None argv)
CASES: list[tuple[str, object]] = [
    ("seeds", ["dataset", "generate-seeds", "--n-mlps", "5", "--seed", "3"]),
    ("seeds-bad-count", ["dataset", "generate-seeds", "--n-mlps", "0"]),
    ("seeds-file", "write_seeds"),
    ("bake-plain", BAKE + ["--output", "plain"]),
    ("bake-plain-rerun", BAKE + ["--output", "plain"]),
    ("bake-cv", BAKE + ["--estimator", "control-variate", "--output", "cv"]),
    ("bake-target", ["dataset", "bake", "--n-mlps", "2", "--n-samples", "1e5", "--width", "8", "--depth", "3",
                     "--seed", "4", "--target-stderr", "2e-2", "--output", "target"]),
    ("bake-target-all", ["dataset", "bake", "--n-mlps", "2", "--n-samples", "1e5", "--width", "8", "--depth", "2",
                         "--seed", "4", "--target-stderr", "3e-2", "--stderr-layer", "all",
                         "--estimator", "control-variate", "--output", "target-all"]),
    ("bake-torch", BAKE + ["--torch", "--device", "cpu", "--output", "torch"]),
    ("bake-seeds-file", ["dataset", "bake", "--n-mlps", "4", "--n-samples", "1000", "--width", "6", "--depth", "2",
                         "--mlp-seeds", "seeds.json", "--split", "holdout", "--config", "holdout",
                         "--audit-segments", "0", "--output", "holdout"]),
    ("bake-slice-0", ["dataset", "bake", "--n-mlps", "4", "--n-samples", "1000", "--width", "6", "--depth", "2",
                      "--seed", "7", "--slice", "0/2", "--output", "part-0"]),
    ("bake-slice-1", ["dataset", "bake", "--n-mlps", "4", "--n-samples", "1000", "--width", "6", "--depth", "2",
                      "--seed", "7", "--slice", "1/2", "--output", "part-1"]),
    ("bake-range", ["dataset", "bake", "--n-mlps", "4", "--n-samples", "1000", "--width", "6", "--depth", "2",
                    "--seed", "7", "--mlp-range", "2-3", "--output", "range-2-3"]),
    ("bake-public", ["dataset", "bake", "--n-mlps", "3", "--n-samples", "1000", "--width", "6", "--depth", "2",
                     "--seed", "8", "--pretty-name", "Snapshot", "--license", "mit",
                     "--homepage", "https://example.org/x", "--output", "public6"]),
    ("merge", ["dataset", "merge", "part-0", "part-1", "--output", "merged"]),
    ("merge-rerun", ["dataset", "merge", "part-0", "part-1", "--output", "merged"]),
    ("merge-missing-part", ["dataset", "merge", "part-0", "--output", "merged-half"]),
    ("merge-card-update", ["dataset", "merge", "part-0", "part-1", "--output", "merged", "--license", "mit"]),
    ("combine-cards-differ", ["dataset", "combine-splits", "public6", "holdout", "--output", "combined"]),
    ("combine", ["dataset", "combine-splits", "public6", "holdout", "--output", "combined", "--license", "mit",
                 "--pretty-name", "Snapshot", "--homepage", "https://example.org/x"]),
    ("combine-rerun", ["dataset", "combine-splits", "public6", "holdout", "--output", "combined", "--license", "mit",
                       "--pretty-name", "Snapshot", "--homepage", "https://example.org/x"]),
    ("combine-default", ["dataset", "combine-splits", "public6", "holdout", "--default-split", "holdout",
                         "--skip-prepared-arrow", "--license", "mit", "--pretty-name", "Snapshot",
                         "--homepage", "https://example.org/x", "--output", "combined-2"]),
    ("prepare-arrow", ["dataset", "prepare-arrow", "combined-2"]),
    ("verify-plain", ["dataset", "verify", "plain"]),
    ("verify-cv", ["dataset", "verify", "cv"]),
    ("verify-target", ["dataset", "verify", "target"]),
    ("verify-target-all", ["dataset", "verify", "target-all"]),
    ("verify-torch", ["dataset", "verify", "torch"]),
    ("verify-partial", ["dataset", "verify", "part-0"]),
    ("verify-merged", ["dataset", "verify", "merged", "--n-check", "1"]),
    ("verify-combined", ["dataset", "verify", "combined"]),
    ("verify-sampled", ["dataset", "verify", "cv", "--sample-mlps", "2", "--sample-seed", "5"]),
    ("verify-against", ["dataset", "verify", "range-2-3", "--against", "merged"]),
    ("verify-against-differs", ["dataset", "verify", "plain", "--against", "torch"]),
    ("verify-recompute", ["dataset", "verify", "plain", "--recompute", "1", "--recompute-seed", "11",
                          "--recompute-dir", "cache"]),
    ("verify-recompute-cached", ["dataset", "verify", "plain", "--recompute", "1", "--recompute-seed", "11",
                                 "--recompute-dir", "cache"]),
    ("verify-recompute-no-cache", ["dataset", "verify", "cv", "--recompute", "1", "--recompute-seed", "12", "--no-cache",
                                   "--recompute-dir", "cache"]),
    ("verify-spot", ["dataset", "verify", "plain", "--spot-check", "3", "--spot-seed", "2",
                     "--recompute-dir", "cache"]),
    ("damage-shard", "damage_shard"),
    ("verify-damaged-shard", ["dataset", "verify", "damaged"]),
    ("damage-metadata", "damage_metadata"),
    ("verify-damaged-metadata", ["dataset", "verify", "damaged-md"]),
    ("damage-means", "damage_means"),
    ("verify-damaged-means", ["dataset", "verify", "damaged-means"]),
    ("verify-no-trail-spot", ["dataset", "verify", "holdout", "--spot-check", "2"]),
    ("inspect-plain", ["dataset", "inspect", "plain"]),
    ("inspect-combined", ["dataset", "inspect", "combined"]),
    ("inspect-partial", ["dataset", "inspect", "part-1"]),
    ("inspect-damaged", ["dataset", "inspect", "damaged"]),
    ("status-done", ["dataset", "status", "plain"]),
    ("push-dry-run", ["dataset", "push", "plain", "--repo", "org/snap", "--tag", "v1", "--dry-run"]),
    ("push-dry-run-combined", ["dataset", "push", "combined", "--repo", "hf://org/snap2", "--dry-run",
                               "--pretty-name", "Other"]),
    ("push-partial", ["dataset", "push", "part-0", "--repo", "org/snap", "--dry-run"]),
    ("push-damaged", ["dataset", "push", "damaged", "--repo", "org/snap", "--dry-run"]),
    ("push-bad-repo", ["dataset", "push", "plain", "--repo", "not a repo", "--dry-run"]),
    ("push-repo-rev", ["dataset", "push", "plain", "--repo", "org/snap@v2", "--dry-run"]),
    ("push-bad-license", ["dataset", "push", "plain", "--repo", "org/snap", "--license", "nope", "--dry-run"]),
    ("push-missing-dir", ["dataset", "push", "nowhere", "--repo", "org/snap", "--dry-run"]),
    ("api-verify", ["-c", "import whestbench.verify.run as v; r = v.verify_dataset('plain', n_check=2); "
                          "print(r.ok, [(c.name, c.ok) for c in r.checks])"]),
    ("api-verify-bad", ["-c", "import whestbench.verify.run as v\n"
                              "for kw in ({'n_check': 0}, {'sample_mlps': True}, {'device': 'cpu'}, {'cache': False},"
                              " {'against': 'nowhere'}, {'recompute': -1}, {'spot_check': 0}):\n"
                              "    try: v.verify_dataset('plain', **kw); print(kw, 'ran')\n"
                              "    except Exception as e: print(kw, type(e).__name__, e)"]),
    ("api-push-bad", ["-c", "import whestbench.hub.push as t\n"
                            "for a, kw in (('plain', {'repo': 'bad name'}), ('part-0', {'repo': 'o/n'}),"
                            " ('plain', {'repo': 'o/n@main'}), ('nowhere', {'repo': 'o/n'})):\n"
                            "    try: t.push_dataset(a, kw['repo']); print(a, kw, 'ran')\n"
                            "    except Exception as e: print(a, kw, type(e).__name__, e)"]),
    ("api-load", ["-c", "import whestbench as w; ds = w.load_dataset('merged'); md = w.metadata(ds); "
                        "print(len(ds), md['n_mlps'], [m.name if hasattr(m, 'name') else type(m).__name__ "
                        "for m in w.iter_mlps(ds)])"]),
    # bad inputs: one line, the right exit code, nothing written
    ("bad-no-output", BAKE),
    ("bad-n-samples-zero", ["dataset", "bake", "--n-mlps", "2", "--n-samples", "0", "--width", "4", "--depth", "2",
                            "--seed", "1", "--output", "x1"]),
    ("bad-n-samples-text", ["dataset", "bake", "--n-mlps", "2", "--n-samples", "lots", "--width", "4",
                            "--depth", "2", "--seed", "1", "--output", "x2"]),
    ("bad-width", ["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "-3", "--depth", "2",
                   "--seed", "1", "--output", "x3"]),
    ("bad-output-exists", BAKE + ["--width", "9", "--output", "plain"]),
    ("bad-split-name", BAKE + ["--split", "Bad_Name", "--output", "x4"]),
    ("bad-slice", BAKE + ["--slice", "3/2", "--output", "x5"]),
    ("bad-seeds-file", BAKE[:-2] + ["--mlp-seeds", "missing.json", "--output", "x6"]),
    ("bad-target", BAKE + ["--target-stderr", "-1", "--output", "x7"]),
    ("bad-license", BAKE + ["--license", "not-a-license", "--output", "x8"]),
    ("bad-homepage", BAKE + ["--homepage", "ftp://x", "--output", "x9"]),
    ("bad-device-no-torch", BAKE + ["--gpu-kernel", "fused", "--output", "x10"]),
    ("bad-verify-missing", ["dataset", "verify", "nowhere"]),
    ("bad-verify-n-check", ["dataset", "verify", "plain", "--n-check", "0"]),
    ("bad-verify-device", ["dataset", "verify", "plain", "--device", "cpu"]),
    ("bad-verify-no-cache", ["dataset", "verify", "plain", "--no-cache"]),
    ("bad-verify-recompute-inside", ["dataset", "verify", "plain", "--recompute", "1", "--recompute-dir",
                                     "plain/inside"]),
    ("bad-inspect-missing", ["dataset", "inspect", "./nowhere"]),
    ("bad-combine-same-split", ["dataset", "combine-splits", "plain", "cv", "--output", "x11"]),
    ("bad-combine-default", ["dataset", "combine-splits", "public6", "holdout", "--default-split", "nope",
                             "--output", "x12"]),
    ("bad-merge-output-inside", ["dataset", "merge", "part-0", "part-1", "--output", "part-0/x"]),
    ("bad-unknown-verb", ["dataset", "bakes"]),
]


def write_seeds(work: Path) -> None:
    (work / "seeds.json").write_text("[11, 22, 33, 4444444444444]\n")


def damage_shard(work: Path) -> None:
    """One stored avg_variance changed, the checksums left as they were."""
    _rewrite_column(work / "plain", work / "damaged", "avg_variance", lambda values: values[:1] + [values[1] * 2]
                    + values[2:], resign=False)


def damage_metadata(work: Path) -> None:
    shutil.copytree(work / "cv", work / "damaged-md")
    md = json.loads((work / "damaged-md" / "metadata.json").read_text())
    md["n_samples"] = 4000
    (work / "damaged-md" / "metadata.json").write_text(json.dumps(md, indent=2))


def damage_means(work: Path) -> None:
    """A layer-1 mean moved by a lot, the checksums re-signed: only the statistics and the trail see it."""

    def move(values):
        values[1][0][0] = values[1][0][0] * 3 + 0.5
        return values

    _rewrite_column(work / "plain", work / "damaged-means", "all_layer_means", move, resign=True)


def _rewrite_column(src: Path, dst: Path, column: str, change, resign: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(src, dst)
    shard = next((dst / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    i = table.schema.get_field_index(column)
    values = change(table.column(i).to_pylist())
    table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
    pq.write_table(table, shard)
    if resign:
        md = json.loads((dst / "metadata.json").read_text())
        md["checksums"][f"data/{shard.name}"] = "sha256:" + hashlib.sha256(shard.read_bytes()).hexdigest()
        (dst / "metadata.json").write_text(json.dumps(md, indent=2))


SETUP = {"write_seeds": write_seeds, "damage_shard": damage_shard, "damage_metadata": damage_metadata, "damage_means": damage_means}

_MASKS = [
    (re.compile(r"\[\d\d:\d\d:\d\d\]"), "[T]"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "<TIME>"),
    (re.compile(r"\d{4}-\d\d-\d\d"), "<DATE>"),
    (re.compile(r"[\d.,]+\s*(k |M |G |T )?\w+/s\b"), "<RATE>"),
    (re.compile(r"ETA [\d:?]+"), "ETA <T>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|min|h)\b"), "<DUR>"),
    (re.compile(r"\b\d+:\d\d(:\d\d)?\b"), "<DUR>"),
    (re.compile(r"pid \d+"), "pid <PID>"),
    (re.compile(r"\b\d+(\.\d+)? ?(B|KiB|MiB|GiB|TiB)\b"), "<SIZE>"),
    (re.compile(r"sha256:[0-9a-f]{64}"), "sha256:<FILE HASH>"),
    (re.compile(r"\.no-cache-\w+"), ".no-cache-<TMP>"),
]


_TIMED = re.compile(r"^\[\d\d:\d\d:\d\d\] [\w -]+: .*ETA |^note: compiling the CPU kernels")


def _timed(line: str) -> bool:
    """A progress line (how many come depends on the clock) or numba's first-run note."""
    return bool(_TIMED.search(line))


def mask(line: str, work: Path) -> str:
    line = line.replace(str(work.resolve()), "<WORK>").replace(str(work), "<WORK>")
    for pattern, repl in _MASKS:
        line = pattern.sub(repl, line)
    return line.rstrip()


# metadata keys whose values are the machine's or the clock's, not the bake's
_VOLATILE = {"created_at_utc", "hardware", "blas", "flopscope_version", "whestbench_version", "timing",
             "wall_time_s", "elapsed_s", "started_at_utc", "finished_at_utc", "device", "torch_version",
             "versions", "merged_at_utc", "combined_at_utc", "threads", "max_threads", "seconds", "checksums"}


def masked_metadata(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<MASKED>" if k in _VOLATILE else masked_metadata(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_metadata(v) for v in value]
    if isinstance(value, str):
        return _MASKS[1][0].sub("<TIME>", value)
    return value


def _untimed(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<TIME>" if k.endswith("time_s") else _untimed(v)) for k, v in value.items()}
    return value


def column_digests(path: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    out = {}
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name == "sampling_budget_breakdown":  # its times are the clock's: every other field counts
            values = [json.dumps(_untimed(json.loads(v)), sort_keys=True) if v else v for v in values]
        out[name] = hashlib.sha256(json.dumps(values, sort_keys=True, default=repr).encode()).hexdigest()
    return out


def dataset_facts(root: Path, work: Path) -> dict:
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    facts: dict = {"files": files, "columns": {}}
    for rel in files:
        if rel.endswith(".parquet"):
            facts["columns"][rel] = column_digests(root / rel)
    md = json.loads((root / "metadata.json").read_text())
    facts["metadata"] = masked_metadata(md)
    if (root / "README.md").exists():
        card = [mask(line, work) for line in (root / "README.md").read_text().splitlines()]
        facts["card_sha256"] = hashlib.sha256("\n".join(card).encode()).hexdigest()
    return facts


def run(work: Path, python: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "WHEST_"))}
    env.update({"HOME": str(work / "home"), "HF_HUB_OFFLINE": "1", "WHEST_RECOMPUTE_DIR": str(work / "cache"),
                "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "PYTHONHASHSEED": "0",
                "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    (work / "home").mkdir()
    out: dict = {"commands": {}, "datasets": {}}
    for name, argv in CASES:
        if isinstance(argv, str):
            SETUP[argv](work)
            continue
        cmd = [python] + (argv if argv[0] == "-c" else ["-m", "whestbench"] + argv)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        print(f"{name}: exit {proc.returncode}, {time.monotonic() - t0:.1f} s", file=sys.stderr)
        out["commands"][name] = {
            "argv": argv,
            "exit": proc.returncode,
            "stdout": [mask(line, work) for line in proc.stdout.splitlines() if not _timed(line)],
            "stderr": [mask(line, work) for line in proc.stderr.splitlines() if not _timed(line)],
        }
    for md in sorted(work.rglob("metadata.json")):
        root = md.parent
        if "home" in root.relative_to(work).parts:
            continue
        out["datasets"][str(root.relative_to(work))] = dataset_facts(root, work)
    out["left_behind"] = sorted(str(p.relative_to(work)) for p in work.iterdir())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="bake in this (new) directory and leave it there")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs whestbench")
    args = ap.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True)
        work = args.keep
    else:
        work = Path(tempfile.mkdtemp(prefix="whest-snapshot-"))
    try:
        result = run(work, args.python)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    json.dump(result, sys.stdout, indent=1, ensure_ascii=False, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
