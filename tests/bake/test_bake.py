"""Baking a dataset: layout, metadata, checksums, thread-count invariance, slices, resume, --seed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from whestbench.compute.seeds import derived_seeds, seed_list_digest
from whestbench.bake.pipeline import BakeConfig, bake, create_dataset
from whestbench.errors import UsageError
from whestbench.work.ledger import LedgerMismatch
from whestbench.work.workdir import work_dir_for

from helpers.datasets import stopped_after_first_unit

NUMERIC_COLUMNS = ("all_layer_means", "final_means", "avg_variance")  # the ground truth the tests compare

SEEDS = [101, 202, 303, 404, 505]
SHAPE = dict(n_samples=1500, width=6, depth=3)

# metadata.json keys whestbench 0.16.2 writes for a CPU bake, in its order (facts §3.3).
KEYS_016 = [
    "schema_version", "format", "backend", "seed_protocol", "created_at_utc", "split", "config", "n_mlps",
    "n_samples", "width", "depth", "hardware", "whestbench_version", "flopscope_version",
]
PARTIAL_KEYS = ["is_partial", "mlp_range", "total_n_mlps"]


def _bake(out: Path, **kw) -> Path:
    """create_dataset of the 5 SEEDS at SHAPE."""
    return create_dataset(len(SEEDS), mlp_seeds=SEEDS, output_path=out, **SHAPE, **kw)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """A complete 5-MLP bake, shared by the read-only tests below."""
    return _bake(tmp_path_factory.mktemp("full") / "ds", max_threads=1)


def test_a_bake_writes_data_metadata_and_card(full):
    assert sorted(p.name for p in full.iterdir()) == ["README.md", "audit", "data", "metadata.json"]
    assert [p.name for p in (full / "data").iterdir()] == ["public-00000-of-00001.parquet"]
    assert [p.name for p in (full / "audit").iterdir()] == ["public.parquet"]  # the audit trail (docs/format.md)


def test_a_bake_leaves_no_work_or_staging_dir(full):
    assert sorted(p.name for p in full.parent.iterdir()) == ["ds"]


def test_rows_are_the_seeds_in_order(full, read_columns):
    cols = read_columns(full)
    assert list(cols["mlp_id"]) == [0, 1, 2, 3, 4]
    assert list(cols["mlp_seed"]) == SEEDS
    assert cols["weights"].shape == (5, 3, 6, 6)
    assert cols["all_layer_means"].shape == (5, 3, 6)
    assert (cols["final_means"] == cols["all_layer_means"][:, -1]).all()


def test_metadata_keys_follow_016_order_then_ours_then_checksums(full, read_metadata):
    keys = list(read_metadata(full))
    assert keys[: len(KEYS_016)] == KEYS_016
    assert keys[-1] == "checksums"
    ours = keys[len(KEYS_016) : -1]
    assert {"sampler", "seed_list_digest", "seed_source", "bake_command"} <= set(ours)
    assert not set(ours) & set(KEYS_016 + PARTIAL_KEYS)


def test_metadata_describes_the_bake(full, read_metadata):
    md = read_metadata(full)
    assert md["schema_version"] == "3.0" and md["format"] == "hf-datasets-parquet" and md["backend"] == "flopscope"
    assert md["seed_protocol"] == {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"}
    assert (md["split"], md["config"], md["n_mlps"]) == ("public", "default", 5)
    assert (md["n_samples"], md["width"], md["depth"]) == (1500, 6, 3)
    assert md["sampler"]["name"] == "pcg64" and md["sampler"]["block_size"] == 16384
    assert md["seed_list_digest"] == seed_list_digest(SEEDS)
    assert md["seed_source"] == {"method": "explicit"}
    assert "is_partial" not in md
    assert (full / "metadata.json").read_text() == json.dumps(md, indent=2)  # 0.16's formatting


def test_checksums_match_the_data_files(full, read_metadata):
    md = read_metadata(full)
    files = sorted(p.relative_to(full).as_posix() for d in ("data", "audit") for p in (full / d).rglob("*") if p.is_file())
    assert sorted(md["checksums"]) == files
    for name, digest in md["checksums"].items():
        assert digest == "sha256:" + hashlib.sha256((full / name).read_bytes()).hexdigest()


def test_thread_count_does_not_change_a_byte_of_the_numbers(full, tmp_path, read_columns, assert_bytes_equal):
    two = read_columns(_bake(tmp_path / "t2", max_threads=2))
    one = read_columns(full)
    for col in NUMERIC_COLUMNS + ("weights", "mlp_seed"):
        assert_bytes_equal(one[col], two[col], col)
    assert one["mlp_name"] == two["mlp_name"]


def test_a_slice_is_a_partial_with_its_range_and_the_whole_lists_digest(full, tmp_path, read_metadata, read_columns,
                                                                         assert_bytes_equal):
    part = _bake(tmp_path / "p", mlp_range=(1, 3))
    md = read_metadata(part)
    assert list(md)[-len(PARTIAL_KEYS) - 2 : -2] == PARTIAL_KEYS  # then checksums_written_for, checksums
    assert (md["is_partial"], md["mlp_range"], md["total_n_mlps"], md["n_mlps"]) == (True, [1, 3], 5, 2)
    assert md["seed_list_digest"] == read_metadata(full)["seed_list_digest"]
    cols, whole = read_columns(part), read_columns(full)
    assert list(cols["mlp_id"]) == [1, 2]
    assert cols["mlp_name"] == whole["mlp_name"][1:3]  # names are made unique over the whole list
    for col in NUMERIC_COLUMNS:
        assert_bytes_equal(cols[col], whole[col][1:3], col)


def test_a_range_covering_everything_is_a_complete_dataset(tmp_path, read_metadata):
    md = read_metadata(_bake(tmp_path / "all", mlp_range=(0, 5)))
    assert not set(PARTIAL_KEYS) & set(md)


def test_a_partial_needs_the_whole_seed_list():
    with pytest.raises(UsageError, match="--mlp-seeds FILE .* or --seed S"):
        BakeConfig(n_mlps=5, output=Path("x"), mlp_range=(0, 2), **SHAPE)


def test_an_interrupted_bake_resumes_to_identical_numbers(full, tmp_path, read_columns, assert_bytes_equal):
    out = tmp_path / "resumed"
    cfg = BakeConfig(n_mlps=5, output=out, mlp_seeds=tuple(SEEDS), max_threads=1, **SHAPE)
    stopped_after_first_unit(cfg)
    assert not out.exists()
    work = work_dir_for(out)
    assert [p.name for p in (work / "units").iterdir()] == ["mlp00000000.unit"]

    events = []
    bake(cfg, on_event=events.append)
    start = next(e for e in events if e.kind == "start")
    assert start.progress.recovered == SHAPE["n_samples"] and start.data["units_done"] == 1
    assert not work.exists()
    resumed, whole = read_columns(out), read_columns(full)
    for col in NUMERIC_COLUMNS + ("weights", "mlp_seed", "mlp_id"):
        assert_bytes_equal(resumed[col], whole[col], col)
    assert resumed["mlp_name"] == whole["mlp_name"]


def test_resuming_with_different_sizes_is_refused(tmp_path):
    out = tmp_path / "ds"
    stopped_after_first_unit(BakeConfig(n_mlps=5, output=out, mlp_seeds=tuple(SEEDS), max_threads=1, **SHAPE))
    changed = dict(SHAPE, n_samples=SHAPE["n_samples"] + 1)
    with pytest.raises(LedgerMismatch, match="n_samples"):
        bake(BakeConfig(n_mlps=5, output=out, mlp_seeds=tuple(SEEDS), **changed))
    assert not out.exists()
    assert (work_dir_for(out) / "units" / "mlp00000000.unit").exists()  # the original bake can still resume


def test_an_interrupted_auto_seeded_bake_resumes_with_the_same_seeds(tmp_path, read_columns, read_metadata):
    out = tmp_path / "auto"
    cfg = BakeConfig(n_mlps=3, output=out, max_threads=1, **SHAPE)
    stopped_after_first_unit(cfg)
    saved = json.loads((work_dir_for(out) / "auto-seeds.json").read_text())["seeds"]
    bake(cfg)
    assert list(read_columns(out)["mlp_seed"]) == saved
    assert read_metadata(out)["seed_source"] == {"method": "random"}


def test_random_seeds_are_settled_by_the_plan_and_kept_by_the_bake(tmp_path):
    """plan_bake draws a random-seed bake's seeds (or reads those an earlier run kept), writing nothing; the bake
    keeps them before any unit, and refuses a plan whose seeds another run replaced in between."""
    from whestbench.bake.pipeline import keep_seeds
    from whestbench.bake.plan import plan_bake
    from whestbench.errors import RESUME, WorkDirBusy
    from whestbench.work.ledger import save_seeds

    out = tmp_path / "auto"
    work = work_dir_for(out)
    cfg = BakeConfig(n_mlps=3, output=out, max_threads=1, **SHAPE)
    first = plan_bake(cfg, probe=False)
    assert len(set(first.spec.seeds)) == 3 and first.seed_source == {"method": "random"}
    assert not work.exists()  # planning writes nothing
    assert plan_bake(cfg, probe=False).spec.seeds != first.spec.seeds  # nothing kept: drawn afresh
    keep_seeds(first)
    assert json.loads((work / "auto-seeds.json").read_text())["seeds"] == list(first.spec.seeds)
    assert plan_bake(cfg, probe=False).spec.seeds == first.spec.seeds  # a re-run plans with the kept ones
    other = [7, 8, 9]
    save_seeds(work, other, seed_list_digest(other))  # another run kept its own after `first` was planned
    with pytest.raises(WorkDirBusy) as caught:
        keep_seeds(first)
    assert caught.value.fix == RESUME
    assert json.loads((work / "auto-seeds.json").read_text())["seeds"] == other  # left as it was
    assert plan_bake(BakeConfig(n_mlps=3, max_threads=1, output=None, **SHAPE), probe=False).spec.seeds == ()


def test_a_root_seed_bake_is_reproducible_and_recorded(tmp_path, read_columns, read_metadata, assert_bytes_equal):
    a = read_columns(create_dataset(4, seed=7, output_path=tmp_path / "a", **SHAPE))
    b = read_columns(create_dataset(4, seed=7, output_path=tmp_path / "b", **SHAPE))
    assert list(a["mlp_seed"]) == derived_seeds(7, 4)
    for col in NUMERIC_COLUMNS + ("weights", "mlp_seed"):
        assert_bytes_equal(a[col], b[col], col)
    md = read_metadata(tmp_path / "a")
    assert md["seed_source"] == {"method": "derived", "root_seed": 7}
    assert "--seed 7" in md["bake_command"]
    assert "seed" not in md  # protocol 3.0: the seeds live in the mlp_seed column


def test_a_different_root_seed_gives_different_mlps(tmp_path, read_columns):
    a = read_columns(create_dataset(2, seed=7, output_path=tmp_path / "a", **SHAPE))
    b = read_columns(create_dataset(2, seed=8, output_path=tmp_path / "b", **SHAPE))
    assert set(a["mlp_seed"]).isdisjoint(b["mlp_seed"])


def test_an_existing_output_is_refused_before_any_work(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    with pytest.raises(UsageError, match="already exists"):
        # 10**12 samples at width 2048 would run for days: the refusal must come first.
        create_dataset(2, 10**12, 2048, 64, mlp_seeds=[1, 2], output_path=out)
    assert list(out.iterdir()) == []
    assert not work_dir_for(out).exists()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_mlps=0), "--n-mlps must be a positive integer"),
        (dict(n_samples=-5), "--n-samples must be a positive integer"),
        (dict(width=0), "--width must be a positive integer"),
        (dict(depth=True), "--depth must be a positive integer"),
        (dict(split="round-one"), "hyphen"),
        (dict(config="../x"), "config name"),
        (dict(max_threads=0), "--max-threads must be a positive integer"),
        (dict(seed=-1), "--seed must be a non-negative integer"),
        (dict(seed=1, mlp_seeds=(1, 2)), "either --mlp-seeds or --seed"),
        (dict(mlp_seeds=(1, 1)), "duplicate"),
        (dict(mlp_range=(1, 3)), "mlp_range \\(1, 3\\) is invalid for n_mlps=2"),
    ],
)
def test_bad_requests_are_refused_as_usage_errors(kw, match):
    args = dict(n_mlps=2, n_samples=10, width=2, depth=1, output=Path("unused"), mlp_seeds=None)
    args.update(kw)
    with pytest.raises(UsageError, match=match):
        BakeConfig(**args)


def test_identity_columns_reproduce_the_golden_bake(golden_dir, tmp_path, read_columns, assert_bytes_equal):
    seeds = json.loads((golden_dir / "seeds-6.json").read_text())
    ours = read_columns(create_dataset(6, 20001, 64, 4, mlp_seeds=seeds, output_path=tmp_path / "ds"))
    golden = read_columns(golden_dir / "full-w64-d4")
    for col in ("mlp_id", "mlp_seed", "weights"):
        assert_bytes_equal(ours[col], golden[col], col)
    assert ours["mlp_name"] == golden["mlp_name"]


# --- start-up --------------------------------------------------------------------------------------


def test_a_small_bake_imports_neither_datasets_pandas_numba_nor_torch(tmp_path):
    """Each would add to a small bake's start-up (~1 s, 0.15 s, 0.3 s, 1.4 s): docs/performance.md."""
    code = (
        "import sys\n"
        "from whestbench.bake.pipeline import create_dataset\n"
        f"create_dataset(2, 1000, 8, 3, mlp_seeds=[1, 2], output_path={str(tmp_path / 'ds')!r})\n"
        "print(sorted(m for m in ('datasets', 'pandas', 'numba', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert (tmp_path / "ds" / "metadata.json").is_file()


def _fake_kernels(monkeypatch, load, warm):
    from types import SimpleNamespace

    from whestbench.compute import jit
    from whestbench.work import steps

    monkeypatch.setattr(steps, "kernel_module", lambda spec, compute: SimpleNamespace(load_kernels=load))
    monkeypatch.setattr(jit, "cache_is_warm", lambda module: warm)


def test_a_cold_kernel_cache_is_announced_before_the_units_start(tmp_path, monkeypatch):
    """A cold numba cache (first run on a machine) takes seconds to compile: the bake says why it is quiet."""
    from whestbench.bake import pipeline as bake_module

    _fake_kernels(monkeypatch, lambda: None, warm=False)
    events = []
    _bake(tmp_path / "ds", progress=lambda info: events.append(info["event"]))
    kinds = [(e.kind, e.message) for e in events]
    note = ("note", bake_module.KERNELS_NOTE)
    assert note in kinds
    assert kinds.index(note) < [k for k, _ in kinds].index("start")


def test_a_slow_load_where_the_cache_cannot_be_read_is_announced(tmp_path, monkeypatch):
    import time

    from whestbench.bake import pipeline as bake_module

    monkeypatch.setattr(bake_module, "KERNELS_SLOW_S", 0.05)
    noted = threading.Event()
    # a load that lasts until the note comes (it took a fixed 0.5 s, and the note's timer thread, late
    # on a busy machine, could come after it): only a bake that never says it fails, after the guard
    _fake_kernels(monkeypatch, lambda: noted.wait(60), warm=None)
    events = []

    def progress(info) -> None:
        events.append(info["event"])
        if info["event"].message == bake_module.KERNELS_NOTE:
            noted.set()

    started = time.monotonic()
    _bake(tmp_path / "ds", progress=progress)
    assert ("note", bake_module.KERNELS_NOTE) in [(e.kind, e.message) for e in events], \
        f"no note after a kernel load of {time.monotonic() - started:.0f} s (KERNELS_SLOW_S 0.05 s)"


def test_a_kernel_load_from_a_warm_cache_says_nothing(tmp_path, monkeypatch):
    from whestbench.bake import pipeline as bake_module

    loaded = []
    _fake_kernels(monkeypatch, lambda: loaded.append(1), warm=True)
    events = []
    _bake(tmp_path / "ds", progress=lambda info: events.append(info["event"]))
    assert loaded == [1]
    assert all(e.message != bake_module.KERNELS_NOTE for e in events)


def test_saved_samples_counts_the_units_and_checkpoints_of_this_bake_only(tmp_path):
    """The plan line of a resumed bake: finished units count whole, a checkpoint counts its position,
    another bake's work directory counts nothing (read through ``Ledger.peek``)."""
    import numpy as np

    from whestbench.bake.pipeline import saved_samples
    from whestbench.bake.plan import plan_bake
    from whestbench.compute.stats import LayerSums
    from whestbench.work.ledger import Ledger

    cfg = BakeConfig(n_mlps=3, n_samples=5000, width=4, depth=2, seed=1, output=tmp_path / "ds")
    plan = plan_bake(cfg, probe=False)
    assert saved_samples(plan) == 0
    ledger = Ledger(plan.work_dir, plan.spec.identity())
    keys = [u.key for u in plan.spec.units()]
    ledger.save(keys[0], LayerSums(np.zeros((2, 4)), np.zeros((2, 4)), 5000), 1.0)
    ledger.save_checkpoint(keys[1], {"position": 1200}, {"x": np.zeros(1)})
    assert saved_samples(plan) == 5000 + 1200
    other = plan_bake(BakeConfig(n_mlps=3, n_samples=5000, width=4, depth=2, seed=2, output=tmp_path / "ds"),
                      probe=False)
    assert saved_samples(other) == 0


def test_create_dataset_accepts_numpy_integers(tmp_path, read_columns):
    """create_dataset(np.int64(1), ...) said "must be a positive integer; got np.int64(1)"."""
    import numpy as np

    a = create_dataset(np.int64(2), np.int32(300), np.int16(4), np.uint8(2), seed=np.int64(1), output_path=tmp_path / "a")
    b = create_dataset(2, 300, 4, 2, seed=1, output_path=tmp_path / "b")
    ca, cb = read_columns(a), read_columns(b)
    assert all(np.array_equal(ca[k], cb[k]) for k in ("mlp_seed", "weights", "all_layer_means", "avg_variance"))
    with pytest.raises(Exception, match="positive integer"):
        create_dataset(True, 300, 4, 2, seed=1, output_path=tmp_path / "c")


@pytest.mark.parametrize("kwargs, words", [({"output_path": None}, "output_path must be a path"),
                                           ({"output_path": 5}, "output_path must be a path"),
                                           ({"progress": "nope"}, "progress must be a callable")])
def test_bad_api_arguments_are_type_errors_before_any_work(tmp_path, monkeypatch, kwargs, words):
    """output_path=None or 5 gave pathlib's TypeError; progress='nope' failed mid-bake and left a work
    directory. Each is a TypeError naming the argument, before anything is written."""
    monkeypatch.chdir(tmp_path)
    args = {"output_path": tmp_path / "out", **kwargs}
    with pytest.raises(TypeError, match=words):
        create_dataset(2, 300, 4, 2, seed=1, **args)
    assert list(tmp_path.iterdir()) == []


def test_an_api_rerun_of_a_finished_bake_updates_a_changed_card_and_restores_a_lost_one(tmp_path):
    """bake(cfg) on an output that already holds this bake is a no-op for the numbers, but the card is
    no part of them: other card fields are recorded and README.md rewritten, and a lost README.md is
    restored, as the CLI's re-run does (the API kept the old card and said only "nothing to do")."""
    import hashlib
    import json

    out = tmp_path / "ds"
    shape = dict(n_mlps=2, n_samples=400, width=4, depth=2, seed=1)
    bake(BakeConfig(output=out, **shape, card={"pretty_name": "Old title"}))

    def data():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "data").iterdir())}

    before, checksums = data(), json.loads((out / "metadata.json").read_text())["checksums"]
    events = []
    assert bake(BakeConfig(output=out, **shape, card={"pretty_name": "New title", "license": "mit"}),
                on_event=events.append) == out
    notes = [e.message for e in events if e.kind == "note"]
    assert any("card updated: pretty_name 'Old title' → 'New title'" in n for n in notes), notes
    assert any("card updated: license the default → 'mit'" in n for n in notes), notes
    md = json.loads((out / "metadata.json").read_text())
    assert md["card"] == {"pretty_name": "New title", "license": "mit"} and md["checksums"] == checksums
    readme = (out / "README.md").read_text()
    assert "pretty_name: New title" in readme and "license: mit" in readme
    assert data() == before  # the numbers untouched

    (out / "README.md").unlink()
    events.clear()
    bake(BakeConfig(output=out, **shape), on_event=events.append)
    assert any("card rewritten" in e.message for e in events if e.kind == "note")
    assert "pretty_name: New title" in (out / "README.md").read_text()  # the recorded card, not the default
