"""The integer (Ozaki) kernel for the ``philox`` sampler: int8 digit GEMMs with exact int32 sums.

One program owns a tile (``rows`` consecutive samples of one MLP), as the fused kernel does
(``triton_kernel.py``: the same in-kernel inputs, the same fp64 pairwise-tree column sums of every
layer and of its squares). The matmul is ``ozaki_spec.py``'s, which this kernel equals byte for byte
(weights split once on the host). A layer's output tile is turned into the next layer's digits as it
is made (its columns are the next layer's scale block), so the activations cross global memory as
int8 digits. Design: docs/gpu-kernel.md, "The integer kernel (ozaki)".

Import this module only where triton is wanted (``TRITON_INTERPRET=1`` before the import on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from whestbench.compute.philox import ozaki_spec as spec
from whestbench.compute.philox.tiles import TileConfig, pow2_at_least
from whestbench.compute.philox.triton_kernel import (
    MAX_FUSED_WIDTH,
    _default_programs,
    _draw_inputs,
    _key_tensor,
    _pairwise_colsum,
    fused_available,
    range_sums_of,
    range_sums_triton,
)

KERNEL_NAME = "triton-ozaki-philox"
KERNEL_VERSION = "1"
MAX_OZAKI_WIDTH = MAX_FUSED_WIDTH


@dataclass(frozen=True)
class OzakiConfig(TileConfig):
    """Compile-time shape of the integer kernel. Only ``block_n`` (the scale block) and ``digits`` fix
    the arithmetic (``identity()``); rows, ``block_k``, the grid, warps and stages cannot change a byte
    (integer sums are exact; a tile's tree is a subtree of the block's)."""

    rows: int = 64
    block_n: int = 64
    """Output columns per accumulator, and the scale block: the columns that share one activation scale."""
    block_k: int = 64
    """K step of the int8 dots inside a scale block (>= 32: the int8 MMA's K)."""
    digits: int = spec.DIGITS
    """int8 digits per value: 4 (offered); 3 is the variant that fails the precision gate."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rows < 16 or self.block_n < 16 or self.block_k < 32:
            raise ValueError(f"OzakiConfig needs rows >= 16, block_n >= 16, block_k >= 32 (tl.dot on int8); got {self}.")
        if self.block_k > self.block_n:
            raise ValueError(f"OzakiConfig.block_k={self.block_k} must not exceed block_n={self.block_n} (the scale block).")
        if self.digits not in (3, 4):
            raise ValueError(f"OzakiConfig.digits must be 3 or 4; got {self.digits}.")

    def identity(self) -> dict:
        """What determines the numbers, and all of it: no device enters (integer sums are exact)."""
        return {"kernel": KERNEL_NAME, "version": KERNEL_VERSION, "digits": self.digits, "scale_k": self.block_n}


def default_config(width: int) -> OzakiConfig:
    """A starting configuration for ``width`` (to tune on a GPU). The scale block is the whole row up to
    ``DEFAULT_SCALE_K`` = 64 columns; wider rows get one scale per 64-column block. Compiled for sm_90
    without a device (ptxas), 64 x 64 blocks with 8 warps use 255 registers and spill 52 bytes; 128
    columns spill 1 KB (the fp64 accumulator and four int32 sums share the register file)."""
    wp2 = pow2_at_least(max(width, 32))
    block_n = min(wp2, spec.DEFAULT_SCALE_K)
    return OzakiConfig(rows=64, block_n=block_n, block_k=min(block_n, 64), group_block=min(wp2 // 4, 16),
                       sum_block=min(wp2, 32), num_warps=8)


# --- the kernel ----------------------------------------------------------------------------------


@triton.jit
def _store_digits(x, dig, exps, rows, cols, sb, WP: tl.constexpr, ROWS: tl.constexpr, NSB: tl.constexpr,
                  DIGITS: tl.constexpr):
    """(ROWS, C) float32 -> its scale exponent per row (``exps[row, sb]``) and DIGITS int8 digit planes
    (``dig[i, row, col]``): ``ozaki_spec.exponents`` and ``digits``, step for step."""
    m = tl.max(tl.abs(x), axis=1)
    biased = ((m.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32)
    e = tl.maximum(biased - 126, -100)
    scale = ((6 - e + 127) << 23).to(tl.float32, bitcast=True)  # 2**(6-e)
    y = x * scale[:, None]
    for i in tl.static_range(DIGITS):
        d = (y + 12582912.0) - 12582912.0  # round to nearest even: 1.5 * 2**23
        tl.store(dig + i * ROWS * WP + rows[:, None] * WP + cols[None, :], d.to(tl.int8))
        y = (y - d) * 128.0
    tl.store(exps + rows * NSB + sb, e)


@triton.jit
def _ozaki_tile_kernel(
    wd_ptr,  # (B, depth, DIGITS, WP, WP) int8 weight digits, indexed (digit, input, output)
    we_ptr,  # (B, depth, WP) int32 column exponents
    key_ptr,  # (B, 2) int64
    out_ptr,  # (B, n_tiles, 2 * depth, WP) float64
    h_ptr,  # (n_programs, ROWS, WP) float32: the layer's activations, for the sums
    dig_ptr,  # (n_programs, 2, DIGITS, ROWS, WP) int8: ping-pong digit planes
    exp_ptr,  # (n_programs, 2, ROWS, NSB) int32: their scale exponents
    n_mlps,
    depth,
    width,
    n_tiles,
    n_first,
    n_end,
    stride_wb,
    stride_wl,
    stride_eb,
    stride_ob,
    stride_ot,
    stride_ol,
    WP: tl.constexpr,
    ROWS: tl.constexpr,
    LOG_ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_BLOCK: tl.constexpr,
    SUM_BLOCK: tl.constexpr,
    DIGITS: tl.constexpr,
    SHIFT: tl.constexpr,  # 2*6 + 7*(DIGITS-1)
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    rows = tl.arange(0, ROWS)
    NSB: tl.constexpr = WP // BLOCK_N
    PLANE: tl.constexpr = ROWS * WP
    hbuf = h_ptr + pid.to(tl.int64) * PLANE
    dig0 = dig_ptr + pid.to(tl.int64) * (2 * DIGITS * PLANE)
    exp0 = exp_ptr + pid.to(tl.int64) * (2 * ROWS * NSB)
    for item in range(pid, n_mlps * n_tiles, n_programs):
        b = item // n_tiles
        t = item % n_tiles
        tl.debug_barrier()

        # 1. inputs, as the fused kernel draws them, then their digits (scale blocks of BLOCK_N columns)
        _draw_inputs(hbuf, key_ptr + 2 * b, n_first + t.to(tl.int64) * ROWS, n_end, width, WP, ROWS, GROUP_BLOCK)
        tl.debug_barrier()
        for c0 in range(0, WP, BLOCK_N):
            cols = c0 + tl.arange(0, BLOCK_N)
            x = tl.load(hbuf + rows[:, None] * WP + cols[None, :])
            _store_digits(x, dig0, exp0, rows, cols, c0 // BLOCK_N, WP, ROWS, NSB, DIGITS)
        tl.debug_barrier()

        # 2. layers
        o_tile = out_ptr + b.to(tl.int64) * stride_ob + t.to(tl.int64) * stride_ot
        for layer in range(depth):
            src_d = dig0 + (layer % 2) * (DIGITS * PLANE)
            dst_d = dig0 + ((layer + 1) % 2) * (DIGITS * PLANE)
            src_e = exp0 + (layer % 2) * (ROWS * NSB)
            dst_e = exp0 + ((layer + 1) % 2) * (ROWS * NSB)
            w_l = wd_ptr + b.to(tl.int64) * stride_wb + layer * stride_wl
            e_l = we_ptr + b.to(tl.int64) * stride_eb + layer * WP
            for n0 in range(0, WP, BLOCK_N):
                cols = n0 + tl.arange(0, BLOCK_N)
                ew = tl.load(e_l + cols)
                acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float64)
                for kb in range(0, WP, BLOCK_N):  # scale blocks, in ascending order
                    s0 = tl.zeros((ROWS, BLOCK_N), dtype=tl.int32)
                    s1 = tl.zeros((ROWS, BLOCK_N), dtype=tl.int32)
                    s2 = tl.zeros((ROWS, BLOCK_N), dtype=tl.int32)
                    s3 = tl.zeros((ROWS, BLOCK_N), dtype=tl.int32)
                    for kk in range(kb, kb + BLOCK_N, BLOCK_K):
                        ks = kk + tl.arange(0, BLOCK_K)
                        a_off = rows[:, None] * WP + ks[None, :]
                        w_off = ks[:, None] * WP + cols[None, :]
                        a0 = tl.load(src_d + a_off)
                        a1 = tl.load(src_d + PLANE + a_off)
                        a2 = tl.load(src_d + 2 * PLANE + a_off)
                        b0 = tl.load(w_l + w_off)
                        b1 = tl.load(w_l + WP * WP + w_off)
                        b2 = tl.load(w_l + 2 * WP * WP + w_off)
                        s0 = tl.dot(a0, b0, s0, out_dtype=tl.int32)
                        s1 = tl.dot(a0, b1, s1, out_dtype=tl.int32)
                        s1 = tl.dot(a1, b0, s1, out_dtype=tl.int32)
                        s2 = tl.dot(a0, b2, s2, out_dtype=tl.int32)
                        s2 = tl.dot(a1, b1, s2, out_dtype=tl.int32)
                        s2 = tl.dot(a2, b0, s2, out_dtype=tl.int32)
                        if DIGITS == 4:
                            a3 = tl.load(src_d + 3 * PLANE + a_off)
                            b3 = tl.load(w_l + 3 * WP * WP + w_off)
                            s3 = tl.dot(a0, b3, s3, out_dtype=tl.int32)
                            s3 = tl.dot(a1, b2, s3, out_dtype=tl.int32)
                            s3 = tl.dot(a2, b1, s3, out_dtype=tl.int32)
                            s3 = tl.dot(a3, b0, s3, out_dtype=tl.int32)
                    if DIGITS == 4:
                        tt = (s0.to(tl.int64) << 21) + (s1.to(tl.int64) << 14) + (s2.to(tl.int64) << 7) + s3.to(tl.int64)
                    else:
                        tt = (s0.to(tl.int64) << 14) + (s1.to(tl.int64) << 7) + s2.to(tl.int64)
                    ea = tl.load(src_e + rows * NSB + kb // BLOCK_N)
                    sc = ((ea[:, None] + ew[None, :] - SHIFT + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
                    acc = acc + tt.to(tl.float64) * sc  # the product is exact: an FMA gives the same bits
                h = tl.maximum(acc.to(tl.float32), 0.0)
                tl.store(hbuf + rows[:, None] * WP + cols[None, :], h)
                _store_digits(h, dst_d, dst_e, rows, cols, n0 // BLOCK_N, WP, ROWS, NSB, DIGITS)
            tl.debug_barrier()
            for c0 in range(0, WP, SUM_BLOCK):
                cs = c0 + tl.arange(0, SUM_BLOCK)
                x = tl.load(hbuf + rows[:, None] * WP + cs[None, :]).to(tl.float64)
                tl.store(o_tile + layer * stride_ol + cs, _pairwise_colsum(x, ROWS, SUM_BLOCK, LOG_ROWS))
                tl.store(o_tile + (depth + layer) * stride_ol + cs, _pairwise_colsum(x * x, ROWS, SUM_BLOCK, LOG_ROWS))
            tl.debug_barrier()


# --- wrappers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OzakiWeights:
    """Weights split once on the host (``ozaki_spec.split_weights`` per layer), padded, on the device."""

    digits: torch.Tensor  # (B, depth, DIGITS, WP, WP) int8
    exps: torch.Tensor  # (B, depth, WP) int32
    width: int


def prepare_weights(weights_batch, config: OzakiConfig, device) -> OzakiWeights:
    """(B, depth, w, w) float32 -> the kernel's weight digits and column exponents on ``device``."""
    w = np.asarray(weights_batch.cpu() if isinstance(weights_batch, torch.Tensor) else weights_batch)
    if w.ndim != 4 or w.shape[2] != w.shape[3] or w.dtype != np.float32:
        raise ValueError(f"weights_batch must be float32 (B, depth, width, width); got {w.shape} {w.dtype}.")
    n_mlps, depth, width, _ = w.shape
    wp = config.padded_width(width)
    dig = np.zeros((n_mlps, depth, config.digits, wp, wp), dtype=np.int8)
    exps = np.full((n_mlps, depth, wp), spec.EXP_FLOOR, dtype=np.int32)
    for b in range(n_mlps):
        for layer in range(depth):
            d, e = spec.split_weights(w[b, layer], config.digits)
            dig[b, layer, :, :width, :width] = d
            exps[b, layer, :width] = e
    return OzakiWeights(torch.as_tensor(dig, device=device), torch.as_tensor(exps, device=device), width)


def tile_sums_ozaki(weights, keys, n_first: int, n_tiles: int, n_end: int, *, config: OzakiConfig | None = None,
                    n_programs: int | None = None, device=None) -> torch.Tensor:
    """Per-tile fp64 sums ``(B, n_tiles, 2·depth, width)``, as ``triton_kernel.tile_sums_triton``'s.
    ``weights``: (B, depth, w, w) float32, or ``prepare_weights``' result (with the same ``config``)."""
    if not isinstance(weights, OzakiWeights):
        config = config or default_config(np.shape(weights)[2])
        weights = prepare_weights(weights, config, device or "cpu")
    width = weights.width
    config = config or default_config(width)
    device = weights.digits.device
    n_mlps, depth, n_dig, wp, _ = weights.digits.shape
    if wp != config.padded_width(width) or n_dig != config.digits:
        raise ValueError("weights were prepared with another OzakiConfig; pass the same config.")
    keys_t = _key_tensor(keys, device)
    config.check_tiles(n_first, n_tiles, keys_t.shape[0], n_mlps)
    programs = min(n_mlps * n_tiles, n_programs or _default_programs(device))
    out = torch.empty((n_mlps, n_tiles, 2 * depth, wp), dtype=torch.float64, device=device)
    hbuf = torch.empty((programs, config.rows, wp), dtype=torch.float32, device=device)
    dig = torch.empty((programs, 2, config.digits, config.rows, wp), dtype=torch.int8, device=device)
    exps = torch.empty((programs, 2, config.rows, wp // config.block_n), dtype=torch.int32, device=device)
    d, e = weights.digits, weights.exps
    _ozaki_tile_kernel[(programs,)](
        d, e, keys_t, out, hbuf, dig, exps, n_mlps, depth, width, n_tiles, n_first, n_end,
        d.stride(0), d.stride(1), e.stride(0), out.stride(0), out.stride(1), out.stride(2),
        DIGITS=config.digits, SHIFT=2 * spec.FIRST_BITS + spec.DIGIT_BITS * (config.digits - 1),
        **config.launch_args(width),
    )
    return out[..., :width]


def range_sums_ozaki(weights_batch, keys, block_range: tuple[int, int], n_samples: int, *,
                     config: OzakiConfig | None = None, block_size: int = spec.ref.BLOCK_SIZE,
                     n_programs: int | None = None, device=None, on_blocks=None):
    """Each MLP's ``LayerSums`` over the aligned ``block_range``, as ``triton_kernel.range_sums_triton``."""
    n_mlps, depth, width, _ = np.shape(weights_batch)
    config = config or default_config(width)
    device = device or (weights_batch.device if isinstance(weights_batch, torch.Tensor) else "cpu")
    prepared = prepare_weights(weights_batch, config, device)

    def tiles(start, n_tiles, end):
        return tile_sums_ozaki(prepared, keys, start, n_tiles, end, config=config, n_programs=n_programs)

    return range_sums_of(tiles, (n_mlps, depth, width), config.rows, block_range, n_samples, block_size, on_blocks)


def ozaki_available(device, width: int) -> tuple[bool, str]:
    """Whether the integer kernel serves ``width`` on ``device`` (int8 tensor cores: Ampere and later)."""
    ok, why = fused_available(device, min(width, MAX_FUSED_WIDTH))
    if not ok:
        return ok, why.replace("the fused kernel", "the integer kernel")
    if width > MAX_OZAKI_WIDTH:
        return False, f"width {width} > {MAX_OZAKI_WIDTH}, the integer kernel's bound"
    return True, "ok"


def range_sums_for(config):
    """The ``range_sums`` of the Triton kernel ``config`` configures: the integer kernel for an
    ``OzakiConfig``, else the fused kernel (``triton_kernel.range_sums_triton``). Same arguments."""
    if isinstance(config, OzakiConfig):
        return range_sums_ozaki
    return range_sums_triton
