"""A user's script written against whestbench 0.16.2's public dataset API (only its public names).

tests/reference/test_reference_api_script.py runs it unchanged with the reference and with ours and
compares what both print. ``python api_0_16_script.py WORKDIR``: it bakes small datasets under
WORKDIR and prints one JSON object per step (``{"step": ..., ...}``); a step that raises prints the
exception's class names instead of its results, and the script goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

import whestbench
import whestbench.dataset
import whestbench.dataset_io
from whestbench.cli import main
from whestbench.dataset import create_dataset, iter_mlps, load_dataset, metadata, mlp_at
from whestbench.dataset_io import (
    InvalidDatasetError,
    MergeCorruptError,
    MergeIncompatibleError,
    MergeIncompleteError,
    MergeOverlapError,
    combine_split_datasets,
    merge_datasets,
)

WORK = Path(sys.argv[1])
SHAPE = dict(n_samples=5000, width=16, depth=3)
SEEDS = [11, 22, 33, 44]
HOLDOUT_SEEDS = [101, 202]


def digest(values, dtype) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(values, dtype=dtype)).tobytes()).hexdigest()[:16]


def identity(ds) -> dict:
    """The identity columns and shapes (equal on every backend)."""
    return {
        "mlp_id": list(ds["mlp_id"]),
        "mlp_name": list(ds["mlp_name"]),
        "mlp_seed": [int(s) for s in ds["mlp_seed"]],
        "weights": digest(ds["weights"], np.float32),
        "weights_shape": list(np.asarray(ds["weights"], dtype=np.float32).shape),
        "means_shape": list(np.asarray(ds["all_layer_means"], dtype=np.float32).shape),
    }


def numbers(ds) -> dict:
    """The ground truth (bit-identical between the CPU paths at one BLAS thread)."""
    return {
        "all_layer_means": digest(ds["all_layer_means"], np.float32),
        "final_means": digest(ds["final_means"], np.float32),
        "avg_variance": digest(ds["avg_variance"], np.float64),
    }


def error(exc: BaseException) -> dict:
    names = ("InvalidDatasetError", "MergeIncompatibleError", "MergeIncompleteError", "MergeOverlapError",
             "MergeCorruptError", "ValueError", "TypeError", "FileExistsError", "ImportError")
    classes = {"InvalidDatasetError": InvalidDatasetError, "MergeIncompatibleError": MergeIncompatibleError,
               "MergeIncompleteError": MergeIncompleteError, "MergeOverlapError": MergeOverlapError,
               "MergeCorruptError": MergeCorruptError, "ValueError": ValueError, "TypeError": TypeError,
               "FileExistsError": FileExistsError, "ImportError": ImportError}
    return {"raised": sorted(n for n in names if isinstance(exc, classes[n]))}


def step(name: str, fn) -> None:
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - reported, compared
        result = error(exc)
    print(json.dumps({"step": name, **result}, sort_keys=True), flush=True)


def bake(name: str, seeds=SEEDS, **kw) -> Path:
    return create_dataset(n_mlps=len(seeds), mlp_seeds=seeds, output_path=WORK / name, **SHAPE, **kw)


events: list = []


def s_create():
    path = create_dataset(n_mlps=4, mlp_seeds=SEEDS, output_path=WORK / "full", progress=events.append, **SHAPE)
    sampling = [e for e in events if isinstance(e, dict) and e.get("phase") == "sampling"]
    return {
        "returns_path": isinstance(path, Path) and path == WORK / "full",
        "progress_dicts": bool(events) and all(isinstance(e, dict) and "phase" in e for e in events),
        "progress_sampling_counts": bool(sampling) and all(
            isinstance(e["completed"], int) and isinstance(e["total"], int) for e in sampling),
        "progress_ends_complete": bool(sampling) and sampling[-1]["completed"] == sampling[-1]["total"],
    }


def s_load():
    ds = whestbench.load_dataset(WORK / "full")
    md = metadata(ds)
    return {
        "type": type(ds).__name__, "len": len(ds), "columns": sorted(ds.column_names),
        "metadata": {k: md.get(k) for k in ("schema_version", "format", "backend", "split", "config", "n_mlps",
                                            "n_samples", "width", "depth")},
        "seed_protocol": [md["seed_protocol"]["name"], md["seed_protocol"]["version"]],
        "same_function": whestbench.load_dataset is load_dataset and whestbench.metadata is metadata,
        **identity(ds), **numbers(ds),
    }


def s_mlps():
    ds = load_dataset(str(WORK / "full"))
    mlps = list(iter_mlps(ds))
    for m in mlps:
        m.validate()
    third = mlp_at(ds, 2)
    return {
        "mlps": [[m.name, int(m.seed), m.width, m.depth, len(m.weights), list(np.asarray(m.weights[0]).shape),
                  str(np.asarray(m.weights[0]).dtype), digest(m.weights, np.float32)] for m in mlps],
        "mlp_at_is_third": (third.name, third.seed, digest(third.weights, np.float32))
        == (mlps[2].name, mlps[2].seed, digest(mlps[2].weights, np.float32)),
        "is_MLP": all(isinstance(m, whestbench.MLP) for m in mlps),
    }


def s_merge():
    bake("part-0", mlp_range=(0, 2))
    bake("part-1", mlp_range=(2, 4))
    md = json.loads((WORK / "part-1" / "metadata.json").read_text())
    out = merge_datasets([WORK / "part-1", WORK / "part-0"], output_dir=WORK / "merged")
    merged, full = load_dataset(WORK / "merged"), load_dataset(WORK / "full")
    return {
        "partial": [md.get("is_partial"), md.get("mlp_range"), md.get("total_n_mlps"), md.get("n_mlps")],
        "returns_path": Path(out) == WORK / "merged",
        "same_as_single_bake": identity(merged) == identity(full) and numbers(merged) == numbers(full),
        "top_level_merge": whestbench.merge_datasets is merge_datasets,
    }


def s_merge_errors():
    bake("part-1-3", mlp_range=(1, 3))
    create_dataset(n_mlps=4, mlp_seeds=SEEDS, output_path=WORK / "part-w32", mlp_range=(2, 4),
                   n_samples=SHAPE["n_samples"], width=32, depth=SHAPE["depth"])
    cases = {
        "incomplete": [WORK / "part-0"],
        "overlap": [WORK / "part-0", WORK / "part-1-3", WORK / "part-1"],
        "incompatible": [WORK / "part-0", WORK / "part-w32"],
        "not_partial": [WORK / "full"],
    }
    got = {}
    for name, inputs in cases.items():
        out = WORK / f"merge-{name}"
        try:
            merge_datasets(inputs, output_dir=out)
            got[name] = {"raised": []}
        except Exception as exc:  # noqa: BLE001
            got[name] = error(exc)
        got[name]["left_output"] = out.exists()
    return got


def s_combine():
    bake("holdout", seeds=HOLDOUT_SEEDS, split="holdout", config="holdout")
    out = combine_split_datasets([WORK / "full", WORK / "holdout"], output_dir=WORK / "eval")
    dsd = whestbench.load_dataset(WORK / "eval")
    md = metadata(dsd)
    hold = load_dataset(WORK / "eval", split="holdout")
    return {
        "returns_path": Path(out) == WORK / "eval",
        "type": type(dsd).__name__, "splits": sorted(dsd.keys()), "metadata_splits": sorted(md["splits"]),
        "holdout_md": {k: metadata(dsd, split="holdout").get(k) for k in ("split", "config", "n_mlps", "width")},
        "holdout_type": type(hold).__name__, "holdout_names": [m.name for m in iter_mlps(hold)],
        "holdout_same_as_input": identity(hold) == identity(load_dataset(WORK / "holdout"))
        and numbers(hold) == numbers(load_dataset(WORK / "holdout")),
        "prepared_arrow": (WORK / "eval" / "prepared").is_dir(),
        "top_level_combine": whestbench.combine_split_datasets is combine_split_datasets,
    }


def s_errors():
    bad = WORK / "bad"
    (bad / "data").mkdir(parents=True)
    (bad / "metadata.json").write_text(json.dumps({"schema_version": "9.9"}))
    dsd = load_dataset(WORK / "eval")
    ds = load_dataset(WORK / "full")
    calls = {
        "load_bad_schema": lambda: load_dataset(bad),
        "metadata_unknown_split": lambda: metadata(dsd, split="nope"),
        "metadata_split_of_a_dataset": lambda: metadata(ds, split="public"),
        "iter_mlps_of_a_dict": lambda: list(iter_mlps(dsd)),
        "mlp_at_of_a_dict": lambda: mlp_at(dsd, 0),
        "create_existing_output": lambda: bake("full"),
        "create_wrong_seed_count": lambda: create_dataset(n_mlps=3, mlp_seeds=SEEDS, output_path=WORK / "x3",
                                                         **SHAPE),
        "create_duplicate_seeds": lambda: create_dataset(n_mlps=2, mlp_seeds=[5, 5], output_path=WORK / "dup",
                                                        **SHAPE),
    }
    got = {}
    for name, call in calls.items():
        try:
            call()
            got[name] = {"raised": []}
        except Exception as exc:  # noqa: BLE001
            got[name] = error(exc)
    return {**got, "left_outputs": sorted(p.name for p in (WORK / "x3", WORK / "dup") if p.exists())}


def s_refusals():
    """SPEC §8's deliberate refusals: a slice without seeds; splits that share seeds."""
    got = {}
    try:
        create_dataset(n_mlps=4, output_path=WORK / "slice-random", mlp_range=(0, 2), **SHAPE)
        got["slice_without_seeds"] = {"raised": []}
    except Exception as exc:  # noqa: BLE001
        got["slice_without_seeds"] = error(exc)
    bake("holdout-shared", seeds=SEEDS[:2], split="holdout", config="holdout")
    try:
        combine_split_datasets([WORK / "full", WORK / "holdout-shared"], output_dir=WORK / "eval-shared")
        got["splits_sharing_seeds"] = {"raised": []}
    except Exception as exc:  # noqa: BLE001
        got["splits_sharing_seeds"] = error(exc)
    return got


