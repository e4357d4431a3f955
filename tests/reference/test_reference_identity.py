"""Our CPU bake is byte-identical to whestbench 0.16.2's, run side by side with one BLAS thread.

SPEC §2, pcg64 contract (a): same seeds and shape ⇒ the same bytes in every column except the
timings inside ``sampling_budget_breakdown`` (whose FLOP counts still match). Contract (c): our
bytes do not depend on our worker-thread count. The shapes cover the reference's chunk rule
(``max(1024, min(16384, 2**20 // width))`` rows per chunk): several chunks with a ragged tail, one
partial chunk, an odd width, a last chunk of exactly one row, and a single sample.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.compute.seeds import slice_bounds
from whestbench.dataset.bake import create_dataset

pytestmark = pytest.mark.reference

GOLDEN_SEEDS = (11, 22, 33, 44, 55, 66)  # fixtures/whestbench-0.16/golden/seeds-6.json
SLICE_SEEDS = (5, 6004799503160661, 2**63 - 1, 0, 123456789)
BREAKDOWN = "sampling_budget_breakdown"


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
    a, b = read_split(ours), read_split(ref)
    assert a.column_names == b.column_names
    assert a.column("mlp_id").to_pylist() == b.column("mlp_id").to_pylist()
    for name in a.column_names:
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
def test_parquet_schema_equals_the_reference(case, our_bakes, reference_bakes):
    """Same Arrow types, field metadata and HF features text, so either side's readers see one format."""
    ours = pq.read_schema(sorted((our_bakes[case.name] / "data").glob("*.parquet"))[0])
    ref = pq.read_schema(sorted((reference_bakes[case.name] / "data").glob("*.parquet"))[0])
    assert ours.equals(ref, check_metadata=True)


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


def test_reference_with_two_blas_threads_is_recorded_not_required(workdir, reference_bakes, run_reference, record_property):
    """The reference is not thread-invariant (SPEC §2 (c)): its 2-thread bytes may differ; we only record by how much."""
    case = CASES[2]  # width 256: big enough for OpenBLAS to split the work
    out = workdir / "ref-2-threads"
    run_reference(case.bake_args(workdir / f"{case.name}-seeds.json", out), env={"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"})
    one, two = read_split(reference_bakes[case.name]), read_split(out)
    means = [np.asarray(t.column("final_means").to_pylist(), dtype=np.float32) for t in (one, two)]
    diff = float(np.max(np.abs(means[0].astype(np.float64) - means[1])))
    identical = all(column_bytes(one, c) == column_bytes(two, c) for c in ("all_layer_means", "final_means", "avg_variance"))
    record_property("reference_2_threads_identical_to_1", identical)
    record_property("reference_2_threads_max_abs_final_means_diff", diff)
    print(f"reference, 2 vs 1 BLAS threads at {case.name}: identical={identical}, max |Δ final_means|={diff:.3g}")
