"""The plain CUDA path of the ``philox`` sampler: one sampler launch, fixed-shape cuBLAS GEMMs, one ReLU+tree launch per layer.

Per chunk of ``rows`` samples (``gemm_rows``: a power of two per width, whatever ``--chunk-size`` or
``--mlps-per-batch`` say) and ``B`` MLPs: one Triton launch draws every MLP's inputs into a
preallocated ``(B, rows, width)`` float32 buffer (``spec.py``'s words bit for bit; rows past the data
are zero rows); per layer and MLP one fp32 ``torch.mm`` of that one shape (TF32 off, a fixed cuBLAS
workspace); per layer one Triton launch does ReLU in place and the fp64 pairwise trees of ``h``, ``h²``
(and layer 2's ``z²``) over tiles of ``TILE_ROWS`` rows; per chunk one launch finishes each batch's
tree; with ``per_block``, each block is summed over its batches on the device before the one copy to
the host. Each step and its memory traffic: docs/gpu.md, "The plain CUDA path".

Tiles and batches are aligned subtrees of ``spec.py``'s tree, so a batch's sums are the
specification's up to the GEMM's arithmetic, and no setting but ``rows`` (in ``identity``) reaches a
GEMM. Nothing waits for the device until a call's blocks are done (``batches_host``). Launch sites go
through ``_launch``, which a counting observer (``observe``: ``benchmarks/gpu_traffic.py``) sees with
the bytes each kernel reads and writes.

The code runs on CUDA compiled; on CPU tensors under ``TRITON_INTERPRET=1`` (the tests); on ``meta``
tensors with an observer that skips the kernels (the traffic count). Import it only where triton is
wanted (``TRITON_INTERPRET`` is read at import).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator

import numpy as np
import torch
import triton
import triton.language as tl

from whestbench.compute.philox import spec as ref
from whestbench.compute.philox.triton_kernel import _box_muller, _key_tensor, _pairwise_colsum, _philox_block

ENGINE = "cuda"
VERSION = "1"
GEMM_ELEMENTS = 1 << 22  # rows x width of every GEMM (rows a power of two in [MIN_ROWS, BLOCK_SIZE])
MIN_ROWS = ref.BATCH  # a chunk holds whole batches
CUBLAS_WORKSPACE = 32 << 20  # bytes: cuBLAS picks its kernels knowing the workspace, so it is fixed
TILE_ROWS = 128  # rows per program of the per-layer kernel: a subtree, so speed only
TILE_COLS = 32  # columns per program of the per-layer and finishing kernels
SAMPLER_ROWS = 32  # samples per sampler program
SAMPLER_GROUPS = 16  # Philox groups (4 neurons each) per step of a sampler program
OUT_BUDGET = 256 << 20  # bytes of per-batch sums one call holds on the device


# --- what a launch touches, for an observer ----------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One Triton launch: its kernel and the global-memory bytes it reads and writes."""

    kernel: str
    reads: int
    writes: int


Observer = Callable[[Launch], ContextManager[bool]]
"""Called at every Triton launch of this engine; the context it returns is entered around the launch
and yields whether to run the kernel (False: count it only, as on ``meta`` tensors)."""
_observers: list[Observer] = []