def s_top_level():
    return {
        "SCHEMA_VERSION": whestbench.SCHEMA_VERSION,
        "publish_dataset_callable": callable(whestbench.publish_dataset),
        "create_dataset": whestbench.create_dataset is create_dataset,
        "InvalidDatasetError": whestbench.InvalidDatasetError is InvalidDatasetError,
        "merge_errors_are_invalid": all(issubclass(c, InvalidDatasetError) for c in (
            MergeIncompatibleError, MergeIncompleteError, MergeOverlapError, MergeCorruptError)),
    }


def cli(argv) -> dict:
    """``main(argv)``'s return value or SystemExit code, its output kept out of ours."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            return {"returned": main([str(a) for a in argv])}
        except SystemExit as exc:
            return {"system_exit": exc.code}


def s_cli():
    (WORK / "seeds.json").write_text(json.dumps(SEEDS[:2]))
    shape = ["--n-samples", SHAPE["n_samples"], "--width", SHAPE["width"], "--depth", SHAPE["depth"]]
    got = {
        "bake": cli(["dataset", "bake", "--n-mlps", 2, *shape, "--mlp-seeds", WORK / "seeds.json",
                     "--output", WORK / "cli-bake"]),
        "info": cli(["dataset", "info", WORK / "full"]),
        "merge": cli(["dataset", "merge", WORK / "part-0", WORK / "part-1", "--output", WORK / "cli-merged"]),
        "help": cli(["--help"]),
        "bake_help": cli(["dataset", "bake", "--help"]),
        "bad_type": cli(["dataset", "bake", "--n-mlps", "x", *shape, "--output", WORK / "cli-x"]),
        "missing_option": cli(["dataset", "bake", "--n-mlps", 2]),
        "unknown_option": cli(["dataset", "info", WORK / "full", "--bogus"]),
        "version": cli(["version"]),
    }
    ds = load_dataset(WORK / "cli-bake")
    return {**got, "cli_bake": {**identity(ds), **numbers(ds)},
            "cli_merged_same": numbers(load_dataset(WORK / "cli-merged")) == numbers(load_dataset(WORK / "full"))}


def s_torch():
    from whestbench.dataset_torch import create_dataset_torch

    path = create_dataset_torch(n_mlps=4, mlp_seeds=SEEDS, output_path=WORK / "torch", device="cpu", **SHAPE)
    ds = load_dataset(path)
    return {"backend": metadata(ds)["backend"], **identity(ds)}


for name, fn in [("create_dataset", s_create), ("load", s_load), ("mlps", s_mlps), ("merge", s_merge),
                 ("merge_errors", s_merge_errors), ("combine", s_combine), ("errors", s_errors),
                 ("refusals", s_refusals), ("top_level", s_top_level), ("cli", s_cli), ("torch", s_torch)]:
    step(name, fn)
