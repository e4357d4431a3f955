"""The fused GPU kernel for the ``philox`` sampler: draw, run every layer and sum one tile per program.

One program owns a *tile* (``ROWS`` consecutive samples of one MLP): it draws the inputs in-kernel
(Philox4x32-10 and the float32 Box-Muller of ``spec.py``), runs ``h = relu(h @ W_l)`` with
``tl.dot`` in one of five precisions (``PRECISION``: ``ieee``, ``3xtf32``, ``4xtf32``, ``3xfp16``,
``4xfp16``; ``tests/precision_emulation.py`` is the numpy twin, with the tensor cores' accumulator model;
the four splits are withdrawn: they fail the precision gate under that model) and writes only fp64 column sums, summed
as the reference's pairwise tree, so the host combines tiles into blocks and ranges bit for bit.
Design, scratch slabs and precision classes: docs/gpu-kernel.md.

Import this module only where triton is wanted. Run on a CPU with ``TRITON_INTERPRET=1`` set before
the import (the interpreter is slow: tiny shapes only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from whestbench.compute.philox import spec as ref
from whestbench.compute.philox.tiles import TileConfig, pow2_at_least
from whestbench.compute.precision import DEFAULT_PRECISION, FP16_LO_SCALE, PRECISIONS, check_offered
from whestbench.compute.stats import LayerSums

KERNEL_NAME = "triton-fused-philox"
KERNEL_VERSION = "1"
MAX_FUSED_WIDTH = 1024  # widest MLP the fused path is selected for (scratch per program grows with it)
MIN_CAPABILITY = (8, 0)  # tf32 / fp16 tensor cores with fp32 accumulation (Ampere and later)
_PRECISION_CODE = {name: code for code, name in enumerate(PRECISIONS)}
_TILE_SUMS_BUDGET = 256 << 20  # bytes of per-tile fp64 sums held on the device per launch


# --- kernel configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelConfig(TileConfig):
    """Compile-time shape of the fused kernel. ``identity()`` goes into a bake's metadata.

    ``precision`` and ``block_k`` fix each output's fp32 arithmetic. ``rows`` and ``block_n`` should
    not (a row's dot products do not depend on the tile's other rows or columns), but under the
    interpreter numpy's BLAS picks kernels by shape and they do, so they are part of the identity
    until a GPU run shows otherwise (``test_speed_knobs_never_change_a_byte_on_a_gpu``). The grid,
    ``num_warps``, ``num_stages`` and the MLPs per launch never change a byte. All sizes are powers
    of two, ``>= 16`` where they feed ``tl.dot``.
    """

    precision: str = DEFAULT_PRECISION
    """One of ``PRECISIONS``: see the module docstring."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("rows", "block_n", "block_k"):
            if getattr(self, name) < 16:
                raise ValueError(f"KernelConfig.{name} feeds tl.dot and must be >= 16; got {getattr(self, name)}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"KernelConfig.precision must be one of {PRECISIONS}; got {self.precision!r}.")

    def identity(self) -> dict:
        """What determines the numbers (besides the device's tensor-core generation): for metadata."""
        return {
            "kernel": KERNEL_NAME,
            "version": KERNEL_VERSION,
            "precision": self.precision,
            "rows": self.rows,
            "block_n": self.block_n,
            "block_k": self.block_k,
        }


def default_config(width: int, precision: str = DEFAULT_PRECISION) -> KernelConfig:
    """A starting configuration for ``width``; the block sizes are to be tuned on the GPU (see
    ``benchmarks/bench_gpu.py --sweep``). Small widths get small blocks so no work is padding.
    A withdrawn split (``precision.WITHDRAWN_PRECISIONS``) is a ValueError naming the replacement; the
    tests and benchmarks measure one with ``config_for``, to show why it was withdrawn."""
    return config_for(width, check_offered(precision))


def config_for(width: int, precision: str) -> KernelConfig:
    """``default_config``'s blocks for any of ``PRECISIONS``, the withdrawn splits included (measurement only)."""
    wp2 = pow2_at_least(max(width, 16))
    # 128 columns keep the fp16 splits' two accumulators (and 4xtf32's extra part) free of spills (ptxas, sm_90).
    block_n = min(wp2, 256 if precision == "3xtf32" else 128)
    return KernelConfig(
        rows=128,
        block_n=block_n,
        block_k=min(wp2, 32),
        group_block=min(wp2 // 4, 16),
        sum_block=min(wp2, 32),
        precision=precision,
        num_warps=8 if block_n >= 128 else 4,
        num_stages=2,
    )


# --- in-kernel building blocks -------------------------------------------------------------------


@triton.jit
def _philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 tensors (broadcastable) with key ``(k0, k1)``: four uint32 words.

    Round: ``(hi(M1*c2)^c1^k0, lo(M1*c2), hi(M0*c0)^c3^k1, lo(M0*c0))``, then the key moves by the
    Weyl constants -- ``philox.philox4x32`` step for step, in 32-bit arithmetic that wraps.
    """
    for _ in tl.static_range(10):
        hi0 = tl.umulhi(c0, 0xD2511F53)
        lo0 = c0 * 0xD2511F53
        hi1 = tl.umulhi(c2, 0xCD9E8D57)
        lo1 = c2 * 0xCD9E8D57
        c0 = hi1 ^ c1 ^ k0
        c1 = lo1
        c2 = hi0 ^ c3 ^ k1
        c3 = lo0
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


@triton.jit
def _box_muller(wa, wb):
    """Two uint32 word tensors -> ``(r cos t, r sin t)`` float32, the reference's float stage.

    ``u = w * 2**-32 + 2**-33`` is exact up to one rounding (an FMA gives the same bits, the
    product being exact); ``sqrt_rn`` because ``tl.sqrt`` is an approximation on NVIDIA GPUs;
    ``log``/``cos``/``sin`` are libdevice's (a few ulp from numpy's).
    """
    u1 = wa.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    u2 = wb.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    r = tl.sqrt_rn(-2.0 * tl.log(u1))
    theta = 6.2831854820251465 * u2  # philox.TWO_PI, the float32 nearest 2*pi
    return r * tl.cos(theta), r * tl.sin(theta)


@triton.jit
def _philox_block(n, g, k0, k1):
    """Words of samples ``n`` (R, 1) int64 x groups ``g`` (1, G) int32: four (R, G) uint32 tensors."""
    c0 = (n & 0xFFFFFFFF).to(tl.uint32)
    c1 = (n >> 32).to(tl.uint32)
    c2 = g.to(tl.uint32)
    c3 = tl.zeros_like(c2)
    return _philox4x32(c0, c1, c2, c3, k0, k1)


@triton.jit
def _round_tf32(x):
    """float32 -> the nearest tf32 value (10 mantissa bits, ties to even), still stored as float32."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _pairwise_colsum(x, ROWS: tl.constexpr, COLS: tl.constexpr, LOG_ROWS: tl.constexpr):
    """(ROWS, COLS) -> (COLS,): the reference's pairwise tree over rows, level by level.

    ``reshape`` to ``(ROWS/2, 2, COLS)`` pairs rows ``2i`` and ``2i+1``; a sum over two values is
    one add (commutative, hence the same bits whatever order the reduction picks).
    """
    for lvl in tl.static_range(LOG_ROWS):
        x = tl.sum(tl.reshape(x, (ROWS >> (lvl + 1), 2, COLS)), axis=1)
    return tl.reshape(x, (COLS,))


@triton.jit
def _draw_inputs(buf, key, n_tile, n_end, width, WP: tl.constexpr, ROWS: tl.constexpr, GROUP_BLOCK: tl.constexpr):
    """Both kernels' step 1: ``buf`` (ROWS, WP) float32 <- the inputs of samples ``n_tile ..`` under the
    Philox key at ``key`` (two int64); neuron 4g+q of sample n is Box-Muller output q of group g's words,
    zero at columns >= ``width`` and samples >= ``n_end``."""
    rows = tl.arange(0, ROWS)
    k0 = tl.load(key).to(tl.uint32)
    k1 = tl.load(key + 1).to(tl.uint32)
    n = n_tile + rows  # (ROWS,) int64 sample indices
    live = n < n_end
    for g0 in range(0, WP // 4, GROUP_BLOCK):
        g = g0 + tl.arange(0, GROUP_BLOCK)
        w0, w1, w2, w3 = _philox_block(n[:, None], g[None, :], k0, k1)  # 4 x (ROWS, GROUP_BLOCK)
        z0, z1 = _box_muller(w0, w1)
        z2, z3 = _box_muller(w2, w3)
        col = 4 * g[None, :]
        dst = buf + rows[:, None] * WP + col
        tl.store(dst, tl.where(live[:, None] & (col < width), z0, 0.0))
        tl.store(dst + 1, tl.where(live[:, None] & (col + 1 < width), z1, 0.0))
        tl.store(dst + 2, tl.where(live[:, None] & (col + 2 < width), z2, 0.0))
        tl.store(dst + 3, tl.where(live[:, None] & (col + 3 < width), z3, 0.0))


# --- the fused kernel ----------------------------------------------------------------------------


@triton.jit
def _fused_mlp_tile_kernel(
    # pointers
    w_ptr,  # (B, depth, WP, WP) float32, zero-padded weights, indexed (input, output)
    key_ptr,  # (B, 2) int64: each MLP's Philox key (k0, k1), uint32 values
    out_ptr,  # (B, n_tiles, 2 * depth, WP) float64: per-tile column sums of each layer, then of its squares
    scratch_ptr,  # (n_programs, 2, ROWS, WP) float32: this program's ping-pong activation buffers
    # sizes
    n_mlps,
    depth,
    width,  # real width: input columns >= width are zero
    n_tiles,  # tiles per MLP in this launch
    n_first,  # int64: first sample of tile 0 (a multiple of ROWS)
    n_end,  # int64: samples >= n_end are padding (zero inputs)
    # strides (elements)
    stride_wb,
    stride_wl,
    stride_ob,
    stride_ot,
    stride_ol,
    # meta-parameters
    WP: tl.constexpr,
    ROWS: tl.constexpr,
    LOG_ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_BLOCK: tl.constexpr,
    SUM_BLOCK: tl.constexpr,
    PRECISION: tl.constexpr,  # 0 ieee, 1 3xtf32, 2 4xtf32, 3 3xfp16, 4 4xfp16
    FP16_SCALE: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    rows = tl.arange(0, ROWS)
    buf_a = scratch_ptr + pid.to(tl.int64) * (2 * ROWS * WP)
    buf_b = buf_a + ROWS * WP
    # Work items run MLP-major, so the programs in flight share one MLP's weights in L2.
    for item in range(pid, n_mlps * n_tiles, n_programs):
        b = item // n_tiles
        t = item % n_tiles
        tl.debug_barrier()  # the previous item's reads of buf_a are done before it is overwritten
        _draw_inputs(buf_a, key_ptr + 2 * b, n_first + t.to(tl.int64) * ROWS, n_end, width, WP, ROWS, GROUP_BLOCK)
        tl.debug_barrier()

        # 2. layers: src holds h_{l-1}, dst receives h_l; then the fp64 tree sums of h_l.
        src = buf_a
        dst = buf_b
        w_mlp = w_ptr + b.to(tl.int64) * stride_wb
        o_tile = out_ptr + b.to(tl.int64) * stride_ob + t.to(tl.int64) * stride_ot
        for layer in range(depth):
            w_layer = w_mlp + layer * stride_wl
            for n0 in range(0, WP, BLOCK_N):
                cols = n0 + tl.arange(0, BLOCK_N)
                acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
                cor = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)  # the fp16 splits' scaled cross terms
                for kb in range(0, WP, BLOCK_K):
                    ks = kb + tl.arange(0, BLOCK_K)
                    a = tl.load(src + rows[:, None] * WP + ks[None, :])  # (ROWS, BLOCK_K)
                    w = tl.load(w_layer + ks[:, None] * WP + cols[None, :])  # (BLOCK_K, BLOCK_N)
                    if PRECISION == 0:
                        acc = tl.dot(a, w, acc, input_precision="ieee")
                    elif PRECISION <= 2:  # 3xtf32, 4xtf32
                        a_hi = _round_tf32(a)
                        a_lo = _round_tf32(a - a_hi)
                        w_hi = _round_tf32(w)
                        w_mid = _round_tf32(w - w_hi)
                        acc = tl.dot(a_lo, w_hi, acc, input_precision="tf32")
                        if PRECISION == 2:  # the weights' third part: w is then exact
                            w_lo = _round_tf32((w - w_hi) - w_mid)
                            acc = tl.dot(a_hi, w_lo, acc, input_precision="tf32")
                        acc = tl.dot(a_hi, w_mid, acc, input_precision="tf32")
                        acc = tl.dot(a_hi, w_hi, acc, input_precision="tf32")
                    else:  # 3xfp16, 4xfp16: low parts scaled by FP16_SCALE, summed in `cor`
                        a_hi = a.to(tl.float16)
                        a_lo = ((a - a_hi.to(tl.float32)) * FP16_SCALE).to(tl.float16)
                        w_hi = w.to(tl.float16)
                        w_res = w - w_hi.to(tl.float32)  # exact
                        w_mid = (w_res * FP16_SCALE).to(tl.float16)
                        cor = tl.dot(a_lo, w_hi, cor)
                        if PRECISION == 4:
                            w_lo = ((w_res - w_mid.to(tl.float32) * (1.0 / FP16_SCALE)) * FP16_SCALE).to(tl.float16)
                            cor = tl.dot(a_hi, w_lo, cor)
                        cor = tl.dot(a_hi, w_mid, cor)
                        acc = tl.dot(a_hi, w_hi, acc)
                if PRECISION >= 3:
                    acc = acc + cor * (1.0 / FP16_SCALE)  # a power of two: exact scaling
                h = tl.maximum(acc, 0.0)  # (ROWS, BLOCK_N) post-ReLU
                tl.store(dst + rows[:, None] * WP + cols[None, :], h)
            tl.debug_barrier()
            for c0 in range(0, WP, SUM_BLOCK):
                cs = c0 + tl.arange(0, SUM_BLOCK)
                x = tl.load(dst + rows[:, None] * WP + cs[None, :]).to(tl.float64)  # exact
                tl.store(o_tile + layer * stride_ol + cs, _pairwise_colsum(x, ROWS, SUM_BLOCK, LOG_ROWS))
                # squares of float32 values are exact in fp64
                tl.store(o_tile + (depth + layer) * stride_ol + cs, _pairwise_colsum(x * x, ROWS, SUM_BLOCK, LOG_ROWS))
            src, dst = dst, src


# --- wrappers ------------------------------------------------------------------------------------


def _key_tensor(keys, device) -> torch.Tensor:
    k = np.asarray(keys, dtype=np.uint32).reshape(-1, 2).astype(np.int64)
    return torch.as_tensor(k, device=device)


def _default_programs(device: torch.device) -> int:
    """Persistent grid size: one program per SM. The default configurations use 186-254 registers x
    256 threads (ptxas, sm_90), the whole register file, so a second program per SM would only wait;
    and the slabs of resident programs (32-64 MB) then fit in L2."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def pad_weights(weights_batch, config: KernelConfig, device) -> torch.Tensor:
    """(B, depth, w, w) float32 -> (B, depth, WP, WP) zero-padded on ``device``: the kernel's weight layout.

    Zero rows and columns make every load in the kernel unmasked and keep padded neurons at zero.
    """
    w_t = torch.as_tensor(weights_batch, device=device)
    if w_t.dim() != 4 or w_t.shape[2] != w_t.shape[3] or w_t.dtype != torch.float32:
        raise ValueError(f"weights_batch must be float32 (B, depth, width, width); got {tuple(w_t.shape)} {w_t.dtype}.")
    n_mlps, depth, width, _ = w_t.shape
    wp = config.padded_width(width)
    if wp == width:
        return w_t.contiguous()
    padded = torch.zeros((n_mlps, depth, wp, wp), dtype=torch.float32, device=device)
    padded[:, :, :width, :width] = w_t
    return padded


def tile_sums_triton(
    weights_batch,
    keys,
    n_first: int,
    n_tiles: int,
    n_end: int,
    *,
    width: int | None = None,
    config: KernelConfig | None = None,
    n_programs: int | None = None,
    device=None,
) -> torch.Tensor:
    """Per-tile fp64 sums: ``(B, n_tiles, 2·depth, width)``; tile ``t`` covers samples
    ``[n_first + t*rows, n_first + (t+1)*rows)``, samples ``>= n_end`` counting as zero rows.

    ``weights_batch``: (B, depth, w, w) float32, or already ``pad_weights``-ed (then pass ``width``).
    ``keys``: (B, 2) uint32. Row ``[b, t, l]`` is the pairwise tree of layer ``l``'s post-ReLU
    activations over the tile's rows; row ``depth`` the tree of the last layer's squares.
    ``n_programs`` (the persistent grid) changes speed only.
    """
    w_t = torch.as_tensor(weights_batch) if device is None else torch.as_tensor(weights_batch, device=device)
    device = w_t.device
    n_mlps, depth, wdim, _ = w_t.shape
    width = wdim if width is None else int(width)
    config = config or default_config(width)
    wp = config.padded_width(width)
    if wdim != wp:
        w_t = pad_weights(w_t, config, device)
    keys_t = _key_tensor(keys, device)
    config.check_tiles(n_first, n_tiles, keys_t.shape[0], n_mlps)
    programs = min(n_mlps * n_tiles, n_programs or _default_programs(device))
    out = torch.empty((n_mlps, n_tiles, 2 * depth, wp), dtype=torch.float64, device=device)
    scratch = torch.empty((programs, 2, config.rows, wp), dtype=torch.float32, device=device)
    _fused_mlp_tile_kernel[(programs,)](
        w_t, keys_t, out, scratch, n_mlps, depth, width, n_tiles, n_first, n_end,
        w_t.stride(0), w_t.stride(1), out.stride(0), out.stride(1), out.stride(2),
        PRECISION=_PRECISION_CODE[config.precision], FP16_SCALE=FP16_LO_SCALE, **config.launch_args(width),
    )
    return out[..., :width]


def _tree_tiles(x: torch.Tensor) -> torch.Tensor:
    """(B, T, ...) -> (B, ...): the pairwise tree over tiles, padded with zero tiles to a power of two
    (a zero subtree adds nothing, so this is the reference's tree over the tiles' samples)."""
    t = x.shape[1]
    size = pow2_at_least(t)
    if size != t:
        x = torch.cat([x, x.new_zeros((x.shape[0], size - t) + tuple(x.shape[2:]))], dim=1)
    while x.shape[1] > 1:
        x = x[:, 0::2] + x[:, 1::2]
    return x[:, 0]


def range_sums_triton(
    weights_batch,
    keys,
    block_range: tuple[int, int],
    n_samples: int,
    *,
    config: KernelConfig | None = None,
    block_size: int = ref.BLOCK_SIZE,
    n_programs: int | None = None,
    device=None,
    on_blocks=None,
) -> list[LayerSums]:
    """Each MLP's sums over the aligned ``block_range`` of canonical blocks: ``B`` ``LayerSums``.

    The same subtree as the tests' numpy ``sample_layer_sums_philox(..., block_range=...)`` computes, up to the
    matmul's arithmetic: tiles -> blocks by the pairwise tree on the device, blocks -> range by
    ``PairwiseStack``. Launches cover several blocks at a time (bounded device memory);
    ``on_blocks(n)`` is called after each launch with the number of blocks it finished.
    """
    w_t = torch.as_tensor(weights_batch) if device is None else torch.as_tensor(weights_batch, device=device)
    n_mlps, depth, width, _ = w_t.shape
    config = config or default_config(width)
    w_p = pad_weights(w_t, config, w_t.device)

    def tiles(start, n_tiles, end):
        return tile_sums_triton(w_p, keys, start, n_tiles, end, width=width, config=config, n_programs=n_programs)

    return range_sums_of(tiles, (n_mlps, depth, width), config.rows, block_range, n_samples, block_size, on_blocks)


def range_sums_of(tiles, shape, rows: int, block_range, n_samples: int, block_size: int, on_blocks=None):
    """``range_sums_triton``'s combination for any kernel whose ``tiles(start, n_tiles, end)`` returns
    per-tile sums ``(B, n_tiles, 2·depth, width)`` of ``rows``-sample tiles (``shape = (B, depth, width)``)."""
    n_mlps, depth, width = shape
    if rows > block_size:
        raise ValueError(f"config.rows={rows} exceeds block_size={block_size}; tiles must lie inside a block.")
    b0, b1 = ref.check_block_range(block_range, n_samples, block_size)
    tiles_per_block = block_size // rows
    per_block_bytes = n_mlps * tiles_per_block * 2 * depth * width * 8
    blocks_per_launch = max(1, _TILE_SUMS_BUDGET // per_block_bytes)
    stack = ref.PairwiseStack()
    for lb0 in range(b0, b1, blocks_per_launch):
        lb1 = min(lb0 + blocks_per_launch, b1)
        start, end = lb0 * block_size, min(lb1 * block_size, n_samples)
        n_tiles = -(-(end - start) // rows)
        tiles_sums = tiles(start, n_tiles, end)  # (B, T, 2*depth, w)
        full = (lb1 - lb0) * tiles_per_block
        if n_tiles < full:  # the data's last block is ragged: its missing tiles are zero subtrees
            tiles_sums = torch.cat([tiles_sums, tiles_sums.new_zeros((n_mlps, full - n_tiles, 2 * depth, width))], dim=1)
        per_block = tiles_sums.reshape(n_mlps * (lb1 - lb0), tiles_per_block, 2 * depth, width)
        blocks = _tree_tiles(per_block).reshape(n_mlps, lb1 - lb0, 2 * depth, width)
        for i, blk in enumerate(range(lb0, lb1)):
            s, e = ref.block_bounds(blk, n_samples, block_size)
            stack.push(blocks[:, i], ref.level_of(e - s))
        if on_blocks is not None:
            on_blocks(lb1 - lb0)
    total = stack.value().cpu().numpy() + 0.0  # the reference's final +0.0
    count = min(b1 * block_size, n_samples) - b0 * block_size
    return [ref.unpack(total[b], count, depth) for b in range(n_mlps)]


def fused_available(device, width: int) -> tuple[bool, str]:
    """Whether the fused kernel serves ``width`` on ``device``, and if not, why (for a log line)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"the fused kernel runs on CUDA devices; got {device}"
    if not torch.cuda.is_available():
        return False, "CUDA is not available"
    cap = torch.cuda.get_device_capability(device)
    if cap < MIN_CAPABILITY:
        return False, f"compute capability {cap[0]}.{cap[1]} < {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}"
    if width > MAX_FUSED_WIDTH:
        return False, f"width {width} > {MAX_FUSED_WIDTH}, the fused kernel's bound"
    return True, "ok"
