"""Our CPU bake's columns are byte-identical to whestbench 0.16.2's, run side by side with one BLAS thread.

SPEC §2, pcg64 contract (a): same seeds and shape ⇒ the same bytes in every column except the
timings inside ``sampling_budget_breakdown`` (whose FLOP counts still match). Contract (c): our
bytes do not depend on our worker-thread count. The shapes cover the reference's chunk rule
(``max(1024, min(16384, 2**20 // width))`` rows per chunk): several chunks with a ragged tail, one
partial chunk, an odd width, width 1, a last chunk of exactly one row, and a single sample.

The pieces are also held to the reference's own code: the plain sampling formulation, the weights
over a grid of shapes, and the closed-form FLOP counts against flopscope's count of its loop.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from threadpoolctl import threadpool_limits

from whestbench.compute.mlp import sample_weights, weights_for_seed
from whestbench.compute.pcg64 import sample_layer_sums
from whestbench.compute.seeds import slice_bounds, spawn_streams
from whestbench.compute.stats import finalize
from whestbench.bake.pipeline import create_dataset
from whestbench.format.breakdown import NAMESPACE, operation_counts

pytestmark = pytest.mark.reference

GOLDEN_SEEDS = (11, 22, 33, 44, 55, 66)  # the golden set's seeds-6.json (tests/conftest.py)
SLICE_SEEDS = (5, 6004799503160661, 2**63 - 1, 0, 123456789)
BREAKDOWN = "sampling_budget_breakdown"
OUR_COLUMNS = ["all_layer_stderr"]  # issue 14: every bake of ours stores its standard errors


@dataclass(frozen=True)
class Case:
    name: str
    width: int
    depth: int
    n_samples: int
    seeds: tuple[int, ...]

    def bake_args(self, seeds_file: Path, output: Path) -> list[str]:
        return [
            "dataset", "bake", "--n-mlps", str(len(self.seeds)), "--n-samples", str(self.n_samples),
            "--width", str(self.width), "--depth", str(self.depth),
            "--mlp-seeds", str(seeds_file), "--output", str(output),
        ]


CASES = [
    # chunk 16384: two chunks, ragged tail of 3617 rows (the golden bake's shape and seeds)
    Case("w64-d4-n20001", 64, 4, 20001, GOLDEN_SEEDS),
    # odd width, one partial chunk
    Case("w37-d3-n3000", 37, 3, 3000, (7, 2**40 + 3, 999)),
    # chunk 4096: one full chunk and a 904-row tail
    Case("w256-d3-n5000", 256, 3, 5000, (1, 2, 42)),
    # chunk 8192: the last chunk holds exactly one row (its own term in the FLOP count)
    Case("w128-d2-n8193", 128, 2, 8193, (3, 4)),
    # a single sample: variance of one draw is 0 up to rounding
    Case("w8-d2-n1", 8, 2, 1, (1001, 2002, 3003)),
    # width 1: an (n, 1) column, which numpy sums pairwise, so our fused kernels step aside
    Case("w1-d2-n3000", 1, 2, 3000, (9, 10)),
]
THREAD_CASE = CASES[0]
SLICE = (1, 3)  # --slice 1/3 of SLICE_CASE's five MLPs
SLICE_CASE = Case("slice", 16, 2, 3000, SLICE_SEEDS)


def read_split(directory: Path) -> pa.Table:
    """Every row of a single-split dataset, shards in order."""
    shards = sorted((directory / "data").glob("*.parquet"))
    assert shards, f"no parquet shards under {directory}/data"
    return pa.concat_tables([pq.read_table(p) for p in shards])


def column_bytes(table: pa.Table, name: str) -> bytes:
    """The column's leaf values as raw bytes (nested lists flattened; shapes are fixed by the schema)."""
    arr = table.column(name).combine_chunks()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        arr = arr.flatten()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return json.dumps(arr.to_pylist()).encode()
    return np.asarray(arr.to_numpy(zero_copy_only=False)).tobytes()


