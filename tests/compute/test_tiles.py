"""compute/philox/tiles.py: the tile rules the fused and the integer Triton kernels share, checked
without torch or Triton."""

from __future__ import annotations

import sys

import pytest

from whestbench.compute.philox.tiles import TileConfig, pow2_at_least


def test_the_tile_rules_both_kernels_share():
    with pytest.raises(ValueError, match="TileConfig.rows must be a positive power of two; got 48"):
        TileConfig(rows=48)
    cfg = TileConfig(rows=16, block_n=32, block_k=16, group_block=4, sum_block=16)
    assert cfg.quantum == 32 and cfg.padded_width(33) == 64 and cfg.padded_width(64) == 64
    with pytest.raises(ValueError, match="one key per MLP"):
        cfg.check_tiles(0, 1, 1, 2)
    with pytest.raises(ValueError, match="multiple of rows=16"):
        cfg.check_tiles(8, 1, 2, 2)
    with pytest.raises(ValueError, match="n_tiles must be positive"):
        cfg.check_tiles(0, 0, 2, 2)
    cfg.check_tiles(32, 3, 2, 2)
    args = cfg.launch_args(33)
    assert (args["WP"], args["ROWS"], args["LOG_ROWS"], args["BLOCK_N"], args["num_warps"]) == (64, 16, 4, 32, 8)
    assert [pow2_at_least(x) for x in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]


def test_tiles_imports_no_heavy_library():
    import subprocess

    code = "import sys, whestbench.compute.philox.tiles; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