@contextlib.contextmanager
def observe(observer: Observer) -> Iterator[None]:
    """Every Triton launch of this module goes through ``observer`` while the context lasts."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


def _launch(kernel, grid: tuple[int, ...], launch: Launch, *args, **meta) -> None:
    """The one place this engine launches a Triton kernel: ``kernel[grid](*args, **meta)``, declared
    as ``launch`` to an observer when one is set."""
    if not _observers:
        kernel[grid](*args, **meta)
        return
    with _observers[-1](launch) as run:
        if run:
            kernel[grid](*args, **meta)


# --- kernels -------------------------------------------------------------------------------------------


@triton.jit
def _sampler_kernel(
    key_ptr,  # (B, 2) int64: each MLP's Philox key, uint32 values
    out_ptr,  # (B, rows, cols): float32 normals, or int32 (uint32 bits) words
    n0,  # int64: the sample of row 0
    valid,  # rows < valid are samples n0 + row; rows >= valid are zero rows
    rows,
    cols,  # columns written (the width; all 4·G words for WORDS)
    stride_b,
    ROWS: tl.constexpr,
    GROUPS: tl.constexpr,
    WORDS: tl.constexpr,
):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    b = tl.program_id(1)
    k0 = tl.load(key_ptr + 2 * b).to(tl.uint32)
    k1 = tl.load(key_ptr + 2 * b + 1).to(tl.uint32)
    n = n0 + r.to(tl.int64)
    live = (r < valid)[:, None]
    inside = (r < rows)[:, None]
    row_ptr = out_ptr + b.to(tl.int64) * stride_b + r[:, None].to(tl.int64) * cols
    for g0 in range(0, tl.cdiv(cols, 4), GROUPS):
        g = g0 + tl.arange(0, GROUPS)
        w0, w1, w2, w3 = _philox_block(n[:, None], g[None, :], k0, k1)  # 4 x (ROWS, GROUPS) uint32
        if WORDS:
            v0 = w0.to(tl.int32, bitcast=True)
            v1 = w1.to(tl.int32, bitcast=True)
            v2 = w2.to(tl.int32, bitcast=True)
            v3 = w3.to(tl.int32, bitcast=True)
        else:
            v0, v1 = _box_muller(w0, w1)
            v2, v3 = _box_muller(w2, w3)
        # neuron 4g + q is output q of group g: interleave to (ROWS, 4·GROUPS) for one contiguous store
        v = tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), (ROWS, 4 * GROUPS))
        col = 4 * g0 + tl.arange(0, 4 * GROUPS)
        tl.store(row_ptr + col[None, :], tl.where(live, v, 0), mask=inside & (col < cols)[None, :])


@triton.jit
def _relu_tree_kernel(
    y_ptr,  # (B, rows, width) float32: one layer's GEMM outputs, made post-ReLU in place
    part_ptr,  # (B, tiles, K, width) float64: per-tile tree sums, K = 2·depth + 1 rows
    width,
    stride_yb,
    stride_pb,
    stride_pt,
    sum_row,  # the layer's row of sums; its squares go to sq_row, layer 2's z² to z2_row
    sq_row,
    z2_row,
    Z2: tl.constexpr,
    TR: tl.constexpr,
    LOG_TR: tl.constexpr,
    TC: tl.constexpr,
):
    t = tl.program_id(0)
    b = tl.program_id(2)
    rows = t * TR + tl.arange(0, TR)
    cols = tl.program_id(1) * TC + tl.arange(0, TC)
    in_width = cols < width
    ptr = y_ptr + b.to(tl.int64) * stride_yb + rows[:, None].to(tl.int64) * width + cols[None, :]
    z = tl.load(ptr, mask=in_width[None, :], other=0.0)
    out = part_ptr + b.to(tl.int64) * stride_pb + t.to(tl.int64) * stride_pt + cols
    if Z2:
        zd = z.to(tl.float64)  # exact; its square too
        tl.store(out + z2_row * width, _pairwise_colsum(zd * zd, TR, TC, LOG_TR), mask=in_width)
    h = tl.maximum(z, 0.0)
    tl.store(ptr, h, mask=in_width[None, :])
    hd = h.to(tl.float64)
    tl.store(out + sum_row * width, _pairwise_colsum(hd, TR, TC, LOG_TR), mask=in_width)
    tl.store(out + sq_row * width, _pairwise_colsum(hd * hd, TR, TC, LOG_TR), mask=in_width)


@triton.jit
def _batch_tree_kernel(
    part_ptr,  # (B, tiles, K, width) float64 per-tile sums
    out_ptr,  # (B, batches, K, width) float64: batch sums
    width,
    n_rows,  # K
    stride_pb,
    stride_pt,
    stride_ob,
    stride_on,
    batch0,  # the output's batch of this chunk's first batch
    TPB: tl.constexpr,  # tiles per batch
    LOG_TPB: tl.constexpr,
    TC: tl.constexpr,
):
    g = tl.program_id(0)
    b = tl.program_id(2)
    tiles = g * TPB + tl.arange(0, TPB)
    cols = tl.program_id(1) * TC + tl.arange(0, TC)
    in_width = cols < width
    src = part_ptr + b.to(tl.int64) * stride_pb + tiles[:, None].to(tl.int64) * stride_pt + cols[None, :]
    dst = out_ptr + b.to(tl.int64) * stride_ob + (batch0 + g).to(tl.int64) * stride_on + cols
    for k in range(n_rows):
        s = _pairwise_colsum(tl.load(src + k * width, mask=in_width[None, :], other=0.0), TPB, TC, LOG_TPB)
        tl.store(dst + k * width, s, mask=in_width)


# --- the engine ------------------------------------------------------------------------------------------


def gemm_rows(width: int, block_size: int = ref.BLOCK_SIZE) -> int:
    """The row count of every GEMM at ``width``: ``GEMM_ELEMENTS / width`` rounded down to a power of
    two, within ``[MIN_ROWS, block_size]`` (16,384 at width 256, 4,096 at 1,024). A function of the
    width alone: part of the kernel identity, never of a speed knob."""
    r = 1 << (max(1, GEMM_ELEMENTS // max(1, width)).bit_length() - 1)
    return max(min(r, block_size), min(MIN_ROWS, block_size))


def _log2(x: int) -> int:
    return x.bit_length() - 1


@contextlib.contextmanager
def fp32_gemms() -> Iterator[None]:
    """TF32 off (and float32 matmul precision "highest") while the engine's GEMMs are queued."""
    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def on_device(device: torch.device):
    """Make ``device`` the current CUDA device (a no-op elsewhere): Triton launches on the current device,
    and a distributed rank's GPU (``cuda:<local rank>``) need not be it."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def fix_cublas_workspace() -> int | None:
    """Give cuBLAS its fixed workspace (``CUBLAS_WORKSPACE``) and return the size it has. A torch
    without ``torch.backends.cuda.cublas_workspace_size`` reads ``CUBLAS_WORKSPACE_CONFIG`` when it makes
    its cuBLAS handle: set here unless the user set it, and None returned (the metadata records the
    variable)."""
    size_of = getattr(torch.backends.cuda, "cublas_workspace_size", None)
    if size_of is None:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", f":{CUBLAS_WORKSPACE >> 13}:8")  # 8 buffers of 4 MiB
        return None
    if size_of() != CUBLAS_WORKSPACE:
        size_of(CUBLAS_WORKSPACE)
    return int(size_of())


def _sampler(out: torch.Tensor, keys: torch.Tensor, n0: int, valid: int, cols: int, words: bool,
             program_rows: int | None = None) -> None:
    """Draw ``out`` (B, rows, cols): row r of MLP b = sample ``n0 + r`` (words or normals), zero past
    ``valid``. ``program_rows`` (default ``SAMPLER_ROWS``): speed only."""
    n_mlps, rows = out.shape[0], out.shape[1]
    program_rows = program_rows or SAMPLER_ROWS
    launch = Launch("sampler", keys.numel() * keys.element_size(), out.numel() * out.element_size())
    with on_device(out.device):
        _launch(_sampler_kernel, (triton.cdiv(rows, program_rows), n_mlps), launch, keys, out, n0, valid, rows, cols,
                out.stride(0), ROWS=program_rows, GROUPS=SAMPLER_GROUPS, WORDS=words)


def sampler_words(key: tuple[int, int], n0: int, n1: int, width: int, device) -> np.ndarray:
    """The engine's integer stage alone: ``(n1-n0, 4·n_groups(width))`` uint32, as ``spec.philox_words``."""
    cols = 4 * ref.n_groups(width)
    out = torch.empty((1, n1 - n0, cols), dtype=torch.int32, device=device)
    _sampler(out, _key_tensor([key], device), n0, n1 - n0, cols, True)
    return out[0].cpu().numpy().view(np.uint32)