def assert_columns_identical(ours: Path, ref: Path) -> None:
    """Every reference column, in its order, with its bytes; ours adds the standard errors after them."""
    a, b = read_split(ours), read_split(ref)
    assert a.column_names == b.column_names + OUR_COLUMNS
    assert a.column("mlp_id").to_pylist() == b.column("mlp_id").to_pylist()
    for name in b.column_names:
        if name == BREAKDOWN:
            continue
        assert a.schema.field(name).type == b.schema.field(name).type, name
        assert column_bytes(a, name) == column_bytes(b, name), f"column {name} differs from the reference"


def flop_counts(breakdown_json: str) -> dict:
    """Everything in a sampling breakdown that counts work; timings dropped."""
    bd = json.loads(breakdown_json)
    return {
        "flop_budget": bd["flop_budget"],
        "flops_used": bd["flops_used"],
        "flops_remaining": bd["flops_remaining"],
        "by_namespace": {
            ns: {
                "flops_used": v["flops_used"],
                "calls": v["calls"],
                # a list, so the operations' order (the reference's order of first call) is compared too
                "operations": [(op, o["flop_cost"], o["calls"]) for op, o in v["operations"].items()],
            }
            for ns, v in bd["by_namespace"].items()
        },
    }


def write_seeds(path: Path, seeds: tuple[int, ...]) -> Path:
    path.write_text(json.dumps(list(seeds)))
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("identity")


@pytest.fixture(scope="module")
def our_slice(workdir: Path) -> Path:
    """Our CLI's ``--slice 1/3`` of five MLPs (slice boundaries per the docs: last slice gets the remainder)."""
    from whestbench.cli import main

    seeds = write_seeds(workdir / "slice-seeds.json", SLICE_SEEDS)
    out = workdir / "ours-slice"
    argv = SLICE_CASE.bake_args(seeds, out) + ["--slice", f"{SLICE[0]}/{SLICE[1]}", "--quiet"]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def reference_bakes(workdir: Path, our_slice: Path, run_reference_batch) -> dict[str, Path]:
    """The reference's single-threaded bakes of every case (and the slice's MLP range), in one process."""
    argvs, outs = [], {}
    for case in CASES:
        seeds = write_seeds(workdir / f"{case.name}-seeds.json", case.seeds)
        outs[case.name] = workdir / f"ref-{case.name}"
        argvs.append(case.bake_args(seeds, outs[case.name]))
    start, end = json.loads((our_slice / "metadata.json").read_text())["mlp_range"]
    seeds = workdir / "slice-seeds.json"
    outs["slice"] = workdir / "ref-slice"
    # the reference's --slice uses floor boundaries; the same MLPs by explicit inclusive range
    argvs.append(SLICE_CASE.bake_args(seeds, outs["slice"]) + ["--mlp-range", f"{start}-{end - 1}"])
    outs["slice-floor"] = workdir / "ref-slice-floor"
    argvs.append(SLICE_CASE.bake_args(seeds, outs["slice-floor"]) + ["--slice", f"{SLICE[0]}/{SLICE[1]}"])
    run_reference_batch(argvs)
    return outs


@pytest.fixture(scope="module")
def our_bakes(workdir: Path) -> dict[str, Path]:
    """Our bakes of every case with the default worker count (all cores)."""
    outs = {}
    for case in CASES:
        outs[case.name] = create_dataset(
            len(case.seeds), case.n_samples, case.width, case.depth,
            mlp_seeds=list(case.seeds), output_path=workdir / f"ours-{case.name}",
        )
    return outs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_column_but_the_breakdown_is_byte_identical_to_the_reference(case, our_bakes, reference_bakes):
    assert_columns_identical(our_bakes[case.name], reference_bakes[case.name])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_breakdown_flop_counts_equal_the_reference(case, our_bakes, reference_bakes):
    ours = read_split(our_bakes[case.name]).column(BREAKDOWN).to_pylist()
    ref = read_split(reference_bakes[case.name]).column(BREAKDOWN).to_pylist()
    assert [flop_counts(s) for s in ours] == [flop_counts(s) for s in ref]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_parquet_schema_is_the_references_plus_our_columns(case, our_bakes, reference_bakes):
    """The reference's fields with the same Arrow types and field metadata, and its HF features
    text with ours appended, so either side's readers see one format."""
    ours = pq.read_schema(sorted((our_bakes[case.name] / "data").glob("*.parquet"))[0])
    ref = pq.read_schema(sorted((reference_bakes[case.name] / "data").glob("*.parquet"))[0])
    shared = pa.schema([ours.field(name) for name in ref.names])
    assert shared.equals(ref.remove_metadata(), check_metadata=True) and ours.names == ref.names + OUR_COLUMNS
    features = json.loads(ours.metadata[b"huggingface"])["info"]["features"]
    ref_features = json.loads(ref.metadata[b"huggingface"])["info"]["features"]
    assert list(features) == list(ref_features) + OUR_COLUMNS
    assert {k: features[k] for k in ref_features} == ref_features
    assert features["all_layer_stderr"] == {**ref_features["all_layer_means"]}  # Array2D (depth, width) float32
    assert {k: v for k, v in ours.metadata.items() if k != b"huggingface"} == \
        {k: v for k, v in ref.metadata.items() if k != b"huggingface"}


