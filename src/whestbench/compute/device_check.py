"""The device check's verdicts: a device's sampler words, block sums and row invariance against the
numpy specification (arrays in, verdicts out).

A torch bake runs three checks before its first unit (``work/device_check.py`` runs them on the
bake's own path; ``whest doctor`` on every path). This module only judges what they produced:
``philox-words`` (words and uniforms bit for bit, normals within ``NORMAL_ULPS``), ``block-sums``
(held to the precision gate, ``precision.GATE_MAX_ABS`` and ``precision.GATE_MAX_BIAS``) and
``row-invariance`` (identical bits). What each compares: docs/gpu.md's table of the checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from whestbench.compute.philox import spec as philox
from whestbench.compute.precision import GATE_MAX_ABS, GATE_MAX_BIAS, gate_passes

PHILOX_WORDS, BLOCK_SUMS, ROW_INVARIANCE = "philox-words", "block-sums", "row-invariance"

# Fixed keys (Random123's known-answer key and an all-ones word) and counters: the start, around
# lo32(n) wrapping into hi32(n) = 1, and the last samples a bake can have (n_samples < 2**63).
CHECK_KEYS = ((0xA4093822, 0x299F31D0), (0xFFFFFFFF, 0x00000000))
CHECK_COUNTERS = ((0, 128), (2**32 - 64, 2**32 + 64), (2**63 - 65, 2**63 - 1))

# Normals: |device - numpy| in float32 ulps of max(|numpy|, NORMAL_ULP_FLOOR). Measured (docs/
# sampler-philox.md, 10**8 normals): <= 5 ulp for |x| >= 1e-3 between numpy and the numba kernel,
# <= 4 ulp from the exact transform; libdevice and torch's functions are within a few ulp of those.
# Below 1e-3 a value next to a zero of cos or sin moves by many of its own ulps for a 1e-14
# difference, so the floor measures it in the ulps of 1e-3 instead.
NORMAL_ULPS = 8.0
NORMAL_ULP_FLOOR = 1e-3


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. ``figure`` is what was measured, ``limit`` the most it may be;
    ``extra`` holds a check's further figures (normals' ulps, the bias) for the JSON record."""

    name: str
    passed: bool
    figure: float
    limit: float
    detail: str
    """One line with the figures, for a person (the failure message quotes it)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "figure": self.figure, "limit": self.limit,
                "detail": self.detail, **self.extra}


def normal_ulps(device: np.ndarray, reference: np.ndarray) -> float:
    """Largest ``|device - reference|`` in float32 ulps of ``max(|reference|, NORMAL_ULP_FLOOR)``."""
    ref = np.asarray(reference, dtype=np.float32)
    dev = np.asarray(device, dtype=np.float32)
    if ref.shape != dev.shape or not np.all(np.isfinite(dev)):
        return float("inf")
    scale = np.spacing(np.maximum(np.abs(ref), np.float32(NORMAL_ULP_FLOOR))).astype(np.float64)
    return float(np.max(np.abs(dev.astype(np.float64) - ref.astype(np.float64)) / scale, initial=0.0))


def _mismatches(device: np.ndarray, reference: np.ndarray) -> int:
    """Elements whose bits differ (a wrong shape counts every element)."""
    dev = np.ascontiguousarray(device)
    ref = np.ascontiguousarray(reference)
    if dev.shape != ref.shape:
        return int(ref.size)
    return int(np.count_nonzero(dev.view(np.uint32) != ref.view(np.uint32)))


def judge_philox(words: list[np.ndarray], ref_words: list[np.ndarray], uniforms: list[np.ndarray] | None,
                 normals: list[np.ndarray], ref_normals: list[np.ndarray]) -> CheckResult:
    """``philox-words`` from the device's words (uint32), the uniforms it makes of those words
    (float32; None where the path does not expose them: compared with ``philox.uniforms`` of the same
    words, so a wrong word is counted once) and its normals, against the specification's words and
    normals, one array per (key, counter range)."""
    n_words = sum(int(r.size) for r in ref_words)
    bad_words = sum(_mismatches(np.asarray(w, dtype=np.uint32), r) for w, r in zip(words, ref_words))
    bad_unif = 0
    if uniforms is not None:
        bad_unif = sum(_mismatches(np.asarray(u, dtype=np.float32), philox.uniforms(np.asarray(w, dtype=np.uint32)))
                       for u, w in zip(uniforms, words))
    ulps = max((normal_ulps(n, r) for n, r in zip(normals, ref_normals)), default=0.0)
    passed = bad_words == 0 and bad_unif == 0 and ulps <= NORMAL_ULPS
    parts = [f"{bad_words} of {n_words} words"]
    if uniforms is not None:
        parts.append(f"{bad_unif} of {n_words} uniforms")
    detail = (f"{' and '.join(parts)} differ from compute/philox/spec.py's (limit 0; counters up to 2**63, past 2**32); "
              f"normals within {ulps:.3g} ulp (limit {NORMAL_ULPS:g})")
    if uniforms is None:
        detail += "; this path does not expose its uniforms (the normals cover them)"
    return CheckResult(PHILOX_WORDS, passed, float(bad_words + bad_unif), 0.0, detail,
                       {"normals_ulps": ulps, "normals_ulps_limit": NORMAL_ULPS,
                        "uniforms_checked": uniforms is not None})


def fp64_batch_raw(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``philox.batch_raw``'s rows over the inputs ``x`` (rows, width), with the forward pass in fp64:
    ``(2·depth + 1, width)`` — every layer's post-ReLU sums, their squares' sums, and layer 2's
    squared pre-activations' sums (zeros at depth 1). The precision gate's reference."""
    depth, width, _ = weights.shape
    h = np.asarray(x, dtype=np.float64)
    raw = np.zeros((2 * depth + 1, width))
    for layer in range(depth):
        z = h @ weights[layer].astype(np.float64)  # (rows, width) fp64
        if layer == 1:
            raw[2 * depth] = np.sum(z * z, axis=0)
        h = np.maximum(z, 0.0)
        raw[layer] = np.sum(h, axis=0)
        raw[depth + layer] = np.sum(h * h, axis=0)
    return raw


