"""The ``sampling_budget_breakdown`` column: per-MLP FLOP accounting of the ground-truth bake.

whestbench 0.16 stores one JSON object per row. Its CPU path measured it with flopscope; its
torch path synthesized it in closed form. We have no flopscope, so both row kinds are synthesized
here from the closed form below, which equals flopscope 0.12's counts exactly (checked against the
golden fixtures, including a ragged and a one-row last chunk). Only the times differ: we measure
the whole MLP's wall time, not per operation, so per-op times are 0.0 and all of the wall time is
reported as residual.

With n = n_samples, w = width, d = depth, k = ceil(n / chunk), each operation of the reference's
``sample_layer_statistics`` costs (flop_cost, calls):

    zeros                             0                           d+1
    random.Generator.standard_normal  16·n·w                      k
    array                             n·w                         k
    matmul                            d·n·w·(2w−1)                d·k
    maximum                           d·n·w                       d·k
    asarray                           2·w·(d+1)·(n+1)             (d+1)·k + 2
    sum                               2·(d+1)·(n−k)·w + tail      (d+1)·k
    add                               2·(d+1)·k·w                 (d+1)·k
    power                             32·w·(n+1)                  k+1
    stack                             2·d·w                       1
    true_divide                       2·w·(d+1)                   2
    copy                              w                           1
    subtract                          2·w                         1
    mean                              2·w                         1

where tail = 2·(d+1) when the last chunk holds exactly one row (also when it is the only chunk:
n = 1), else 0 (observed: flopscope bills each one-row column sum 2 FLOPs, not 0; the facts file's
"k > 1" is contradicted by the reference's own bakes at n = 1). The order above is the order of first
call, which is the order of the ``operations`` dict.
"""

from __future__ import annotations

import json
from typing import Any

from whestbench.compute.estimation import is_cv_block

NAMESPACE = "sampling.sample_layer_statistics"
OPERATION_MODEL = "whestbench.simulation.sample_layer_statistics"
# whestbench 0.16 runs each CPU MLP inside a flopscope context with this hard-coded budget.
CPU_FLOP_BUDGET = 10**15
ROW_KINDS = ("cpu", "torch")  # whestbench 0.16 writes two row shapes: its CPU path's and its torch path's

_NO_TIMES = {"flopscope_backend_time_s": 0.0, "flopscope_overhead_time_s": 0.0}  # flopscope's timers: none run
_CLOSED_FORM_NOTE = (
    "FLOP counts are computed in closed form from the bake's shape and chunking (they equal "
    "flopscope 0.12's per-operation counts for the same computation); times are the bake's own "
    "wall time per MLP, not per operation."
)