@pytest.mark.parametrize("case", [c for c in CASES if c.n_samples > 1], ids=lambda c: c.name)
def test_our_last_layer_stderr_agrees_with_the_references_avg_variance(case, our_bakes, reference_bakes):
    """``avg_variance`` (the reference's, an independent computation) is the mean over the final
    neurons of ``sumsq/N − mean²``; ours is ``sqrt(that · N/(N−1) / N)`` per neuron, so
    ``mean(stderr² · (N − 1)) == avg_variance`` up to float32 rounding of the stored values."""
    ours, ref = read_split(our_bakes[case.name]), read_split(reference_bakes[case.name])
    n = case.n_samples
    stderr = np.asarray(ours.column("all_layer_stderr").to_pylist(), dtype=np.float64)  # (m, depth, w)
    from_ours = np.mean(stderr[:, -1] ** 2 * (n - 1), axis=1)
    avg_var = np.asarray(ref.column("avg_variance").to_pylist())
    np.testing.assert_allclose(from_ours, avg_var, rtol=2e-6, atol=1e-12)


def test_slice_boundaries_follow_the_docs_not_the_references_floor_rule(our_slice, reference_bakes):
    """Why the slice comparison goes through an explicit --mlp-range: 1/3 of 5 MLPs differs (SPEC §8)."""
    ours = json.loads((our_slice / "metadata.json").read_text())["mlp_range"]
    ref = json.loads((reference_bakes["slice-floor"] / "metadata.json").read_text())["mlp_range"]
    assert ours == list(slice_bounds(*SLICE, len(SLICE_SEEDS))) == [1, 2]  # q = 5 // 3; the last slice takes the rest
    assert ref == [1, 3]  # floor(k * n / N) boundaries


def test_a_slice_is_byte_identical_to_the_reference_over_the_same_mlp_range(our_slice, reference_bakes):
    assert_columns_identical(our_slice, reference_bakes["slice"])


def test_a_slice_records_the_same_partial_range_as_the_reference(our_slice, reference_bakes):
    ours = json.loads((our_slice / "metadata.json").read_text())
    ref = json.loads((reference_bakes["slice"] / "metadata.json").read_text())
    keys = ("is_partial", "mlp_range", "total_n_mlps", "n_mlps")
    assert {k: ours[k] for k in keys} == {k: ref[k] for k in keys}


