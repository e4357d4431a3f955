"""sampling_budget_breakdown: closed-form FLOP counts and the two row shapes of whestbench 0.16.

The closed form is held to flopscope's count of the reference's own loop, at any chunk size, in
``tests/reference/test_reference_identity.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whestbench.compute.pcg64 import chunk_rows
from whestbench.format.breakdown import (
    CPU_FLOP_BUDGET,
    NAMESPACE,
    breakdown_json,
    operation_counts,
    sampling_budget_breakdown,
)

FIRST_CALL_ORDER = [
    "zeros",
    "random.Generator.standard_normal",
    "array",
    "matmul",
    "maximum",
    "asarray",
    "sum",
    "add",
    "power",
    "stack",
    "true_divide",
    "copy",
    "subtract",
    "mean",
]
CPU_KEYS = [
    "flop_budget",
    "flops_used",
    "flops_remaining",
    "wall_time_s",
    "flopscope_backend_time_s",
    "flopscope_overhead_time_s",
    "residual_wall_time_s",
    "by_namespace",
]
TORCH_KEYS = CPU_KEYS[:-1] + ["time_source", "by_namespace", "provenance"]


def golden_rows(golden_dir: Path, name: str) -> list[dict]:
    import pyarrow.parquet as pq

    path = golden_dir / name / "data" / "public-00000-of-00001.parquet"
    column = pq.read_table(path, columns=["sampling_budget_breakdown"]).column(0).to_pylist()
    return [json.loads(s) for s in column]


def counts_of(row: dict) -> dict[str, tuple[int, int]]:
    ops = row["by_namespace"][NAMESPACE]["operations"]
    return {op: (v["flop_cost"], v["calls"]) for op, v in ops.items()}


# --- closed form ------------------------------------------------------------------------------


def test_operations_are_listed_in_first_call_order():
    assert list(operation_counts(100, 8, 2, 1024)) == FIRST_CALL_ORDER


@pytest.mark.parametrize("name, n, w, d", [("full-w64-d4", 20001, 64, 4), ("full-w256-d8", 5000, 256, 8)])
def test_cpu_counts_equal_the_golden_bake(golden_dir, name, n, w, d):
    """Every op's flop_cost and calls, flops_used and the namespace calls, for every row."""
    ours = sampling_budget_breakdown(n, w, d, chunk_rows(w), wall_time_s=0.0)
    for golden in golden_rows(golden_dir, name):
        assert counts_of(ours) == counts_of(golden)
        assert list(counts_of(ours)) == list(counts_of(golden))
        assert ours["flops_used"] == golden["flops_used"]
        assert ours["flops_remaining"] == golden["flops_remaining"]
        assert ours["by_namespace"][NAMESPACE]["flops_used"] == golden["by_namespace"][NAMESPACE]["flops_used"]
        assert ours["by_namespace"][NAMESPACE]["calls"] == golden["by_namespace"][NAMESPACE]["calls"]


def test_cpu_row_has_the_golden_key_layout(golden_dir):
    golden = golden_rows(golden_dir, "full-w64-d4")[0]
    ours = sampling_budget_breakdown(20001, 64, 4, chunk_rows(64), wall_time_s=0.5)
    assert list(ours) == list(golden)
    assert list(ours["by_namespace"]) == list(golden["by_namespace"])
    ns, gns = ours["by_namespace"][NAMESPACE], golden["by_namespace"][NAMESPACE]
    assert list(ns) == list(gns)
    assert list(ns["operations"]["matmul"]) == list(gns["operations"]["matmul"])


@pytest.mark.parametrize(
    "n, w, d, chunk, sum_cost, flops_used, calls",
    [
        # Observed from whestbench 0.16.2 + flopscope 0.12.4 bakes (seed 12345): a one-row last chunk.
        (16385, 64, 2, 16384, 6291078, 332422278, 44),
        (3073, 1024, 1, 1024, 12570628, 6623961092, 55),
        # n = 1 (a single one-row chunk): the reference bills the tail too (w=8, d=3).
        (1, 8, 3, 1024, 8, 1384, 34),
    ],
)
def test_one_row_last_chunk_adds_the_tail_term(n, w, d, chunk, sum_cost, flops_used, calls):
    row = sampling_budget_breakdown(n, w, d, chunk, wall_time_s=0.0)
    assert counts_of(row)["sum"][0] == sum_cost
    assert row["flops_used"] == flops_used
    assert row["by_namespace"][NAMESPACE]["calls"] == calls