def operation_counts(n_samples: int, width: int, depth: int, chunk: int) -> dict[str, tuple[int, int]]:
    """``{op: (flop_cost, calls)}`` in first-call order for one MLP's sampling (module docstring)."""
    n, w, d, chunk = int(n_samples), int(width), int(depth), int(chunk)
    for name, value in (("n_samples", n), ("width", w), ("depth", d), ("chunk", chunk)):
        if value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value}.")
    k = -(-n // chunk)  # number of chunks, the last one possibly ragged
    last_rows = n - (k - 1) * chunk
    tail = 2 * (d + 1) if last_rows == 1 else 0
    return {
        "zeros": (0, d + 1),
        "random.Generator.standard_normal": (16 * n * w, k),
        "array": (n * w, k),
        "matmul": (d * n * w * (2 * w - 1), d * k),
        "maximum": (d * n * w, d * k),
        "asarray": (2 * w * (d + 1) * (n + 1), (d + 1) * k + 2),
        "sum": (2 * (d + 1) * (n - k) * w + tail, (d + 1) * k),
        "add": (2 * (d + 1) * k * w, (d + 1) * k),
        "power": (32 * w * (n + 1), k + 1),
        "stack": (2 * d * w, 1),
        "true_divide": (2 * w * (d + 1), 2),
        "copy": (w, 1),
        "subtract": (2 * w, 1),
        "mean": (2 * w, 1),
    }


def sampling_budget_breakdown(n_samples: int, width: int, depth: int, chunk: int, *, wall_time_s: float,
                              row_kind: str = "cpu") -> dict[str, Any]:
    """One row's breakdown dict, in whestbench 0.16's key order for the row kind.

    ``chunk``: rows per sampling chunk as the bake ran it (``pcg64.chunk_rows(width)`` on the
    CPU path, the resolved chunk size on torch); it moves FLOPs between ``sum`` and ``add`` and
    sets the call counts, so a wrong value gives a plausible but wrong breakdown.
    ``wall_time_s``: measured wall time of this MLP's sampling (torch: batch wall / batch size).
    ``row_kind="cpu"``: the CPU row shape (flopscope's, no ``time_source``/``provenance``), budget the
    reference's fixed 1e15. ``row_kind="torch"``: the torch row shape (``time_source: "bake"`` and a
    ``provenance`` block with ``chunk_size`` and ``n_chunks``), budget ``flops_used``.
    """
    if row_kind not in ROW_KINDS:
        raise ValueError(f"row_kind must be one of {ROW_KINDS}; got {row_kind!r}.")
    ops = operation_counts(n_samples, width, depth, chunk)
    used = sum(cost for cost, _ in ops.values())
    wall = float(wall_time_s)
    budget = CPU_FLOP_BUDGET if row_kind == "cpu" else used
    operations = {op: {"flop_cost": cost, "calls": c, **_NO_TIMES} for op, (cost, c) in ops.items()}
    namespace = {NAMESPACE: {"flops_used": used, "calls": sum(c for _, c in ops.values()), **_NO_TIMES,
                             "operations": operations}}
    # Nothing is metered per operation, so the whole wall time is unattributed (residual).
    row: dict[str, Any] = {"flop_budget": budget, "flops_used": used, "flops_remaining": budget - used,
                           "wall_time_s": wall, **_NO_TIMES, "residual_wall_time_s": wall}
    if row_kind == "cpu":
        return {**row, "by_namespace": namespace}
    return {**row, "time_source": "bake", "by_namespace": namespace,
            "provenance": {"method": "closed-form", "operation_model": OPERATION_MODEL, "chunk_size": int(chunk),
                           "n_chunks": -(-int(n_samples) // int(chunk)), "note": _CLOSED_FORM_NOTE}}


def breakdown_json(d: dict[str, Any]) -> str:
    """The column's string: ``json.dumps`` with default separators, as whestbench 0.16 writes it."""
    return json.dumps(d)


_WALL = ("`wall_time_s` is the seconds the work units that computed this MLP took in the run that finished them "
         "(shared among the MLPs of a unit). Unrelated to an estimator's budget.")


def column_meaning(md: dict[str, Any]) -> str:
    """What the column is for a dataset with metadata ``md`` (the card's schema table): the same closed
    form on both backends, kept for whestbench 0.16.2's readers; on a torch bake it models 0.16.2's numpy
    loop, not the kernels that ran, as the row's ``provenance`` says."""
    n = "`n_samples_used`" if isinstance(md.get("target_stderr"), dict) else "N"
    extra = " The control variates' pilot and extra sums are not in the counts." if is_cv_block(md.get("estimator")) else ""
    if md.get("backend") == "torch":
        return ("JSON kept for compatibility with whestbench 0.16.2: its closed-form FLOP model of a numpy sampling "
                f"loop over this MLP's {n} samples (operations named after numpy's: `random.Generator.standard_normal`, "
                "`matmul`, ...), labelled `closed-form` in the row's `provenance`; it does not describe the torch "
                "kernels that ran. " + _WALL + extra)
    return ("JSON kept for compatibility with whestbench 0.16.2: the FLOP counts its CPU path measured with flopscope "
            f"for the numpy sampling loop over this MLP's {n} samples, here computed in closed form (equal counts). "
            + _WALL + extra)
