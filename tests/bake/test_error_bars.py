"""Error bars on whole bakes: the ``all_layer_stderr`` column, the control-variate estimator and
``--target-stderr``, held to these properties (issue 14 asked for them):

- **plain stderr**: the stored column is ``float32(sqrt(s²/N))`` of the samplers' fp64 sums, on both
  samplers (the samplers' sums are held to the activations in ``tests/compute/test_estimators.py``);
- **unbiased**: the control-variate estimate against an independent plain estimate on other samples
  of the same MLP: mean z² over >= 256 neurons in [0.7, 1.4] (10⁸ reference samples, stored in
  ``data/cv_reference_1e8.json`` with the script that made them: ``slow``;
  2²¹: every run, still failing on a bias of 0.8 of the control variate's standard error on every
  neuron, against 0.71 at 2²³ and 0.63 at 10⁸);
- **honest stderr**: over 100 replicate estimates (same weights, independent sample streams), the
  empirical sd of each estimate matches the reported standard error within 15% on average per
  layer, for both estimators on both samplers;
- **invariant**: the numeric columns, the standard errors included, are the same bytes whatever the
  batch, chunk, unit cut, slicing and merge, threads, resume or ranks, for both estimators;
- **target stderr**: deterministic, each MLP stops at the first check point that reaches the target
  (a bake of exactly that many samples gives the same bytes, one of the check point before does not
  reach it), the cap holds, ``--stderr-layer all``, and a resume mid-way;
- **verify**: a control-variate dataset passes, a tampered standard error fails, ``--against``
  between the two estimators passes statistically.

Replicates are drawn through the compute layer (independent Philox keys, independent pcg64
SeedSequences) and turned into columns by ``dataset.bake.estimates``, the function the bake uses.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from whestbench.compute.philox import spec as philox
from whestbench.compute.estimation import TARGET_RULE, Estimation
from whestbench.compute.estimators import finalize_estimates, fit_controls, is_check_point
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.pcg64 import chunk_rows, sample_layer_sums
from whestbench.compute.seeds import PILOT, derived_seeds, spawn_streams, stream
from whestbench.compute.stats import LayerSums
from whestbench.bake.pipeline import BakeConfig, bake, create_dataset, estimates
from whestbench.assemble.merge import merge_datasets
from whestbench.verify.run import verify_dataset
from whestbench.work.executor import BakeInterrupted
from whestbench.work.steps import Compute, run_unit
from whestbench.work.units import WorkSpec
from philox_reference import push_batches  # tests/philox_reference.py


torch = pytest.importorskip("torch")

from whestbench.compute.philox.torch_engine import block_batches_torch  # noqa: E402
from whestbench.bake import plan as plan_mod  # noqa: E402
from whestbench.dataset_torch import create_dataset_torch  # noqa: E402

from helpers.procs import free_port


ESTIMATORS = ("plain", "control-variate")
NUMERIC = ("all_layer_means", "final_means", "avg_variance", "all_layer_stderr")
STEP_SAMPLES = {"pcg64": chunk_rows(8), "philox": philox.BLOCK_SIZE}  # one target check step at width 8


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def one_blas_thread():
    """In-process sums at one BLAS thread, as every bake computes them (an sgemm's float32 result
    can depend on its thread count; a bake's must not, so it always runs at one)."""
    from whestbench.work import threads

    with threads.one_blas_thread():
        yield


def spec_of(sampler: str, estimator: str, n: int, width: int, depth: int, seed: int) -> WorkSpec:
    """The spec a one-MLP bake of ``seed`` runs (what ``estimates`` needs: estimator, batch size)."""
    extra = dict(block_size=philox.BLOCK_SIZE, unit_blocks=1 << philox.level_of(philox.block_count(n)))
    return WorkSpec(seeds=(seed,), n_samples=n, width=width, depth=depth, mlp_range=(0, 1), sampler=sampler,
                    estimation=Estimation(estimator), **(extra if sampler == "philox" else {}))


def philox_replicates(weights: np.ndarray, keys: np.ndarray, n: int, controls=None) -> list[LayerSums]:
    """One MLP's sums over ``n`` samples for each Philox key (independent sample streams), with the
    CPU bake's engine (numba); the replicates run batched, as several MLPs of one unit."""
    depth = weights.shape[0]
    batch = np.broadcast_to(weights, (len(keys),) + weights.shape).copy()
    trees = [philox.PairwiseStack() for _ in keys]
    for b in range(philox.block_count(n)):
        raw, counts = block_batches_torch(batch, keys, b, n, "cpu", engine="numba", z2sq=controls is not None)
        for r, tree in enumerate(trees):
            push_batches(tree, philox.batch_packed(raw[r], counts, depth, controls), counts)
    return [philox.unpack(t.value(), n, depth) for t in trees]


def pcg64_replicates(weights: np.ndarray, streams: list[np.random.SeedSequence], n: int, controls=None
                     ) -> list[LayerSums]:
    """One MLP's pcg64 sums over ``n`` samples for each SeedSequence (independent sample streams)."""
    def one(ss):
        return sample_layer_sums(weights, ss, n, fused=True, controls=controls)

    with ThreadPoolExecutor(2) as pool:  # numpy's generator and the kernels release the GIL
        return list(pool.map(one, streams))


def columns_of(spec: WorkSpec, sums: list[LayerSums], weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(means, stderr)`` (replicates, depth, width) fp64 of the stored float32 columns."""
    cols = [estimates(spec, s, weights) for s in sums]
    return (np.array([c[0] for c in cols], dtype=np.float64), np.array([c[3] for c in cols], dtype=np.float64))


def read(path: Path) -> dict[str, np.ndarray]:
    """The numeric columns (and ``n_samples_used`` when present) of a single-split dataset."""
    table = pq.read_table(sorted((Path(path) / "data").glob("*.parquet")))
    out = {}
    for name in NUMERIC + ("n_samples_used",):
        if name in table.column_names:
            out[name] = np.asarray(table.column(name).to_pylist(), dtype=np.int64 if name == "n_samples_used"
                                   else np.float64 if name == "avg_variance" else np.float32)
    return out


def assert_same_numbers(a: Path, b: Path, what: str = "") -> None:
    ca, cb = read(a), read(b)
    assert set(ca) == set(cb), what
    for name in ca:
        assert ca[name].tobytes() == cb[name].tobytes(), f"{what}: {name} differs"


def metadata(path: Path) -> dict:
    return json.loads((Path(path) / "metadata.json").read_text())


# --- 1. plain: the stored column ------------------------------------------------------------------


def test_a_cpu_bakes_stderr_column_is_float32_sqrt_sample_variance_over_n(tmp_path):
    seeds, n, width, depth = [5, 6, 7], 20001, 16, 3
    cols = read(create_dataset(3, n, width, depth, mlp_seeds=seeds, output_path=tmp_path / "ds"))
    assert cols["all_layer_stderr"].shape == (3, depth, width)
    for i, seed in enumerate(seeds):
        weight_ss, sample_ss, _ = spawn_streams(seed)
        sums = sample_layer_sums(weights_for_seed(seed, width, depth), sample_ss, n)
        mean = sums.sums / n
        # the stored arithmetic, bit for bit: s² = (Σx² - Σx·x̄) / (N - 1), stderr = sqrt(s² / N)
        want = np.sqrt((sums.sumsq - sums.sums * mean) / (n - 1) / n).astype(np.float32)
        assert np.array_equal(cols["all_layer_stderr"][i], want), i
        # and the textbook form of the same quantity, to float32 rounding
        textbook = np.sqrt((sums.sumsq - sums.sums**2 / n) / (n - 1) / n)
        np.testing.assert_allclose(cols["all_layer_stderr"][i], textbook, rtol=3e-7, atol=0)
        assert cols["all_layer_means"][i].tobytes() == mean.astype(np.float32).tobytes()


def test_a_torch_bakes_stderr_column_is_float32_sqrt_sample_variance_over_n(tmp_path):
    seeds, n, width, depth = [5, 6], 70_000, 12, 3
    cols = read(create_dataset_torch(2, n, width, depth, mlp_seeds=seeds, output_path=tmp_path / "ds", device="cpu"))
    for i, seed in enumerate(seeds):
        key = np.array([philox.philox_key(spawn_streams(seed)[1])], dtype=np.uint32)
        (sums,) = philox_replicates(weights_for_seed(seed, width, depth), key, n)
        want = np.sqrt((sums.sumsq - sums.sums**2 / n) / (n - 1) / n).astype(np.float32)
        assert np.array_equal(cols["all_layer_stderr"][i], want), i


# --- 3. unbiased --------------------------------------------------------------------------------

UNBIASED_SEED, UNBIASED_WIDTH, UNBIASED_DEPTH = 7, 32, 10  # 288 neurons in layers 2..10
UNBIASED_CV_SAMPLES = 1 << 18  # 64 batches
REFERENCE_KEY = (0x5EED1234, 0xC0FFEE)  # the independent plain estimate's Philox key (another stream)


@pytest.fixture(scope="module")
def control_variate_estimate():
    """The control-variate columns of one MLP, as a torch CPU bake computes its unit."""
    seed, width, depth, n = UNBIASED_SEED, UNBIASED_WIDTH, UNBIASED_DEPTH, UNBIASED_CV_SAMPLES
    spec = dataclasses.replace(spec_of("philox", "control-variate", n, width, depth, seed),
                               arithmetic="philox-numba-cpu")
    sums = run_unit(spec, Compute("numba", "cpu"), spec.units()[0]).mlp(0)
    means, _, _, stderr = estimates(spec, sums, weights_for_seed(seed, width, depth))
    return means.astype(np.float64), stderr.astype(np.float64)


REFERENCE_FILE = Path(__file__).with_name("data") / "cv_reference_1e8.json"


def stored_reference() -> LayerSums:
    """The plain sums over 10**8 samples of ``REFERENCE_KEY``, made once by ``data/make_cv_reference.py``
    (computing them took 15.6 CPU-minutes here and timed out at 600 s under load). The file must stand for
    today's MLP and sampler: its recorded shape, key and sampler version are checked, and the sums of
    its first samples are recomputed and must agree (an sgemm on another CPU may round differently in
    the last bits: within 1e-6 relative; another sampler or other weights differ by ~1e-2)."""
    doc = json.loads(REFERENCE_FILE.read_text())
    assert (doc["seed"], doc["width"], doc["depth"]) == (UNBIASED_SEED, UNBIASED_WIDTH, UNBIASED_DEPTH), doc
    assert tuple(doc["key"]) == REFERENCE_KEY and doc["sampler"] == philox.SAMPLER_NAME, doc
    assert doc["sampler_version"] == philox.SAMPLER_VERSION, "the sampler changed: re-make the file (its script)"

    def sums(block: dict) -> LayerSums:
        as_array = lambda rows: np.array([[float.fromhex(v) for v in row] for row in rows])  # noqa: E731
        return LayerSums(sums=as_array(block["sums"]), sumsq=as_array(block["sumsq"]), count=block["count"])

    prefix = doc["prefix"]
    weights = weights_for_seed(UNBIASED_SEED, UNBIASED_WIDTH, UNBIASED_DEPTH)
    (now,) = philox_replicates(weights, np.array([REFERENCE_KEY], dtype=np.uint32), prefix["n"])
    stored = sums(prefix)
    assert now.count == stored.count == prefix["n"]
    np.testing.assert_allclose(now.sums, stored.sums, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(now.sumsq, stored.sumsq, rtol=1e-6, atol=1e-6)
    reference = sums(doc["reference"])
    assert reference.count == doc["reference"]["n"] == 10**8
    return reference


@pytest.mark.parametrize("n_ref", [1 << 21, pytest.param(10**8, marks=pytest.mark.slow, id="1e8")])
def test_control_variate_agrees_with_an_independent_plain_estimate(n_ref, control_variate_estimate):
    """z = (control variate − plain) / sqrt(se_cv² + se_plain²), the plain estimate from ``n_ref``
    other samples (another Philox key): mean z² over every noisy neuron in [0.7, 1.4]. The 10**8
    reference is stored (``stored_reference``); 2**21 is computed here."""
    seed, width, depth = UNBIASED_SEED, UNBIASED_WIDTH, UNBIASED_DEPTH
    weights = weights_for_seed(seed, width, depth)
    key = np.array([REFERENCE_KEY], dtype=np.uint32)
    assert tuple(key[0]) != philox.philox_key(spawn_streams(seed)[1])
    if n_ref == 10**8:
        ref_sums = stored_reference()
    else:
        (ref_sums,) = philox_replicates(weights, key, n_ref)
    ref_mean, ref_se = finalize_estimates(ref_sums, "plain")
    cv_mean, cv_se = control_variate_estimate
    se = np.hypot(cv_se, ref_se)
    noisy = se > 0
    assert noisy[1:].sum() >= 256  # layers 2.. (layer 1 is exact on the control-variate side)
    z = (cv_mean - ref_mean)[noisy] / se[noisy]
    assert 0.7 <= float(np.mean(z**2)) <= 1.4, float(np.mean(z**2))


# --- 4. honest standard errors ---------------------------------------------------------------------

REPLICATES = 100
HONEST_SEED, HONEST_WIDTH, HONEST_DEPTH = 5, 8, 3
# samples per replicate: plain needs few; control variates >= 32 batches (philox 4096 samples,
# pcg64 one chunk, 16384 rows at width 8)
HONEST_SAMPLES = {("philox", "plain"): 1 << 14, ("philox", "control-variate"): 32 * 4096,
                  ("pcg64", "plain"): 1 << 14, ("pcg64", "control-variate"): 32 * chunk_rows(HONEST_WIDTH)}


def replicate_columns(sampler: str, estimator: str) -> tuple[np.ndarray, np.ndarray]:
    seed, width, depth = HONEST_SEED, HONEST_WIDTH, HONEST_DEPTH
    n = HONEST_SAMPLES[sampler, estimator]
    weights = weights_for_seed(seed, width, depth)
    controls = fit_controls(weights, stream(seed, PILOT)) if estimator == "control-variate" else None
    if sampler == "philox":
        keys = np.array([[1000 + r, 0xABCDEF] for r in range(REPLICATES)], dtype=np.uint32)
        sums = philox_replicates(weights, keys, n, controls)
    else:
        sums = pcg64_replicates(weights, [np.random.SeedSequence((31337, r)) for r in range(REPLICATES)], n, controls)
    spec = spec_of(sampler, estimator, n, width, depth, seed)
    assert all(s.count == n for s in sums)
    return columns_of(spec, sums, weights)


def sd_over_stderr(means: np.ndarray, stderr: np.ndarray) -> np.ndarray:
    """Per layer, the mean over neurons of (empirical sd of the estimate over the replicates) /
    (the reported standard error, root-mean-square over the replicates: its square is what the
    estimator makes unbiased). NaN for a layer with no noisy neuron."""
    sd = means.std(axis=0, ddof=1)  # (depth, w)
    reported = np.sqrt(np.mean(stderr**2, axis=0))
    noisy = reported > 0
    ratio = np.where(noisy, sd / np.where(noisy, reported, 1.0), np.nan)
    return np.array([np.nanmean(r) if np.any(np.isfinite(r)) else np.nan for r in ratio])


@pytest.mark.parametrize("sampler", ["philox", "pcg64"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_reported_stderr_is_the_sd_of_replicate_estimates(sampler, estimator):
    means, stderr = replicate_columns(sampler, estimator)
    ratio = sd_over_stderr(means, stderr)
    if estimator == "control-variate":  # layer 1 is exact: the same value every time, stderr 0
        assert not stderr[:, 0].any() and np.all(means[:, 0] == means[0, 0])
        ratio = ratio[1:]
    assert np.all(np.abs(ratio - 1.0) <= 0.15), ratio


# --- 5. invariance -------------------------------------------------------------------------------

# torch: a full canonical block and a ragged one (17 batches, the last ragged); pcg64: two chunks
# and a ragged one. Depth 3, so layer 3 is estimated with fitted coefficients.
TORCH_SHAPE = dict(n_mlps=3, n_samples=70_000, width=12, depth=3)
CPU_SHAPE = dict(n_mlps=3, n_samples=2 * chunk_rows(12) + 999, width=12, depth=3)


def torch_bake(tmp_path: Path, name: str, estimator: str, **kw) -> Path:
    return create_dataset_torch(**{**TORCH_SHAPE, "seed": 11, **kw}, output_path=tmp_path / name, device="cpu",
                                estimator=estimator)


def cpu_bake(tmp_path: Path, name: str, estimator: str, **kw) -> Path:
    return create_dataset(**{**CPU_SHAPE, "seed": 11, **kw}, output_path=tmp_path / name, estimator=estimator)


def config(tmp_path: Path, name: str, backend: str, estimator: str, **kw) -> BakeConfig:
    shape, extra = (TORCH_SHAPE, dict(device="cpu")) if backend == "torch" else (CPU_SHAPE, dict(max_threads=1))
    return BakeConfig(**shape, seed=11, output=tmp_path / name, backend=backend, estimation=Estimation(estimator),
                      **{**extra, **kw})


def stop_on(kind: str, stop: threading.Event, after: int = 1):
    """An event sink that requests a stop at the ``after``-th event of ``kind`` (of sampling: a target
    bake's pilots report their own progress first)."""
    seen = []

    def sink(event):
        if event.kind == kind and (event.progress is None or event.progress.what != "pilots"):
            seen.append(event)
            if len(seen) >= after:
                stop.set()

    return sink


def bake_on_two_ranks(cfg: BakeConfig, monkeypatch) -> tuple[Path, dict[int, int]]:
    """``cfg`` baked by two ranks of one distributed job (threads of this process around a store
    hosted as torchrun's agent hosts it), the real unit step on both; rank 0 waits for rank 1's
    first unit before it computes its own, so both ranks compute. Returns ``(output, units per rank)``."""
    from datetime import timedelta

    import torch.distributed as dist

    from whestbench.work import launch_env
    from whestbench.work.distributed import store_executor

    port = free_port()
    # the store torchrun's agent would host; kept referenced until the ranks are done
    store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True, timeout=timedelta(seconds=60))
    peer_computed, units, runs = threading.Event(), {0: 0, 1: 0}, {}

    class Executor(store_executor.StoreExecutor):
        def __init__(self, env, **kw):
            def step(spec, compute, unit, ctx):
                runs[unit.key] = runs.get(unit.key, 0) + 1
                if runs[unit.key] > 2:  # rank 0 recomputes a damaged result; a third time would never end
                    raise RuntimeError(f"unit {unit.key} computed {runs[unit.key]} times")
                if env.rank == 0:
                    peer_computed.wait(60)
                sums = run_unit(spec, compute, unit, ctx)
                units[env.rank] += 1
                peer_computed.set()
                return sums

            super().__init__(env, step=step, **kw)

    monkeypatch.setattr(store_executor, "StoreExecutor", Executor)

    notes = []

    def rank(r: int):
        env = launch_env.DistEnv(r, 2, r, "127.0.0.1", port, run_id="t", agent_store=True)
        return bake(cfg, dist_env=env, peer_timeout_s=60,
                    on_event=lambda e: notes.append(e.message) if e.kind == "note" else None)

    with ThreadPoolExecutor(2) as pool:
        out, peer = pool.map(rank, [0, 1])
    store.set("test/done", "1")
    assert peer is None
    assert not [n for n in notes if "damaged" in n], notes  # every result crossed the store intact
    return out, units


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_torch_numbers_do_not_depend_on_batch_or_chunk_size(estimator, tmp_path):
    a = torch_bake(tmp_path, "a", estimator, mlps_per_batch=1, chunk_size=64)
    for name, batch, chunk in (("b", 3, 65536), ("c", 2, 1000)):
        assert_same_numbers(a, torch_bake(tmp_path, name, estimator, mlps_per_batch=batch, chunk_size=chunk), name)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_torch_numbers_do_not_depend_on_how_an_mlp_is_cut_into_units(estimator, tmp_path, monkeypatch):
    whole = torch_bake(tmp_path, "whole", estimator)
    monkeypatch.setattr(plan_mod, "PHILOX_UNIT_BLOCKS", 1)  # every canonical block its own unit
    assert_same_numbers(whole, torch_bake(tmp_path, "cut", estimator))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_cpu_numbers_do_not_depend_on_the_thread_count(estimator, tmp_path):
    one, two = (cpu_bake(tmp_path, name, estimator, max_threads=t) for name, t in (("one", 1), ("two", 2)))
    assert_same_numbers(one, two)


@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_slices_merge_to_the_single_bake(estimator, backend, tmp_path):
    bake_fn = torch_bake if backend == "torch" else cpu_bake
    full = bake_fn(tmp_path, "full", estimator)
    parts = [bake_fn(tmp_path, f"p{k}", estimator, mlp_range=r) for k, r in enumerate([(0, 1), (1, 3)])]
    assert_same_numbers(full, merge_datasets(parts, output_dir=tmp_path / "merged"))


@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("where", ["between-units", "inside-a-unit"])
def test_a_stopped_bake_resumes_to_the_same_numbers(where, estimator, backend, tmp_path):
    whole = bake(config(tmp_path, "whole", backend, estimator))
    cfg = config(tmp_path, "out", backend, estimator, mlps_per_batch=1) if backend == "torch" else \
        config(tmp_path, "out", backend, estimator)
    stop = threading.Event()
    with pytest.raises(BakeInterrupted):
        bake(cfg, on_event=stop_on("unit_done" if where == "between-units" else "progress", stop), stop=stop)
    units = tmp_path / "out.whest-work" / "units"
    saved = "*.ckpt" if where == "inside-a-unit" else "*.unit"
    assert list(units.glob(saved)), f"nothing saved: {sorted(p.name for p in units.iterdir())}"
    assert_same_numbers(whole, bake(cfg))


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_two_ranks_write_the_same_numbers_as_one_process(estimator, backend, tmp_path, monkeypatch):
    monkeypatch.setattr(plan_mod, "PHILOX_UNIT_BLOCKS", 1)  # torch: an MLP's two blocks may go to two ranks
    single = bake(config(tmp_path, "single", backend, estimator))
    ranks, units = bake_on_two_ranks(config(tmp_path, "ranks", backend, estimator), monkeypatch)
    assert units[0] > 0 and units[1] > 0, units
    assert_same_numbers(single, ranks)


# --- 6. bake to a target standard error -------------------------------------------------------------

TARGET_SHAPE = dict(n_mlps=4, width=8, depth=3, seed=3)
# The caps end in a ragged step. Targets chosen so the MLPs stop at different check points
# (1, 2, 4, 8, 16 steps: a pcg64 chunk is 16384 samples at width 8, a philox block 65536; control
# variates are first judged at 32 batches: 32, 64, 128 pcg64 chunks, 2, 4, 8 philox blocks).
CAP = {"cpu": 32 * chunk_rows(8) + 123, "torch": 8 * philox.BLOCK_SIZE + 77}
CV_CAP_CPU = 256 * chunk_rows(8) + 123
TARGETS = [("cpu", "plain", 5e-3), ("cpu", "control-variate", 2.8e-4),
           ("torch", "plain", 4e-3), ("torch", "control-variate", 7e-4)]


def cap(backend: str, estimator: str) -> int:
    return CV_CAP_CPU if (backend, estimator) == ("cpu", "control-variate") else CAP[backend]
TARGET_IDS = [f"{b}-{e}" for b, e, _ in TARGETS]


def target_bake(tmp_path: Path, name: str, backend: str, estimator: str, **kw) -> Path:
    args = {**TARGET_SHAPE, "n_samples": cap(backend, estimator), **kw, "output_path": tmp_path / name, "estimator": estimator}
    if backend == "torch":
        return create_dataset_torch(**args, device="cpu")
    return create_dataset(**args)


def chosen(stderr: np.ndarray, layer: str) -> np.ndarray:
    return stderr[-1] if layer == "last" else stderr


@pytest.fixture(scope="module")
def target_bakes(tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("targets")
    return {(b, e): target_bake(root, f"{b}-{e}", b, e, target_stderr=t) for b, e, t in TARGETS}


@pytest.mark.parametrize("backend, estimator, target", TARGETS, ids=TARGET_IDS)
def test_a_target_bake_is_reproducible_to_the_byte(backend, estimator, target, target_bakes, tmp_path):
    again = target_bake(tmp_path, "again", backend, estimator, target_stderr=target)
    assert_same_numbers(target_bakes[backend, estimator], again)


@pytest.mark.parametrize("backend, estimator, target", TARGETS, ids=TARGET_IDS)
def test_each_mlp_stops_where_its_own_pilot_plans(backend, estimator, target, target_bakes, tmp_path):
    """The two-stage rule: the count is the first check point past (pilot sd / target)², fixed before
    sampling; the row equals a bake of exactly that many samples without a target."""
    from whestbench.compute.estimators import stop_point
    from whestbench.compute.estimation import MIN_RELIABLE_BATCHES
    from whestbench.compute.mlp import weights_for_seed

    cols = read(target_bakes[backend, estimator])
    used, step, limit = cols["n_samples_used"], STEP_SAMPLES["pcg64" if backend == "cpu" else "philox"], cap(backend, estimator)
    assert len(set(used.tolist())) >= 2 and used.max() < limit  # the MLPs stop at different check points
    seeds = derived_seeds(TARGET_SHAPE["seed"], TARGET_SHAPE["n_mlps"])
    width, depth = TARGET_SHAPE["width"], TARGET_SHAPE["depth"]
    batch = step if backend == "cpu" else 4096
    for i, (seed, n) in enumerate(zip(seeds, used.tolist())):
        assert n % step == 0 and is_check_point(n // step), (i, n)
        # the need, from the pilot stream directly (plain: the activations' sd; an independent computation)
        x = np.random.default_rng(stream(seed, PILOT)).standard_normal((1 << 14, width)).astype(np.float32)
        w = weights_for_seed(seed, width, depth)
        h = x
        for k in range(depth):
            h = np.maximum(h @ w[k], 0)
        if estimator == "plain":
            need = float(np.max(h.astype(np.float64).std(axis=0, ddof=1))) ** 2 / target**2
            assert n == stop_point(need, step, limit), (i, n, need)
        else:
            assert n >= MIN_RELIABLE_BATCHES * batch  # and the residual's need: checked through verify below
        one = dict(n_mlps=1, seed=None, mlp_seeds=[seed])
        exact = read(target_bake(tmp_path, f"exact-{i}", backend, estimator, n_samples=n, **one))
        for name in NUMERIC:
            assert exact[name].tobytes() == cols[name][i : i + 1].tobytes(), (i, name)
        # planned from a 16,384-input pilot: the stored error bars sit at or near the target
        assert np.nanmax(chosen(cols["all_layer_stderr"][i], "last")) <= 1.5 * target
    assert by_name(verify_dataset(target_bakes[backend, estimator]))["target"].ok


def test_the_two_stage_rule_leaves_no_early_stopping_bias(tmp_path):
    """The issue's measurement, repeated: MLPs whose target stops them at the first or second check
    point. With the stop decided on the pilot stream, the deciding neuron's z-score against its exact
    mean has no bias (the sequential rule gave −0.37 ± 0.12, early minus late −0.58 ± 0.16)."""
    from whestbench.compute.estimators import layer1_means
    from whestbench.compute.mlp import weights_for_seed

    m, width = 384, 4
    step = chunk_rows(width)
    ds = create_dataset(n_mlps=m, n_samples=4 * step, width=width, depth=1, seed=77, target_stderr=0.0083,
                        output_path=tmp_path / "bias")
    cols = read(ds)
    used = cols["n_samples_used"]
    z, early = [], []
    for k, seed in enumerate(derived_seeds(77, m)):
        se = cols["all_layer_stderr"][k, 0].astype(np.float64)
        j = int(np.argmax(se))  # the neuron that decides the count (the largest spread)
        exact = layer1_means(weights_for_seed(seed, width, 1)[0])[j]
        z.append((float(cols["all_layer_means"][k, 0, j]) - exact) / se[j])
        early.append(used[k] == step)
    z, early = np.array(z), np.array(early)
    assert 0.2 * m < early.sum() < 0.8 * m  # both stop points are well represented
    bias, se_bias = float(z.mean()), float(z.std(ddof=1) / math.sqrt(m))
    assert abs(bias) < 4 * se_bias + 0.02, (bias, se_bias)
    diff = float(z[early].mean() - z[~early].mean())
    se_diff = math.hypot(z[early].std(ddof=1) / math.sqrt(early.sum()), z[~early].std(ddof=1) / math.sqrt((~early).sum()))
    assert abs(diff) < 4 * se_diff, (diff, se_diff)


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_an_unreachable_target_stops_at_the_cap(backend, tmp_path):
    capped = read(target_bake(tmp_path, "capped", backend, "control-variate", target_stderr=1e-9))
    assert capped["n_samples_used"].tolist() == [cap(backend, "control-variate")] * TARGET_SHAPE["n_mlps"]
    plain = read(target_bake(tmp_path, "no-target", backend, "control-variate"))
    for name in NUMERIC:
        assert capped[name].tobytes() == plain[name].tobytes(), name


@pytest.mark.parametrize("backend, estimator, target", [t for t in TARGETS if t[1] == "plain"],
                         ids=[i for t, i in zip(TARGETS, TARGET_IDS) if t[1] == "plain"])
def test_stderr_layer_all_waits_for_every_neuron(backend, estimator, target, target_bakes, tmp_path):
    last = read(target_bakes[backend, estimator])
    every = read(target_bake(tmp_path, "all", backend, estimator, target_stderr=target, stderr_layer="all"))
    assert np.all(every["n_samples_used"] >= last["n_samples_used"])
    assert np.any(every["n_samples_used"] > last["n_samples_used"])  # layer 1 or 2 was the slowest somewhere
    stopped = every["n_samples_used"] < cap(backend, estimator)
    assert np.all(every["all_layer_stderr"][stopped] <= 1.5 * target)  # planned from the pilot: at or near it


@pytest.mark.parametrize("backend, estimator, target", TARGETS, ids=TARGET_IDS)
def test_a_target_bake_stopped_mid_way_resumes_to_the_same_bytes(backend, estimator, target, target_bakes, tmp_path):
    extra = dict(device="cpu", backend="torch") if backend == "torch" else dict(max_threads=1)
    cfg = BakeConfig(**TARGET_SHAPE, n_samples=cap(backend, estimator), output=tmp_path / "out",
                     estimation=Estimation(estimator, target), **extra)
    stop = threading.Event()
    with pytest.raises(BakeInterrupted):
        bake(cfg, on_event=stop_on("progress", stop, after=3), stop=stop)
    assert list((tmp_path / "out.whest-work" / "units").glob("*.ckpt"))  # stopped inside an MLP
    assert_same_numbers(target_bakes[backend, estimator], bake(cfg))


def test_the_metadata_records_the_estimator_and_the_target(target_bakes):
    md = metadata(target_bakes["cpu", "control-variate"])
    assert md["estimator"]["name"] == "control-variate" and md["estimator"]["batch_samples"] == chunk_rows(8)
    assert md["target_stderr"]["value"] == 2.8e-4 and md["target_stderr"]["layer"] == "last"
    assert md["target_stderr"]["step_samples"] == chunk_rows(8)
    md = metadata(target_bakes["torch", "control-variate"])
    assert md["estimator"]["batch_samples"] == 4096 and md["target_stderr"]["step_samples"] == philox.BLOCK_SIZE


def test_the_cli_bakes_to_a_target_with_either_estimator_and_either_layer(tmp_path, capsys):
    from whestbench.cli import main

    args = ["dataset", "bake", "--n-mlps", "2", "--n-samples", str(CAP["cpu"]), "--width", "8", "--depth", "3",
            "--seed", "3", "--quiet"]
    assert main([*args, "--estimator", "control-variate", "--target-stderr", "7e-4", "--stderr-layer", "all",
                 "--output", str(tmp_path / "cli")]) == 0
    md = metadata(tmp_path / "cli")
    assert md["estimator"]["name"] == "control-variate" and md["target_stderr"]["layer"] == "all"
    cols = read(tmp_path / "cli")
    assert np.all(cols["n_samples_used"] < CAP["cpu"]) and np.all(cols["all_layer_stderr"] <= 7e-4)
    assert "--estimator" in md["bake_command"] and "--target-stderr" in md["bake_command"]


def test_the_recorded_and_the_cards_rebake_commands_carry_the_estimator_and_the_target(target_bakes):
    from whestbench.format import command
    from whestbench.format.card import rebake_argv

    md = metadata(target_bakes["cpu", "control-variate"])
    want = ["--estimator", "control-variate", "--target-stderr", "0.00028", "--stderr-layer", "last"]
    unrecorded = {k: v for k, v in md.items() if k != "bake_command"}  # the card rebuilds the command
    for argv in (command.parse(md["bake_command"]), rebake_argv(unrecorded, "public")):
        assert [command.flag_value(argv, f) for f in want[::2]] == want[1::2], argv
    plain = metadata(target_bakes["cpu", "plain"])
    assert command.flag_value(command.parse(plain["bake_command"]), "--estimator") is None  # the default stays implicit


# --- 8. verify ------------------------------------------------------------------------------------


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


@pytest.fixture(scope="module")
def verify_bakes(tmp_path_factory) -> dict[str, Path]:
    """Plain and control-variate bakes of the same seeds, on both samplers."""
    root = tmp_path_factory.mktemp("verify")
    shape = dict(n_mlps=3, width=16, depth=3, seed=21)
    return {
        "cpu-plain": create_dataset(n_samples=3 * chunk_rows(16), **shape, output_path=root / "cpu-plain"),
        "cpu-cv": create_dataset(n_samples=3 * chunk_rows(16), **shape, output_path=root / "cpu-cv",
                                 estimator="control-variate"),
        "torch-plain": create_dataset_torch(n_samples=40_000, **shape, output_path=root / "torch-plain", device="cpu"),
        "torch-cv": create_dataset_torch(n_samples=40_000, **shape, output_path=root / "torch-cv", device="cpu",
                                         estimator="control-variate"),
    }


@pytest.mark.parametrize("name", ["cpu-cv", "torch-cv"])
def test_a_control_variate_dataset_passes_verify_with_layer_1_exact(name, verify_bakes):
    report = verify_dataset(verify_bakes[name])
    assert report.ok, [c for c in report.checks if not c.ok]
    checks = by_name(report)
    assert "exact" in checks["layer-1 means"].detail and "control-variate" in checks["layer-1 means"].detail
    assert checks["stderr"].ok and not checks["stderr"].skipped


def test_a_target_dataset_passes_verify(target_bakes):
    for key, path in target_bakes.items():
        report = verify_dataset(path)
        assert report.ok, (key, [c for c in report.checks if not c.ok])


def test_a_plain_stderr_tripled_in_layer_1_fails_the_stderr_check(verify_bakes, tmp_path, rewrite_dataset):
    def triple(i, row):
        if i == 1:
            row["all_layer_stderr"][0] = [3 * v for v in row["all_layer_stderr"][0]]

    report = verify_dataset(rewrite_dataset(verify_bakes["cpu-plain"], tmp_path / "tripled", edit_row=triple))
    checks = by_name(report)
    assert checks["checksums"].ok and checks["layer-1 means"].ok  # only the standard errors were touched
    assert not checks["stderr"].ok and "mlp_id 1" in checks["stderr"].detail


def test_a_control_variate_layer_1_stderr_other_than_zero_fails_the_stderr_check(verify_bakes, tmp_path,
                                                                                rewrite_dataset):
    def noisy(i, row):
        if i == 2:
            row["all_layer_stderr"][0] = list(row["all_layer_stderr"][1])

    report = verify_dataset(rewrite_dataset(verify_bakes["cpu-cv"], tmp_path / "noisy", edit_row=noisy))
    check = by_name(report)["stderr"]
    assert not check.ok and "mlp_id 2" in check.detail and "layer 1" in check.detail


def test_a_control_variate_layer_1_mean_off_by_a_thousandth_fails(verify_bakes, tmp_path, rewrite_dataset):
    def shift(i, row):
        if i == 0:
            row["all_layer_means"][0][3] *= 1.001

    off = rewrite_dataset(verify_bakes["torch-cv"], tmp_path / "off", edit_row=shift)
    check = by_name(verify_dataset(off))["layer-1 means"]
    assert not check.ok and "mlp_id 0 neuron 3" in check.detail


@pytest.mark.parametrize("n_samples", [1, 3000])
def test_a_bake_too_small_for_a_standard_error_passes_verify(n_samples, tmp_path):
    """One sample (plain) or one batch (control variates): the standard errors are undefined and
    stored as NaN, which verify accepts there and only there."""
    estimator = "plain" if n_samples == 1 else "control-variate"
    out = create_dataset(2, n_samples, 8, 3, seed=4, output_path=tmp_path / "small", estimator=estimator)
    stderr = read(out)["all_layer_stderr"]
    assert np.isnan(stderr[:, 0 if n_samples == 1 else 1:]).all()
    check = by_name(verify_dataset(out))["stderr"]
    assert check.ok, check.detail


def test_a_nan_stderr_where_one_is_defined_fails(verify_bakes, tmp_path, rewrite_dataset):
    def blank(i, row):
        if i == 0:
            row["all_layer_stderr"][2][4] = float("nan")

    check = by_name(verify_dataset(rewrite_dataset(verify_bakes["cpu-cv"], tmp_path / "nan", edit_row=blank)))["stderr"]
    assert not check.ok and "mlp_id 0 layer 3 neuron 4" in check.detail


@pytest.mark.parametrize("sampler", ["cpu", "torch"])
def test_verify_against_passes_between_plain_and_control_variate_bakes_of_the_same_seeds(sampler, verify_bakes):
    report = verify_dataset(verify_bakes[f"{sampler}-cv"], against=verify_bakes[f"{sampler}-plain"])
    assert report.ok, [c for c in report.checks if not c.ok]
    check = by_name(report)["against: ground truth"]
    assert "different estimators" in check.detail and "stored standard errors" in check.detail


def test_verify_against_fails_when_the_control_variate_means_are_shifted(verify_bakes, tmp_path, rewrite_dataset):
    plain_se = read(verify_bakes["cpu-plain"])["all_layer_stderr"].astype(np.float64)

    def shift(i, row):
        if i == 1:  # layer 3, every neuron: 8 of the two bakes' combined standard errors up
            se = np.hypot(plain_se[1, 2], np.asarray(row["all_layer_stderr"][2], dtype=np.float64))
            row["all_layer_means"][2] = (np.asarray(row["all_layer_means"][2]) + 8 * se).astype(np.float32).tolist()
            row["final_means"] = row["all_layer_means"][2]

    shifted = rewrite_dataset(verify_bakes["cpu-cv"], tmp_path / "shifted", edit_row=shift)
    alone = by_name(verify_dataset(shifted))  # 8 combined standard errors is many of a fresh pilot's
    assert not alone["layer means"].ok and "layer 3" in alone["layer means"].detail
    check = by_name(verify_dataset(shifted, against=verify_bakes["cpu-plain"]))["against: ground truth"]
    assert not check.ok, check.detail


def test_verify_against_compares_bakes_too_small_for_a_standard_error(tmp_path):
    """One batch per MLP: no stored standard error (NaN) in layers 2..; those means are compared in
    units of the pilot's plain variance instead of failing as if both sides were exact."""
    small = dict(n_mlps=2, n_samples=3000, width=8, depth=3, seed=4, estimator="control-variate")
    cpu = create_dataset(**small, output_path=tmp_path / "cpu")
    on_torch = create_dataset_torch(**small, output_path=tmp_path / "torch", device="cpu")
    check = by_name(verify_dataset(cpu, against=on_torch))["against: ground truth"]
    assert check.ok and "pilot variances" in check.detail, check.detail
    assert int(re.search(r"over (\d+) means", check.detail).group(1)) >= 24  # most of layers 2-3's 32 means


# --- plan notes ---------------------------------------------------------------------------------


def _notes(**kw) -> tuple[str, ...]:
    from whestbench.bake.plan import plan_bake

    est = Estimation(kw.pop("estimator", "plain"), kw.pop("target_stderr", None), kw.pop("stderr_layer", "last"))
    cfg = BakeConfig(**{"n_mlps": 2, "n_samples": 100_000, "width": 8, "depth": 2, "seed": 1, "output": None, **kw},
                     estimation=est)
    return plan_bake(cfg, probe=False).notes


def test_a_control_variate_plan_warns_of_few_batches_with_their_real_count_and_size():
    (note,) = _notes(estimator="control-variate")
    assert "7 batches of up to 16,384 samples (6 degrees of freedom)" in note and "524,288" in note
    (note,) = _notes(estimator="control-variate", n_samples=3000)
    assert "1 batch of 3,000 samples (0 degrees of freedom, so none is stored: NaN)" in note
    assert _notes(estimator="control-variate", n_samples=32 * 16384) == ()


def test_a_depth_1_control_variate_plan_does_not_warn_all_its_means_are_exact():
    assert _notes(estimator="control-variate", depth=1, n_samples=3000) == ()


def test_stderr_layer_without_a_target_is_noted_as_changing_nothing():
    assert any("--stderr-layer applies to --target-stderr" in n for n in _notes(stderr_layer="all"))
    assert _notes(stderr_layer="all", target_stderr=1e-3) == ()


# --- verify: the size of the stored standard errors, the estimator, the target's promise -----------


@pytest.mark.parametrize("factor", [100.0, 0.0])
def test_plain_standard_errors_of_deep_layers_scaled_or_zeroed_fail_the_size_check(factor, verify_bakes, tmp_path,
                                                                                  rewrite_dataset):
    def scale(i, row):
        row["all_layer_stderr"][1:] = [[factor * v for v in layer] for layer in row["all_layer_stderr"][1:]]

    report = verify_dataset(rewrite_dataset(verify_bakes["cpu-plain"], tmp_path / "scaled", edit_row=scale))
    checks = by_name(report)
    assert checks["checksums"].ok and checks["stderr"].ok  # re-signed, finite, layer 1 untouched
    assert not checks["stderr size"].ok and "layer 2" in checks["stderr size"].detail
    assert by_name(verify_dataset(verify_bakes["cpu-plain"]))["stderr size"].ok


def test_control_variate_standard_errors_inflated_fail_the_size_check(tmp_path, rewrite_dataset):
    honest = create_dataset(2, 40 * chunk_rows(16), 16, 3, seed=8, output_path=tmp_path / "cv", estimator="control-variate")
    assert by_name(verify_dataset(honest))["stderr size"].ok

    def inflate(i, row):
        row["all_layer_stderr"][2] = [100 * v for v in row["all_layer_stderr"][2]]

    check = by_name(verify_dataset(rewrite_dataset(honest, tmp_path / "inflated", edit_row=inflate)))["stderr size"]
    assert not check.ok and "layer 3" in check.detail


@pytest.mark.parametrize("block", [{"name": "bogus", "version": "1"}, {"name": "plain", "version": "9"}])
def test_an_unknown_estimator_in_the_metadata_fails_verify(block, verify_bakes, tmp_path, rewrite_dataset):
    edited = rewrite_dataset(verify_bakes["cpu-plain"], tmp_path / "bogus", md_update={"estimator": block})
    check = by_name(verify_dataset(edited))["metadata"]  # the one metadata validator refuses it
    assert not check.ok and "was metadata.json edited" in check.detail and "estimator" in check.detail


def test_a_target_bake_whose_samples_used_exceed_the_cap_or_miss_a_check_point_fails(target_bakes, tmp_path,
                                                                                     rewrite_dataset):
    src = target_bakes["cpu", "plain"]
    for k, value in enumerate([CAP["cpu"] * 10, chunk_rows(8) * 3]):  # beyond the cap; 3 steps: no check point
        def edit(i, row, value=value):
            if i == 0:
                row["n_samples_used"] = value

        check = by_name(verify_dataset(rewrite_dataset(src, tmp_path / f"used{k}", edit_row=edit)))["target"]
        assert not check.ok and "mlp_id 0" in check.detail, check.detail
    assert by_name(verify_dataset(src))["target"].ok


def test_a_target_edited_below_what_the_early_mlps_reached_fails(target_bakes, tmp_path, rewrite_dataset):
    src = target_bakes["cpu", "control-variate"]
    md = metadata(src)
    edited = rewrite_dataset(src, tmp_path / "tighter", md_update={"target_stderr": {**md["target_stderr"], "value": 1e-6}})
    check = by_name(verify_dataset(edited))["target"]  # the counts no longer what each MLP's pilot plans
    assert not check.ok and "its pilot plans" in check.detail and "standard error of 1e-06" in check.detail


def test_a_one_sample_bake_passes_verify_whole(tmp_path):
    report = verify_dataset(create_dataset(2, 1, 8, 2, seed=4, output_path=tmp_path / "one"))
    assert report.ok, [c for c in report.checks if not c.ok]


def test_verify_against_judges_a_target_bake_by_the_samples_each_mlp_used(target_bakes, tmp_path):
    """A target bake against a plain bake of the same seeds and cap: the MLPs that ran to the cap must
    be identical, those stopped early are other estimates (compared statistically); two target bakes
    with other caps whose MLPs all stopped at the same points are bit-identical."""
    src = target_bakes["cpu", "plain"]
    used = read(src)["n_samples_used"]
    plain = target_bake(tmp_path, "plain", "cpu", "plain", target_stderr=None)
    report = verify_dataset(src, against=plain)
    checks = by_name(report)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert checks["against: sample counts"].ok
    assert "statistical" in checks["against: ground truth, other sample counts"].detail
    wider = target_bake(tmp_path, "wider", "cpu", "plain", target_stderr=5e-3, n_samples=int(used.max()) + 1000)
    assert np.array_equal(read(wider)["n_samples_used"], used)  # same stop points under another cap
    report = verify_dataset(src, against=wider)
    assert report.ok and by_name(report)["against: ground truth"].detail.startswith("bit-identical")


def test_a_target_the_cap_cannot_reach_is_warned_about_once(tmp_path):
    def warned(name: str, target: float) -> list[str]:
        events = []
        bake(BakeConfig(n_mlps=3, n_samples=20_000, width=8, depth=2, seed=1, output=tmp_path / name,
                        estimation=Estimation(target_stderr=target)), on_event=events.append)
        return [e.message for e in events if e.kind == "warning"]

    (far,) = warned("far", 1e-6)
    assert far.startswith("3 of 3 MLP(s) used all --n-samples 20,000 without reaching the target standard error 1e-06")
    assert warned("near", 0.5) == []


def test_a_control_variate_layer_its_controls_explain_exactly_passes_the_size_check(tmp_path):
    """Width 1: layer 2 is relu(w·y1), y1 itself when w > 0, so its control-variate standard error is
    ~0; honest, and no lower bound may fail it."""
    out = create_dataset_torch(3, 200_000, 1, 3, seed=8, output_path=tmp_path / "w1", device="cpu",
                               estimator="control-variate")
    report = verify_dataset(out)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert by_name(report)["stderr size"].detail.startswith("3 MLP(s), ")  # held per neuron to the refitted residual


def test_a_target_bake_that_stops_before_the_cap_never_warns_about_the_cap(tmp_path):
    """Issue 28: the pilot-planned rule fixes N before sampling and aims at about E, so some final
    errors land above E; an MLP that stopped below the cap is no "used all --n-samples" MLP. (The
    control-variate bakes of before issue 29's rule, which this seed takes above E.)"""
    events = []
    out = bake(BakeConfig(n_mlps=8, n_samples=10**7, width=32, depth=6, seed=45, output=tmp_path / "r1",
                          estimation=Estimation("control-variate", 1e-3, rule=TARGET_RULE)), on_event=events.append)
    used = pq.read_table(sorted((Path(out) / "data").glob("*.parquet")))["n_samples_used"].to_pylist()
    assert max(used) < 10**7
    assert [e.message for e in events if e.kind == "warning"] == []
    (line,) = [e.message for e in events if e.kind == "note" and e.message.startswith("stored standard errors vs the target")]
    largest = float(line.split("largest ")[1].split("×")[0])
    assert largest > 1  # this seed has an MLP above E: the case the old condition warned about
    done = [e for e in events if e.kind == "done"][-1]  # the writer's (the executor's comes first)
    assert done.data["stderr_ratio"]["largest"] == pytest.approx(largest, abs=0.005)


def test_verify_recomputes_the_counts_by_the_rule_a_control_variate_bake_recorded(tmp_path, rewrite_dataset):
    """Issue 29: control-variate target bakes of before ``pilot-planned-exceed`` recorded ``pilot-planned``
    and still verify by it; a bake of either rule whose recorded rule is swapped for the other fails
    its target check (at E = 4e-4 and 16x4, the new rule plans more samples for some of seed 3's MLPs)."""
    import json as json_mod

    from whestbench.compute.estimation import CV_TARGET_RULE, EXCEED_PROBABILITY

    outs = {}
    for rule in (TARGET_RULE, None):
        outs[rule] = bake(BakeConfig(n_mlps=4, n_samples=10**7, width=16, depth=4, seed=3, output=tmp_path / f"r{rule}",
                                     audit_segments=0, estimation=Estimation("control-variate", 4e-4, rule=rule)))
    used = {r: pq.read_table(sorted((Path(o) / "data").glob("*.parquet")))["n_samples_used"].to_pylist()
            for r, o in outs.items()}
    assert all(a <= b for a, b in zip(used[TARGET_RULE], used[None])) and used[TARGET_RULE] != used[None]
    blocks = {r: json_mod.loads((Path(o) / "metadata.json").read_text())["target_stderr"] for r, o in outs.items()}
    assert blocks[TARGET_RULE]["rule"] == TARGET_RULE and "exceed_probability" not in blocks[TARGET_RULE]
    assert blocks[None]["rule"] == CV_TARGET_RULE and blocks[None]["exceed_probability"] == EXCEED_PROBABILITY
    for r, o in outs.items():
        checks = by_name(verify_dataset(o))
        assert checks["target"].ok, checks["target"].detail
        assert "MLP(s) above E" in checks["target"].detail
    swapped_old = rewrite_dataset(Path(outs[TARGET_RULE]), tmp_path / "old-as-new", md_update={"target_stderr": {
        **blocks[TARGET_RULE], "rule": CV_TARGET_RULE, "exceed_probability": EXCEED_PROBABILITY}})
    swapped_new = rewrite_dataset(Path(outs[None]), tmp_path / "new-as-old", md_update={"target_stderr": {
        k: v for k, v in {**blocks[None], "rule": TARGET_RULE}.items() if k != "exceed_probability"}})
    for path in (swapped_old, swapped_new):
        target = by_name(verify_dataset(path))["target"]
        assert not target.ok and "its pilot plans" in target.detail
