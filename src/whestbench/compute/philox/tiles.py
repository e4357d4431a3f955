"""The tile shape both Triton kernels of the ``philox`` sampler share (the fused kernel's
``KernelConfig``, the integer kernel's ``OzakiConfig``): block sizes, each a power of two, and the
padded width every block divides. No torch or Triton here: a shape is checked without a GPU."""

from __future__ import annotations

from dataclasses import dataclass

BLOCKS = ("rows", "block_n", "block_k", "group_block", "sum_block")


def pow2_at_least(x: int) -> int:
    """The least power of two ``>= x`` (1 for ``x <= 1``)."""
    return 1 << max(x - 1, 0).bit_length()


@dataclass(frozen=True)
class TileConfig:
    """Block sizes of one kernel launch (a kernel's config adds what fixes its arithmetic)."""

    rows: int = 128
    """Samples per tile: the height of every ``tl.dot`` and the size of the subtree one program sums."""
    block_n: int = 128
    """Output columns per accumulator."""
    block_k: int = 32
    """Reduction step of every layer's matmul."""
    group_block: int = 16
    """Philox groups (four neurons each) drawn per step of the input pass."""
    sum_block: int = 32
    """Columns per fp64 pairwise-tree pass (the fp64 tile is ``rows x sum_block``)."""
    num_warps: int = 8
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in BLOCKS:
            v = getattr(self, name)
            if v <= 0 or v & (v - 1):
                raise ValueError(f"{type(self).__name__}.{name} must be a positive power of two; got {v}.")

    @property
    def quantum(self) -> int:
        """The padded width ``WP`` is a multiple of this (every block size divides it)."""
        return max(self.block_n, self.block_k, 4 * self.group_block, self.sum_block)

    def padded_width(self, width: int) -> int:
        return -(-width // self.quantum) * self.quantum

    def check_tiles(self, n_first: int, n_tiles: int, n_keys: int, n_mlps: int) -> None:
        """A launch's range is whole tiles (aligned subtrees) with one Philox key per MLP."""
        if n_keys != n_mlps:
            raise ValueError(f"keys has {n_keys} rows but the weights hold {n_mlps} MLPs; pass one key per MLP.")
        if n_first < 0 or n_first % self.rows:
            raise ValueError(f"n_first={n_first} must be a non-negative multiple of rows={self.rows} (tiles are aligned subtrees).")
        if n_tiles <= 0:
            raise ValueError(f"n_tiles must be positive; got {n_tiles}.")

    def launch_args(self, width: int) -> dict[str, int]:
        """The tile's compile-time arguments to either kernel (``WP`` the padded width)."""
        return dict(WP=self.padded_width(width), ROWS=self.rows, LOG_ROWS=self.rows.bit_length() - 1,
                    BLOCK_N=self.block_n, BLOCK_K=self.block_k, GROUP_BLOCK=self.group_block,
                    SUM_BLOCK=self.sum_block, num_warps=self.num_warps, num_stages=self.num_stages)
