"""Running work: units named by identity (never by rank or order), the resume ledger and the work
directory, the loops that run units in one process or across ranks, devices and thread counts, and
the facts of the machine (``machine``).

May import: ``compute`` and the top-level helpers.
"""

CHECKPOINT_EVERY_S = 60.0
"""The default seconds between checkpoints inside a unit (``--checkpoint-every``, SPEC §5); here, free
of numpy, so the CLI can show it without importing the work itself."""
DEVICES = ("auto", "cuda", "mps", "cpu")
"""The torch devices a bake or calibration can ask for (``--device``); auto picks cuda, then mps, then cpu."""
GPU_KERNELS = ("torch", "ozaki", "fused")
"""How a CUDA bake computes (``--gpu-kernel``): plain torch ops around cuBLAS, the integer (Ozaki) Triton
kernel, or the fused split-precision Triton kernel (withdrawn)."""
WITHDRAWN_GPU_KERNELS = {
    "fused": "its split-precision tensor-core arithmetic fails the precision gate under the H100 tensor-core "
             "accumulator model, as it failed on an H200 (docs/gpu-kernel.md)",
}
"""Kernels a bake no longer runs, and why: asking for one is a one-line error naming ``GPU_KERNEL_REPLACEMENT``."""
GPU_KERNEL_REPLACEMENT = "ozaki"