@pytest.mark.parametrize("threads", [1, 2])
def test_our_bytes_do_not_depend_on_the_thread_count(threads, workdir, reference_bakes):
    out = create_dataset(
        len(THREAD_CASE.seeds), THREAD_CASE.n_samples, THREAD_CASE.width, THREAD_CASE.depth,
        mlp_seeds=list(THREAD_CASE.seeds), output_path=workdir / f"ours-threads-{threads}", max_threads=threads,
    )
    assert_columns_identical(out, reference_bakes[THREAD_CASE.name])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_plain_formulation_is_byte_identical_to_the_reference(case, reference_bakes):
    """``sample_layer_sums(fused=False)``, the executable specification the fused kernels are held to
    (``tests/compute/test_pcg64.py``), gives the reference's numeric columns at one BLAS thread."""
    ref = read_split(reference_bakes[case.name])
    means, final, avg_var = [], [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for seed in case.seeds:
            weight_ss, sample_ss, _ = spawn_streams(seed)
            sums = sample_layer_sums(sample_weights(weight_ss, case.width, case.depth), sample_ss, case.n_samples, fused=False)
            m, f, v = finalize(sums)
            means.append(m), final.append(f), avg_var.append(v)
    assert np.stack(means).tobytes() == column_bytes(ref, "all_layer_means")
    assert np.stack(final).tobytes() == column_bytes(ref, "final_means")
    assert np.array(avg_var, dtype=np.float64).tobytes() == column_bytes(ref, "avg_variance")


# Seeds, widths and depths for the weights: width 1, odd and power-of-two widths, depth 1, the
# largest int63 seed and seed 0.
WEIGHT_SHAPES = [(0, 1, 1), (1, 2, 5), (7, 37, 3), (2**63 - 1, 64, 2), (123456789, 256, 1), (42, 100, 4)]


def test_weights_equal_the_references_for_every_shape(run_reference_python):
    code = """
import hashlib, json, sys
import flopscope.numpy as fnp
import numpy as np
from whestbench.generation import sample_mlp
from whestbench.seeds import derive_seed_streams
out = []
for seed, width, depth in json.loads(sys.argv[1]):
    weight_ss, _, est = derive_seed_streams(seed)
    mlp = sample_mlp(width, depth, fnp.random.default_rng(weight_ss), seed=est)
    out.append(hashlib.sha256(np.stack([np.asarray(w) for w in mlp.weights]).astype(np.float32).tobytes()).hexdigest())
print(json.dumps(out))
"""
    ref = json.loads(run_reference_python(code, json.dumps(WEIGHT_SHAPES)).stdout.splitlines()[-1])
    ours = [hashlib.sha256(weights_for_seed(s, w, d).tobytes()).hexdigest() for s, w, d in WEIGHT_SHAPES]
    assert ours == ref


# (n_samples, width, depth, chunk rows): whole chunks, a ragged tail, a one-row last chunk (n = 1
# too), and chunk sizes the reference's width rule never picks.
COUNT_SHAPES = [
    (20001, 64, 4, 16384),
    (5000, 256, 8, 4096),
    (16384, 64, 2, 16384),
    (16385, 64, 2, 16384),
    (1, 37, 3, 1024),
    (7000, 37, 5, 1000),
    (3073, 1024, 1, 1024),
    (50, 8, 2, 7),
]


def test_operation_counts_equal_the_references_flopscope_counts(run_reference_python):
    """``breakdown.operation_counts`` is a closed form; flopscope measures the reference's loop."""
    code = """
import json, sys
import flopscope as flops
import flopscope.numpy as fnp
import whestbench.simulation as sim
from whestbench.generation import sample_mlp
from whestbench.scoring import _normalize_sampling_budget_breakdown
out = []
for n, w, d, chunk in json.loads(sys.argv[1]):
    sim._pick_chunk_size = lambda width, chunk=chunk: chunk  # the reference's loop at any chunk size
    mlp = sample_mlp(w, d, fnp.random.default_rng(1), seed=1)
    with flops.BudgetContext(flop_budget=int(1e15), quiet=True) as budget:
        with flops.namespace("sampling"):
            with flops.namespace("sample_layer_statistics"):
                sim.sample_layer_statistics(mlp, n, rng=fnp.random.default_rng(2))
    row = _normalize_sampling_budget_breakdown(budget.summary_dict(by_namespace=True))
    out.append({ns: [[op, v["flop_cost"], v["calls"]] for op, v in b["operations"].items()]
                for ns, b in row["by_namespace"].items()})
print(json.dumps(out))
"""
    measured = json.loads(run_reference_python(code, json.dumps(COUNT_SHAPES)).stdout.splitlines()[-1])
    for shape, ref in zip(COUNT_SHAPES, measured, strict=True):
        ours = [[op, cost, calls] for op, (cost, calls) in operation_counts(*shape).items()]
        assert ref == {NAMESPACE: ours}, shape  # every count, in the reference's order of first call
