"""What the dataset card says about the data that is there: each statement made from what the metadata
proves for this dataset (``tests/format/test_card_facts.py`` checks every sentence of the card against
the data of plain, control-variate, target, torch, merged and combined bakes): the columns it holds, N
(one count, or a target bake's range, the cap named as the cap), the arithmetic recorded, the accuracy per
estimator (for the plain mean ``avg_variance / N`` is the mean squared error of ``final_means``; under
control variates only the plain mean's, not the stored means'; Student's t on the batches a control-variate
MLP used), a target's value, rule and check points, and the device check's result.
"""

from __future__ import annotations

from typing import Any

from whestbench.compute.audit import t_quantile
from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import n_batches
from whestbench.format.breakdown import column_meaning
from whestbench.format.schema import COLUMN_DOCS, DatasetMeta, columns_for, device_check_state
from whestbench.text import format_count
from whestbench.values import is_int

_WORDS = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}


def data_facts(md: dict[str, Any], protocol: dict[str, str]) -> dict[str, Any]:
    """The card template's values about the data: ``columns``, ``n_columns``, ``estimator`` (None for a
    dataset without one: whestbench 0.16's), ``target``, ``n_text``/``n_summary`` (N as stored),
    ``arithmetic`` (one sentence), ``device_check``."""
    columns = []
    for name in columns_for(md):
        kind, meaning = COLUMN_DOCS[name]
        if name == "mlp_seed" and protocol.get("version") == "2.0":
            meaning = "Legacy seed protocol 2.0: the estimator seed itself, handed to an estimator as `MLP.seed`."
        elif name == "sampling_budget_breakdown":
            meaning = column_meaning(md)
        columns.append({"name": name, "type": kind, "meaning": meaning})
    cap = md.get("n_samples")
    n_samples = format_count(cap, "unknown")
    t = md.get("target_stderr") if isinstance(md.get("target_stderr"), dict) else None
    spread = used_spread(md) if t is not None else None
    target, n_text, n_summary = None, f"N = {n_samples}", n_samples
    if t is not None:
        value = t.get("value")
        target = {"value": f"{value:g}" if isinstance(value, (int, float)) else str(value),
                  "layer": "every layer" if t.get("layer") == "all" else "the last layer",
                  "rule": str(t.get("rule") or "running"),
                  "check_points": str(t.get("check_points") or ""), "cap": n_samples}
        if spread is None:
            n_text = f"N of up to {n_samples}"
            n_summary = f"up to {n_samples} per MLP (column `n_samples_used`)"
        else:
            lo, hi = spread
            n_text = f"N = {lo:,}" if lo == hi else f"N from {lo:,} to {hi:,}"
            n_summary = (f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}") + f" per MLP (column `n_samples_used`; cap {n_samples})"
    counts = spread if t is not None else ((cap, cap) if is_int(cap) and cap > 0 else None)
    return {"columns": columns, "n_columns": _WORDS.get(len(columns), str(len(columns))),
            "estimator": _estimator(md, counts), "target": target, "n_text": n_text, "n_summary": n_summary,
            "arithmetic": arithmetic(md), "device_check": _device_check(md)}


def _estimator(md: dict[str, Any], counts: tuple[int, int] | None) -> dict[str, Any] | None:
    """The recorded estimator, with (control variates) the batches its MLPs used and their t quantile."""
    est = md.get("estimator") if isinstance(md.get("estimator"), dict) else None
    if est is None:
        return None
    out = {"name": str(est.get("name", "plain")), "cv": is_cv_block(est), "version": str(est.get("version", "")),
           "batch_samples": format_count(est.get("batch_samples"), "unknown"),
           "pilot_samples": format_count(est.get("pilot_samples"), "unknown"),
           "pilot_stream": str(est.get("pilot_stream") or "the MLP's own pilot stream"),
           "controls": str(est.get("controls") or "the layer-1 activations and the layer-2 squared "
                                                  "pre-activations (exact means)"),
           "batches": None}
    batch = est.get("batch_samples")
    if out["cv"] and counts is not None and is_int(batch) and batch > 0:
        out["batches"] = batch_text(counts, batch)
    return out


def batch_text(counts: tuple[int, int], batch: int) -> str | None:
    """``"N = 600,000 makes 37 batches (36 degrees of freedom), so t = 2.03"``: the batches of ``batch``
    samples that N (or a target bake's range of N) makes, and the 97.5 % t quantile on them; None below
    2 batches (no standard error then)."""
    lo, hi = (n_batches(n, batch) for n in counts)
    if lo < 2:
        return None
    t_lo, t_hi = (t_quantile(0.975, k - 1) for k in (lo, hi))
    if lo == hi:
        n = f"N = {counts[0]:,}" if counts[0] == counts[1] else f"N from {counts[0]:,} to {counts[1]:,}"
        return f"{n} makes {lo:,} batches ({lo - 1:,} degrees of freedom), so t = {t_lo:.2f}"
    return (f"N from {counts[0]:,} to {counts[1]:,} makes {lo:,} to {hi:,} batches per MLP, so t is "
            f"{t_lo:.2f} to {t_hi:.2f}")


def arithmetic(md: dict[str, Any]) -> str:
    """How the means were computed, as the metadata records it: the matrix products and the sums."""
    kernel = md.get("kernel") if isinstance(md.get("kernel"), dict) else {}
    config = kernel.get("config") if isinstance(kernel.get("config"), dict) else {}
    accumulation = kernel.get("accumulation")
    if accumulation not in ("float32", "float64"):  # 0.16's torch bakes and combined datasets record no kernel
        device = md.get("device")
        accumulation = ("float32" if device == "mps" else "float64" if md.get("backend") != "torch" or device in
                        ("cpu", "cuda") else "float64 (float32 on an MPS device, which has no float64)")
    if md.get("backend") != "torch":
        products = "The matrix products run in float32 (BLAS sgemm)"
    elif isinstance(config.get("precision"), str):
        products = f"The matrix products run in the fused Triton kernel at precision `{config['precision']}`"
    elif isinstance(kernel.get("matmul_precision"), str):
        tf32 = "TF32 allowed" if kernel.get("allow_tf32") else "TF32 off"
        products = f"The matrix products run in float32 (torch, matmul precision `{kernel['matmul_precision']}`, {tf32})"
    else:
        products = "The matrix products run in float32 (torch)"
    return (f"{products}; the sums over n are accumulated in {accumulation}, divided by N and rounded to float32 "
            "at the end.")


def _device_check(md: dict[str, Any]) -> str | None:
    dc = md.get("device_check")
    state = device_check_state(dc)
    text = {"passed": "passed (the device's arithmetic matched the checks before the bake)",
            "skipped": "skipped (`--skip-device-check`)"}.get(state)
    if state == "accepted":
        failed = [str(c.get("name")) for c in dc.get("checks", []) if isinstance(c, dict) and not c.get("passed")]
        text = "failed and accepted (`--accept-non-invariant`)" + (f": {', '.join(failed)}" if failed else "")
    return text


def used_spread(md: dict[str, Any]) -> tuple[int, int] | None:
    """The fewest and most samples a target bake's MLPs used (``samples_used``; every split's)."""
    meta = DatasetMeta.of(md)
    blocks = ([e.get("samples_used") for e in meta.blocks.values() if isinstance(e, dict)] if meta.is_multi
              else [md.get("samples_used")])
    if not blocks or not all(isinstance(b, dict) and isinstance(b.get("min"), int) and isinstance(b.get("max"), int)
                             for b in blocks):
        return None
    return min(b["min"] for b in blocks), max(b["max"] for b in blocks)
