"""The torch side of a bake: resolving ``--device`` and recording what can change the numbers.

Imported only when the torch backend is chosen (torch is an optional extra).
"""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

from whestbench.errors import TorchMissingError, UsageError
from whestbench.work import DEVICES


def import_torch():
    """``torch``, or ``TorchMissingError`` saying how to install it."""
    try:
        import torch
    except ImportError:
        exc = TorchMissingError(
            "the torch backend needs torch: pip install 'whestbench[gpu]' (or drop --torch/--device for the CPU path)."
        )
        exc.name = "torch"
        raise exc from None
    return torch


def resolve_device(name: str | None) -> str:
    """``auto`` -> cuda, else mps, else cpu. An explicit device that is absent is an error, never a fallback."""
    torch = import_torch()
    name = (name or "auto").lower()
    mps_ok = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if mps_ok else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"--device cuda was requested but torch {torch.__version__} sees no CUDA device "
            f"(torch.version.cuda={torch.version.cuda}); use --device cpu, or install a CUDA build of torch."
        )
    if name == "mps" and not mps_ok:
        raise UsageError("--device mps was requested but MPS is not available; use --device cpu or cuda.")
    if name not in DEVICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICES)}; got {name!r}.")
    return name


def sync_device(device: str) -> None:
    """Wait for the work queued on ``device`` (a CUDA device; nothing to wait for elsewhere)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def torch_metadata(device: str, *, mlps_per_batch: int, chunk_size: int, kernel: dict[str, Any]) -> dict[str, Any]:
    """The torch fields of metadata.json, in whestbench 0.16's order, then our ``kernel`` block."""
    torch = import_torch()
    md: dict[str, Any] = {
        "torch_version": torch.__version__,
        "device": device,
        "mlps_per_batch": mlps_per_batch,
        "chunk_size": chunk_size,
        "torch_compile": False,
        "bake_config": {
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "torch_use_deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        },
    }
    if device == "cuda":
        idx = torch.cuda.current_device()
        md["cuda_device_name"] = torch.cuda.get_device_name(idx)
        md["cuda_device_capability"] = list(torch.cuda.get_device_capability(idx))
        driver = _driver_version()
        if driver:
            md["cuda_driver_version"] = driver
        md["cuda_version"] = torch.version.cuda
    elif device == "mps":
        md["mps_device_name"] = platform.processor() or "Apple Silicon"
    md["kernel"] = {
        **kernel,
        "accumulation": "float32" if device == "mps" else "float64",
        "matmul_precision": torch.get_float32_matmul_precision(),
        "allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "num_threads": torch.get_num_threads() if device == "cpu" else None,
    }
    return md
