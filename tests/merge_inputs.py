"""The inputs merge and combine-splits tests share: two slices of one 4-MLP bake (seeds 11-14) and two
one-split datasets, ``public`` (seeds 1, 2) and ``holdout`` (seeds 3, 4, config ``holdout``)."""

from __future__ import annotations

from pathlib import Path

from whestbench.bake.pipeline import create_dataset


def make_merge_inputs(root: Path, **shape) -> dict:
    """``{"root", "parts": [two slices], "splits": [public, holdout]}`` baked under ``root`` at ``shape``."""
    parts = [create_dataset(4, mlp_seeds=[11, 12, 13, 14], mlp_range=r, output_path=root / f"p{k}", **shape)
             for k, r in enumerate([(0, 2), (2, 4)])]
    public = create_dataset(2, mlp_seeds=[1, 2], output_path=root / "public", **shape)
    holdout = create_dataset(2, mlp_seeds=[3, 4], split="holdout", config="holdout", output_path=root / "holdout", **shape)
    return {"root": root, "parts": [str(p) for p in parts], "splits": [str(public), str(holdout)]}