def sampler_normals(key: tuple[int, int], n0: int, n1: int, width: int, device) -> np.ndarray:
    """The engine's inputs alone: ``(n1-n0, width)`` float32, within a few ulp of ``spec.normals``."""
    out = torch.empty((1, n1 - n0, width), dtype=torch.float32, device=device)
    _sampler(out, _key_tensor([key], device), n0, n1 - n0, width, False)
    return out[0].cpu().numpy()


class CudaEngine:
    """``B`` MLPs' batch sums over ranges of canonical blocks, with every buffer allocated once.

    ``weights_batch``: (B, depth, width, width) float32 (numpy or a tensor; moved to ``device``),
    ``keys``: (B, 2) uint32. ``rows``: the GEMM row count (default ``gemm_rows(width)``; it is in the
    kernel identity). ``z2sq=False`` leaves the control-variate row (layer 2's squared
    pre-activations) zero. ``tile_rows``, ``tile_cols`` and ``sampler_rows`` (powers of two; defaults
    ``TILE_ROWS``, ``TILE_COLS``, ``SAMPLER_ROWS``) change speed only.
    """

    def __init__(self, weights_batch, keys, device, *, rows: int | None = None, block_size: int = ref.BLOCK_SIZE,
                 z2sq: bool = True, tile_rows: int | None = None, tile_cols: int | None = None,
                 sampler_rows: int | None = None) -> None:
        self.device = torch.device(device)
        w = torch.as_tensor(weights_batch, device=self.device)
        if w.dim() != 4 or w.shape[2] != w.shape[3] or w.dtype != torch.float32:
            raise ValueError(f"weights_batch must be float32 (B, depth, width, width); got {tuple(w.shape)} {w.dtype}.")
        self.n_mlps, self.depth, self.width, _ = (int(v) for v in w.shape)
        keys = np.asarray(keys, dtype=np.uint32).reshape(-1, 2)
        if len(keys) != self.n_mlps:
            raise ValueError(f"keys has {len(keys)} rows but weights_batch has {self.n_mlps} MLPs; pass one key per MLP.")
        ref._check_block_size(block_size)
        self.block_size = block_size
        self.batch = min(ref.BATCH, block_size)
        self.rows = gemm_rows(self.width, block_size) if rows is None else int(rows)
        if self.rows <= 0 or self.rows & (self.rows - 1) or self.rows < self.batch:
            raise ValueError(f"rows must be a power of two of at least {self.batch} (a batch); got {rows}.")
        self.chunk = min(self.rows, block_size)  # samples per chunk; a chunk past the block's end is zero rows
        self.tile_rows = min(tile_rows or TILE_ROWS, self.batch)
        self.tile_cols = tile_cols or TILE_COLS
        self.sampler_rows = sampler_rows or SAMPLER_ROWS
        self.z2sq = bool(z2sq) and self.depth >= 2
        self.k_rows = 2 * self.depth + 1
        self.weights = [[w[b, layer].contiguous() for layer in range(self.depth)] for b in range(self.n_mlps)]
        self.keys = _key_tensor(keys, self.device)
        shape = (self.n_mlps, self.rows, self.width)
        self._x = torch.zeros(shape, dtype=torch.float32, device=self.device)
        self._y = torch.zeros(shape, dtype=torch.float32, device=self.device)
        # zeros: the control-variate row stays zero where no launch writes it
        tiles = self.rows // self.tile_rows
        self._part = torch.zeros((self.n_mlps, tiles, self.k_rows, self.width), dtype=torch.float64, device=self.device)
        per_block = self.n_mlps * (block_size // self.batch) * self.k_rows * self.width * 8
        self.blocks_per_call = max(1, min(16, OUT_BUDGET // per_block))
        self._out = torch.zeros((self.n_mlps, self.blocks_per_call * (block_size // self.batch), self.k_rows,
                                 self.width), dtype=torch.float64, device=self.device)
        self._views = [(self._x[b], self._y[b]) for b in range(self.n_mlps)]
        if self.device.type == "cuda":
            fix_cublas_workspace()

    def _chunk(self, c0: int, valid: int, batch0: int) -> None:
        """Samples ``[c0, c0 + valid)`` through every layer; their batches' sums into ``_out[:, batch0:]``."""
        _sampler(self._x, self.keys, c0, valid, self.width, False, self.sampler_rows)
        n_batches = -(-valid // self.batch)
        tiles = n_batches * (self.batch // self.tile_rows)  # tiles of whole batches: past ``valid`` zero rows
        grid = (tiles, triton.cdiv(self.width, self.tile_cols), self.n_mlps)
        f32 = self.n_mlps * tiles * self.tile_rows * self.width * 4
        x_is_input = True
        for layer in range(self.depth):
            for b, (x, y) in enumerate(self._views):
                src, dst = (x, y) if x_is_input else (y, x)
                torch.mm(src, self.weights[b][layer], out=dst)
            out = self._y if x_is_input else self._x
            z2 = self.z2sq and layer == 1
            sums = self.n_mlps * tiles * (3 if z2 else 2) * self.width * 8
            _launch(_relu_tree_kernel, grid, Launch("relu-tree", f32, f32 + sums), out, self._part, self.width,
                    out.stride(0), self._part.stride(0), self._part.stride(1), layer, self.depth + layer,
                    2 * self.depth, Z2=z2, TR=self.tile_rows, LOG_TR=_log2(self.tile_rows), TC=self.tile_cols)
            x_is_input = not x_is_input
        tpb = self.batch // self.tile_rows
        sums = self.n_mlps * n_batches * self.k_rows * self.width * 8
        _launch(_batch_tree_kernel, (n_batches, triton.cdiv(self.width, self.tile_cols), self.n_mlps),
                Launch("batch-tree", sums * tpb, sums), self._part, self._out, self.width, self.k_rows,
                self._part.stride(0), self._part.stride(1), self._out.stride(0), self._out.stride(1), batch0,
                TPB=tpb, LOG_TPB=_log2(tpb), TC=self.tile_cols)

    def batches(self, b0: int, b1: int, n_samples: int, *, per_block: bool = False) -> tuple[torch.Tensor, np.ndarray]:
        """Blocks ``[b0, b1)`` (at most ``blocks_per_call``): ``(raw (B, parts, 2·depth+1, width) fp64 on
        the device, samples per part)``, the rows of ``spec.batch_raw`` per batch, or with ``per_block``
        per block (each block's tree over its batches, on the device: a sixteenth of the copy to the host
        and of the host's work). Queues the work and returns without waiting for it; the result is a view
        that the next call overwrites."""
        if not 0 <= b0 < b1 <= ref.block_count(n_samples, self.block_size) or b1 - b0 > self.blocks_per_call:
            raise ValueError(f"blocks [{b0}, {b1}) of {n_samples} samples: need 1 to {self.blocks_per_call} blocks "
                             "inside the data.")
        counts: list[int] = []
        with fp32_gemms(), on_device(self.device):
            for block in range(b0, b1):
                start, end = ref.block_bounds(block, n_samples, self.block_size)
                for c0 in range(start, end, self.chunk):
                    valid = min(self.chunk, end - c0)
                    self._chunk(c0, valid, len(counts))
                    counts += [min(self.batch, valid - s) for s in range(0, valid, self.batch)]
        if not per_block:
            return self._out[:, : len(counts)], np.array(counts, dtype=np.int64)
        per = self.block_size // self.batch
        slots = (b1 - b0) * per
        if slots > len(counts):  # a ragged last block: its missing batches are zero subtrees
            self._out[:, len(counts) : slots].zero_()
        x = self._out[:, :slots].view(self.n_mlps, b1 - b0, per, self.k_rows, self.width)
        while x.shape[2] > 1:  # the pairwise tree over each block's batches
            x = x[:, :, 0::2] + x[:, :, 1::2]
        sizes = [min(self.block_size, n_samples - b * self.block_size) for b in range(b0, b1)]
        return x[:, :, 0], np.array(sizes, dtype=np.int64)

    def batches_host(self, b0: int, b1: int, n_samples: int, *, per_block: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``batches`` copied to the host: the one wait for the device per call."""
        raw, counts = self.batches(b0, b1, n_samples, per_block=per_block)
        return raw.cpu().numpy() + 0.0, counts


def identity(device, rows: int, cublas: str, workspace: int | None) -> dict:
    """What fixes this engine's numbers on ``device`` (for ``metadata.kernel``): the GEMM's shape and
    precision, the GPU model and its SM count (cuBLAS's kernel choice and its bits follow them), the
    cuBLAS and torch versions and the workspace cuBLAS was given."""
    device = torch.device(device)
    out = {"engine": f"philox-{ENGINE}", "version": VERSION, "torch": torch.__version__.split("+")[0],
           "gemm_rows": int(rows), "matmul": "fp32", "accumulation": "fp64", "cublas": cublas,
           "cublas_workspace": workspace}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(gpu=props.name, sm_count=int(props.multi_processor_count),
                   capability=".".join(map(str, torch.cuda.get_device_capability(device))))
    else:
        out.update(gpu=None, sm_count=None, capability=device.type)
    return out