def test_chunk_size_moves_flops_between_sum_and_add_but_not_the_total():
    a = sampling_budget_breakdown(50000, 32, 3, 4096, wall_time_s=0.0, row_kind="torch")
    b = sampling_budget_breakdown(50000, 32, 3, 65536, wall_time_s=0.0, row_kind="torch")
    assert a["flops_used"] == b["flops_used"]
    assert counts_of(a)["sum"] != counts_of(b)["sum"]


@pytest.mark.parametrize("bad", [dict(n_samples=0), dict(width=0), dict(depth=-1), dict(chunk=0)])
def test_non_positive_sizes_are_rejected(bad):
    args = dict(n_samples=10, width=4, depth=1, chunk=1024) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        operation_counts(**args)


# --- CPU rows ---------------------------------------------------------------------------------


def test_cpu_row_records_the_fixed_budget_and_the_wall_time_as_residual():
    row = sampling_budget_breakdown(1000, 16, 2, 16384, wall_time_s=1.25)
    assert list(row) == CPU_KEYS
    assert row["flop_budget"] == CPU_FLOP_BUDGET == 1000000000000000
    assert row["flops_remaining"] == CPU_FLOP_BUDGET - row["flops_used"]
    assert row["wall_time_s"] == row["residual_wall_time_s"] == 1.25
    assert row["flopscope_backend_time_s"] == row["flopscope_overhead_time_s"] == 0.0


def test_cpu_row_has_zero_times_everywhere_below_the_top():
    ns = sampling_budget_breakdown(1000, 16, 2, 16384, wall_time_s=1.0)["by_namespace"][NAMESPACE]
    assert list(ns) == ["flops_used", "calls", "flopscope_backend_time_s", "flopscope_overhead_time_s", "operations"]
    assert ns["flopscope_backend_time_s"] == ns["flopscope_overhead_time_s"] == 0.0
    for op in ns["operations"].values():
        assert list(op) == ["flop_cost", "calls", "flopscope_backend_time_s", "flopscope_overhead_time_s"]
        assert op["flopscope_backend_time_s"] == op["flopscope_overhead_time_s"] == 0.0


def test_namespace_totals_are_the_sums_over_operations():
    ns = sampling_budget_breakdown(20001, 64, 4, 16384, wall_time_s=0.0)["by_namespace"][NAMESPACE]
    assert ns["flops_used"] == sum(op["flop_cost"] for op in ns["operations"].values())
    assert ns["calls"] == sum(op["calls"] for op in ns["operations"].values())


def test_cpu_row_without_provenance_has_no_provenance_or_time_source():
    row = sampling_budget_breakdown(100, 8, 2, 1024, wall_time_s=0.0)
    assert "provenance" not in row and "time_source" not in row


# --- torch (closed-form) rows ----------------------------------------------------------------


def test_closed_form_row_has_the_torch_key_order_and_provenance():
    row = sampling_budget_breakdown(100000, 64, 4, 65536, wall_time_s=0.3, row_kind="torch")
    assert list(row) == TORCH_KEYS
    assert row["time_source"] == "bake"
    prov = row["provenance"]
    assert prov["method"] == "closed-form"
    assert prov["operation_model"] == "whestbench.simulation.sample_layer_statistics"
    assert (prov["chunk_size"], prov["n_chunks"]) == (65536, 2)
    assert isinstance(prov["note"], str)


def test_closed_form_row_without_budget_records_budget_equal_to_used():
    row = sampling_budget_breakdown(1000, 16, 2, 65536, wall_time_s=0.1, row_kind="torch")
    assert row["flop_budget"] == row["flops_used"]
    assert row["flops_remaining"] == 0
    assert row["residual_wall_time_s"] == row["wall_time_s"] == 0.1


def test_unknown_row_kind_is_rejected():
    with pytest.raises(ValueError, match="row_kind"):
        sampling_budget_breakdown(10, 4, 1, 1024, wall_time_s=0.0, row_kind="flopscope")


# --- serialisation ------------------------------------------------------------------------------


def test_breakdown_json_is_plain_json_dumps_and_keeps_key_order():
    row = sampling_budget_breakdown(20001, 64, 4, 16384, wall_time_s=0.25)
    text = breakdown_json(row)
    assert text == json.dumps(row)
    assert list(json.loads(text)) == CPU_KEYS
    assert text.startswith('{"flop_budget": 1000000000000000, "flops_used": 743721344,')


def test_numpy_integer_sizes_still_serialise():
    np = pytest.importorskip("numpy")
    row = sampling_budget_breakdown(np.int64(100), np.int32(8), np.int64(2), np.int64(1024), wall_time_s=np.float64(0.5))
    assert json.loads(breakdown_json(row))["wall_time_s"] == 0.5
