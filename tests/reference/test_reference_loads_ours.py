"""whestbench 0.16.2's loader and ``info`` read the datasets we write (SPEC §4: compatible both ways).

For each layout we produce — a single-split bake, a split in several Parquet shards, a merge of
partials, each split of a multi-split dataset — the reference's ``load_dataset`` / ``metadata`` /
``iter_mlps`` / ``mlp_at`` must give our rows, names, seeds and protocol-3.0 ``MLP.seed``, and its
``whest dataset info`` must exit 0. The reference runs once, in its own venv, over all of them.

Every bake of ours adds ``all_layer_stderr`` (issue 14), and a bake to a target standard error adds
``n_samples_used``: the ``target-*`` layouts are control-variate bakes to a target whose MLPs stop
at different sample counts, single, merged from slices, and as the splits of a combined dataset.
The reference must read those columns as ours wrote them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.compute.seeds import estimator_seed
from whestbench.bake.pipeline import create_dataset
from helpers.datasets import write_keeping_trail
from whestbench.format import writer
from whestbench.format.writer import row_bytes

pytestmark = pytest.mark.reference

SEEDS = [101, 2**62 + 5, 7, 123456789, 2**63 - 1]
HOLDOUT_SEEDS = [31, 32, 33]
WIDTH, DEPTH, N_SAMPLES = 8, 2, 300
SHARDS = 3  # 5 rows at 2 per shard
# control variates to a target: at width 8 (16,384-sample chunks) a target is first judged after 32 chunks
# (MIN_RELIABLE_BATCHES) and next at 256; under the rule that plans for the batch-means error's own spread
# (pilot-planned-exceed) two of SEEDS stop at 32 chunks (524,288 samples), the rest at the cap, for any E
# from 2.2e-4 to 2.5e-4 (at 2e-4 every MLP reaches the cap)
TARGET = dict(n_samples=48 * 16384 + 100, estimator="control-variate", target_stderr=2.5e-4)
TARGET_KINDS = ["target-single", "target-merged", "target-multi-split-public", "target-multi-split-holdout"]
KINDS = ["single", "multi-shard", "merged", "multi-split-public", "multi-split-holdout"] + TARGET_KINDS
OURS = ("all_layer_stderr", "n_samples_used")  # the columns only our bakes write

# Runs in the reference venv: load each dataset through 0.16.2's public API, report what it saw.
_PROBE = r'''
import contextlib, hashlib, io, json, sys
import numpy as np
import whestbench
from whestbench.cli import main

def sha(a):
    return hashlib.sha256(np.ascontiguousarray(np.asarray(a, dtype=np.float32)).tobytes()).hexdigest()

def mlp(m):
    return {"name": m.name, "seed": int(m.seed), "width": m.width, "depth": m.depth, "weights": sha(np.stack(m.weights))}

out = {}
for key, path, split in json.loads(sys.argv[1]):
    got = {}
    try:
        ds = whestbench.load_dataset(path, split=split)
        md = whestbench.metadata(ds)
        if hasattr(ds, "keys"):  # a DatasetDict: no row readers (they raise TypeError by design)
            got["dict_keys"] = list(ds.keys())
            got["metadata_splits"] = sorted(md["splits"])
        else:
            got["type"] = type(ds).__name__
            got["metadata"] = {k: md.get(k) for k in ("n_mlps", "n_samples", "width", "depth", "split", "config")}
            got["rows"] = [
                {"mlp_id": r["mlp_id"], "mlp_name": r["mlp_name"], "mlp_seed": r["mlp_seed"], "weights": sha(r["weights"]),
                 "all_layer_means": sha(r["all_layer_means"]), "final_means": sha(r["final_means"]),
                 "avg_variance": r["avg_variance"],
                 "all_layer_stderr": sha(r["all_layer_stderr"]) if "all_layer_stderr" in r else None,
                 "n_samples_used": r.get("n_samples_used")}
                for r in ds
            ]
            got["columns"] = sorted(ds.column_names)
            got["iter_mlps"] = [mlp(m) for m in whestbench.iter_mlps(ds)]
            got["mlp_at"] = [mlp(whestbench.mlp_at(ds, i)) for i in range(len(ds))]
    except Exception as exc:
        got["error"] = f"{type(exc).__name__}: {exc}"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            got["info_rc"] = main(["dataset", "info", path])
        except SystemExit as exc:
            got["info_rc"] = exc.code
    got["info_text"] = buf.getvalue()[-2000:]
    out[key] = got
print("@@RESULT@@" + json.dumps(out))
'''


def sha(values) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(values, dtype=np.float32)).tobytes()).hexdigest()


def our_split_table(directory: Path, split: str) -> pa.Table:
    shards = sorted((directory / "data").glob(f"{split}-*.parquet"))
    assert shards, f"no {split} shards under {directory}/data"
    return pa.concat_tables([pq.read_table(p) for p in shards])


def expected(directory: Path, split: str) -> dict:
    """What a correct reader must see in our files: rows, and MLPs with protocol-3.0 seeds."""
    rows = our_split_table(directory, split).to_pylist()
    return {
        "rows": [
            {"mlp_id": r["mlp_id"], "mlp_name": r["mlp_name"], "mlp_seed": r["mlp_seed"], "weights": sha(r["weights"]),
             "all_layer_means": sha(r["all_layer_means"]), "final_means": sha(r["final_means"]),
             "avg_variance": r["avg_variance"],
             "all_layer_stderr": sha(r["all_layer_stderr"]) if "all_layer_stderr" in r else None,
             "n_samples_used": r.get("n_samples_used")}
            for r in rows
        ],
        "mlps": [
            {"name": r["mlp_name"], "seed": estimator_seed(r["mlp_seed"]), "width": WIDTH, "depth": DEPTH, "weights": sha(r["weights"])}
            for r in rows
        ],
    }


def bake(out: Path, seeds: list[int], split: str = "public", mlp_range=None, **kw) -> Path:
    kw = {"n_samples": N_SAMPLES, **kw}
    return create_dataset(len(seeds), width=WIDTH, depth=DEPTH, mlp_seeds=seeds, output_path=out, split=split,
                          mlp_range=mlp_range, **kw)


def rewrite_in_shards(src: Path, out: Path, n_shards: int) -> Path:
    """``src`` rewritten by our writer with a shard size small enough for ``n_shards`` shards.

    The bake has no shard-size parameter, so the rows and metadata of a real bake go back through
    ``write_dataset`` (the writer the bake itself uses) with ``writer.MAX_SHARD_BYTES`` lowered.
    """
    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    rows = our_split_table(src, md["split"]).to_pylist()
    per_shard = -(-len(rows) // n_shards)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer, "MAX_SHARD_BYTES", per_shard * row_bytes(WIDTH, DEPTH))
        return write_keeping_trail(out, md["split"], rows, WIDTH, DEPTH, md, src / md["audit"]["file"])


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, tuple[Path, str | None] | str]:
    """kind -> (our dataset directory, split to load), or the reason that layout cannot be made yet."""
    root = tmp_path_factory.mktemp("ours")
    single = bake(root / "single", SEEDS)
    made: dict = {"single": (single, "public")}
    made["multi-shard"] = (rewrite_in_shards(single, root / "multi-shard", SHARDS), "public")
    try:
        from whestbench.dataset_io import merge_datasets
    except ImportError as exc:
        made["merged"] = f"whestbench.dataset_io.merge_datasets is not available yet ({exc})"
    else:
        parts = [bake(root / "part-0", SEEDS, mlp_range=(0, 2)), bake(root / "part-1", SEEDS, mlp_range=(2, 5))]
        made["merged"] = (Path(merge_datasets(parts, output_dir=root / "merged")), "public")
    try:
        from whestbench.dataset_io import combine_split_datasets
    except ImportError as exc:
        reason = f"whestbench.dataset_io.combine_split_datasets is not available yet ({exc})"
        made["multi-split-public"] = made["multi-split-holdout"] = made["multi-split"] = reason
    else:
        holdout = bake(root / "holdout", HOLDOUT_SEEDS, split="holdout")
        combined = Path(combine_split_datasets([single, holdout], output_dir=root / "combined"))
        made["multi-split-public"] = (combined, "public")
        made["multi-split-holdout"] = (combined, "holdout")
        made["multi-split"] = (combined, None)
    from whestbench.dataset_io import combine_split_datasets, merge_datasets

    target = bake(root / "target-single", SEEDS, **TARGET)
    made["target-single"] = (target, "public")
    parts = [bake(root / f"target-part-{k}", SEEDS, mlp_range=r, **TARGET) for k, r in enumerate([(0, 2), (2, 5)])]
    made["target-merged"] = (Path(merge_datasets(parts, output_dir=root / "target-merged")), "public")
    holdout = bake(root / "target-holdout", HOLDOUT_SEEDS, split="holdout", **TARGET)
    combined = Path(combine_split_datasets([target, holdout], output_dir=root / "target-combined"))
    made["target-multi-split-public"] = (combined, "public")
    made["target-multi-split-holdout"] = (combined, "holdout")
    return made


@pytest.fixture(scope="module")
def seen(datasets, run_reference_python) -> dict[str, dict]:
    """What the reference reports for every dataset we could make."""
    todo = [[kind, str(v[0]), v[1]] for kind, v in datasets.items() if not isinstance(v, str)]
    done = run_reference_python(_PROBE, json.dumps(todo))
    line = next(ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("@@RESULT@@"))
    return json.loads(line[len("@@RESULT@@"):])


def loaded(kind: str, datasets, seen) -> tuple[dict, Path, str]:
    entry = datasets[kind]
    if isinstance(entry, str):
        pytest.skip(entry)
    got = seen[kind]
    assert "error" not in got, f"the reference could not load our {kind} dataset: {got['error']}"
    return got, entry[0], entry[1]


def test_the_multi_shard_dataset_really_has_several_shards(datasets):
    directory, split = datasets["multi-shard"]
    assert len(list((directory / "data").glob(f"{split}-*.parquet"))) == SHARDS


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "multi-split"])
def test_every_layout_carries_a_listed_audit_trail(kind, datasets):
    """What the reference loads below has our audit trail beside its data (so it ignores it)."""
    entry = datasets[kind]
    if isinstance(entry, str):
        pytest.skip(entry)
    directory, split = entry
    md = json.loads((directory / "metadata.json").read_text())
    assert (directory / "audit" / f"{split}.parquet").is_file() and f"audit/{split}.parquet" in md["checksums"]


def test_plain_datasets_ignores_the_trail(datasets):
    """Hugging Face ``datasets`` on our directories (single split and two splits) loads data/'s rows and
    columns only: the audit trail under audit/ is neither a split nor extra rows."""
    hf = pytest.importorskip("datasets")
    single, _ = datasets["single"]
    got = hf.load_dataset(str(single))
    assert list(got) == ["public"]
    table = pq.read_table(single / "data" / "public-00000-of-00001.parquet")
    assert got["public"].num_rows == table.num_rows and got["public"].column_names == table.column_names
    entry = datasets["multi-split"]
    if isinstance(entry, str):
        pytest.skip(entry)
    combined, _ = entry
    got = hf.load_dataset(str(combined))
    assert sorted(got) == ["holdout", "public"]
    for split in got:
        assert got[split].num_rows == pq.read_table(combined / "data" / f"{split}-00000-of-00001.parquet").num_rows
        assert "mlp_id" in got[split].column_names and "sample_start" not in got[split].column_names
    assert hf.load_dataset(str(combined), split="holdout").num_rows == got["holdout"].num_rows


@pytest.mark.parametrize("kind", KINDS)
def test_reference_load_dataset_reads_our_rows(kind, datasets, seen):
    got, directory, split = loaded(kind, datasets, seen)
    assert got["rows"] == expected(directory, split)["rows"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_iter_mlps_gives_our_names_weights_and_protocol_3_seeds(kind, datasets, seen):
    got, directory, split = loaded(kind, datasets, seen)
    assert got["iter_mlps"] == expected(directory, split)["mlps"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_mlp_at_agrees_with_iter_mlps(kind, datasets, seen):
    got, _, _ = loaded(kind, datasets, seen)
    assert got["mlp_at"] == got["iter_mlps"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_metadata_reads_our_shape_and_split(kind, datasets, seen):
    got, _, split = loaded(kind, datasets, seen)
    n = len(HOLDOUT_SEEDS) if split == "holdout" else len(SEEDS)
    n_samples = TARGET["n_samples"] if kind in TARGET_KINDS else N_SAMPLES
    assert {k: got["metadata"][k] for k in ("n_mlps", "n_samples", "width", "depth")} == {
        "n_mlps": n, "n_samples": n_samples, "width": WIDTH, "depth": DEPTH,
    }
    assert got["metadata"]["split"] in (split, None)  # multi-split projections carry no split key


@pytest.mark.parametrize("kind", ["merged", "target-merged"])
def test_reference_loads_our_merge_as_the_same_rows_as_the_whole_bake(kind, datasets, seen):
    got, _, _ = loaded(kind, datasets, seen)
    single, _ = datasets[kind.replace("merged", "single")]
    assert got["rows"] == expected(single, "public")["rows"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_load_dataset_sees_our_error_bar_columns(kind, datasets, seen):
    got, directory, split = loaded(kind, datasets, seen)
    want = {"all_layer_stderr"} | ({"n_samples_used"} if kind in TARGET_KINDS else set())
    assert {c for c in got["columns"] if c in OURS} == want
    assert all(r["all_layer_stderr"] is not None for r in got["rows"])


def test_the_target_bakes_stop_their_mlps_at_different_sample_counts(datasets, seen):
    got, _, _ = loaded("target-single", datasets, seen)
    assert sorted({r["n_samples_used"] for r in got["rows"]}) == [32 * 16384, TARGET["n_samples"]]


def test_reference_gives_a_datasetdict_over_our_splits_without_split(datasets, seen):
    got, _, _ = loaded("multi-split", datasets, seen)
    assert got["dict_keys"] == ["holdout", "public"]
    assert got["metadata_splits"] == ["holdout", "public"]


@pytest.mark.parametrize("kind", ["single", "multi-shard", "merged", "multi-split", "target-single", "target-merged",
                                  "target-multi-split-public"])
def test_reference_info_runs_on_our_dataset(kind, datasets, seen):
    if isinstance(datasets[kind], str):
        pytest.skip(datasets[kind])
    got = seen[kind]
    assert got["info_rc"] == 0, got["info_text"]
    assert "WhestBench dataset" in got["info_text"]
