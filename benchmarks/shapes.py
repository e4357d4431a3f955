"""The bake shape every benchmark script takes: ``WxD:N_MLPS:N_SAMPLES`` and its effective FLOPs.

Shared by ``bench_cpu.py``, ``bench_gpu.py`` and ``bench_scaling.py``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    width: int
    depth: int
    n_mlps: int
    n_samples: int

    @property
    def label(self) -> str:
        return f"{self.width}x{self.depth}"

    @property
    def flops(self) -> int:
        """Effective FLOPs of a bake: one (N, w) @ (w, w) matmul per layer per MLP."""
        return 2 * self.width * self.width * self.depth * self.n_samples * self.n_mlps


def count(text: str) -> int:
    """A positive whole number written ``1000000``, ``1_000_000``, ``1e6`` or ``2**20``."""
    t = text.strip().replace("_", "")
    try:
        if "**" in t:
            base, exp = t.split("**")
            value: float = int(base) ** int(exp)
        else:
            value = float(t) if any(c in t.lower() for c in ".e") else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value != int(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(value)


def shape_arg(text: str) -> Shape:
    """``WxD:N_MLPS:N_SAMPLES``, e.g. ``256x8:4:200000`` (argparse ``type=``)."""
    try:
        wd, n_mlps, n_samples = text.split(":")
        w, d = wd.lower().split("x")
        shape = Shape(int(w), int(d), count(n_mlps), count(n_samples))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"a shape looks like 256x8:4:200000 (WxD:N_MLPS:N_SAMPLES); got {text!r}"
        ) from None
    if shape.width <= 0 or shape.depth <= 0:
        raise argparse.ArgumentTypeError(f"width and depth must be positive; got {text!r}")
    return shape