def fp64_packed(weights: np.ndarray, x: np.ndarray, batch: int, controls=None) -> np.ndarray:
    """The fp64 reference of a stretch's packed sums ``(2 or 4 · depth, width)``: ``fp64_batch_raw``
    per batch of ``batch`` rows, then ``philox.batch_packed`` (with ``controls``, the control-variate
    rows too), added over the batches."""
    depth = weights.shape[0]
    bounds = [(r0, min(r0 + batch, len(x))) for r0 in range(0, len(x), batch)]
    raw = np.stack([fp64_batch_raw(weights, x[r0:r1]) for r0, r1 in bounds])  # (n_batches, 2d+1, w)
    counts = np.array([r1 - r0 for r0, r1 in bounds], dtype=np.int64)
    return philox.batch_packed(raw, counts, depth, controls).sum(axis=0)


_ROW_NAMES = ("sums", "sums of squares", "control-variate sums", "control-variate sums of squares")


def judge_block_sums(device: np.ndarray, reference: np.ndarray, count: int, depth: int) -> CheckResult:
    """``block-sums``: the device's packed sums ``(rows, width)`` against the fp64 reference's over the
    same ``count`` samples, as means, in the units of an activation: a mean's Δ as it is (relative
    above 1), a mean square's Δ divided by ``2·rms`` (``Δ(h²) ≈ 2h·Δh``; absolute below rms 1/2).
    Each must be at most ``GATE_MAX_ABS``; per layer and kind, their mean over the neurons at most
    ``GATE_MAX_BIAS`` (SPEC section 3's gate, made for means, applied to every row)."""
    dev = np.asarray(device, dtype=np.float64) / count
    ref = np.asarray(reference, dtype=np.float64) / count
    if dev.shape != ref.shape or not np.all(np.isfinite(dev)):
        return CheckResult(BLOCK_SUMS, False, float("inf"), GATE_MAX_ABS,
                           f"the device path returned {dev.shape} values (finite: {bool(np.all(np.isfinite(dev)))}), "
                           f"expected {ref.shape} finite sums")
    squares = (np.arange(ref.shape[0]) // depth % 2 == 1)[:, None]  # sums of squares, cv sums of squares
    scale = np.where(squares, 2.0 * np.sqrt(np.abs(ref)), np.abs(ref))
    delta = (dev - ref) / np.maximum(1.0, scale)
    worst = float(np.max(np.abs(delta)))
    bias_rows = np.abs(delta.mean(axis=1))
    bias = float(np.max(bias_rows))
    at = np.unravel_index(int(np.argmax(np.abs(delta))), delta.shape)
    kind, layer = _ROW_NAMES[at[0] // depth], at[0] % depth + 1
    passed = gate_passes(worst, bias)
    detail = (f"max |Δ mean| {worst:.2g} (limit {GATE_MAX_ABS:g}; at layer {layer} {kind}, neuron {at[1]}), "
              f"max |mean Δ| over a layer's neurons {bias:.2g} (limit {GATE_MAX_BIAS:g}), "
              f"{count:,} samples against an fp64 forward pass on the same inputs")
    return CheckResult(BLOCK_SUMS, passed, worst, GATE_MAX_ABS, detail,
                       {"bias": bias, "bias_limit": GATE_MAX_BIAS, "samples": int(count)})


def judge_row_invariance(first: np.ndarray, second: np.ndarray, what: str) -> CheckResult:
    """``row-invariance``: two runs over the same samples (``what`` says how they differed) must give
    identical bits; ``figure`` counts the values that differ."""
    a, b = np.ascontiguousarray(first, dtype=np.float64), np.ascontiguousarray(second, dtype=np.float64)
    if a.shape != b.shape:
        return CheckResult(ROW_INVARIANCE, False, float(a.size), 0.0, f"{what}: results of shapes {a.shape} and {b.shape}")
    differ = int(np.count_nonzero(a.view(np.uint64) != b.view(np.uint64)))
    largest = float(np.max(np.abs(a - b), initial=0.0))
    detail = f"{differ} of {a.size} sums differ (limit 0; largest difference {largest:.2g}) between {what}"
    return CheckResult(ROW_INVARIANCE, differ == 0, float(differ), 0.0, detail)
