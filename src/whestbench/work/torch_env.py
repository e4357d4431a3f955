"""The torch side of a bake: resolving ``--device`` and recording what can change the numbers (the
kernel identity: ``kernel_identity``, with the GPU and its cuBLAS).

Imported only when the torch backend is chosen (torch is an optional extra).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
from importlib import metadata
from typing import Any

from whestbench.errors import TorchMissingError, UsageError
from whestbench.optional import engine_module, require
from whestbench.work.machine import driver_version
from whestbench.work import DEVICES


def import_torch():
    """``torch`` (``optional.require``), or ``TorchMissingError`` saying how to install it or do without."""
    try:
        return require("torch")
    except TorchMissingError:
        exc = TorchMissingError("the torch backend needs torch:",
                                fix="pip install 'whestbench[gpu]' (or drop --torch/--device for the CPU path).")
        exc.name = "torch"
        raise exc from None


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
        raise UsageError(f"--device cuda was requested but torch {torch.__version__} sees no CUDA device "
                         f"(torch.version.cuda={torch.version.cuda});", fix="use --device cpu, or install a CUDA build of torch.")
    if name == "mps" and not mps_ok:
        raise UsageError("--device mps was requested but MPS is not available;", fix="use --device cpu or cuda.")
    if name not in DEVICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICES)}; got {name!r}.",
                         fix="Pass --device auto to use the best device present.")
    return name


def sync_device(device: str) -> None:
    """Wait for the work queued on ``device`` (a CUDA device; nothing to wait for elsewhere)."""
    if device.startswith("cuda"):
        import_torch().cuda.synchronize()


def cublas_version(device: str = "cuda") -> str:
    """The cuBLAS this process multiplies with on ``device``, e.g. ``"12.8.4"``: asked of the loaded
    library (``cublasGetProperty``); else the pip package that ships it; else a sentence saying why unknown."""
    torch = import_torch()
    if not torch.cuda.is_available():
        return "unavailable: no CUDA device"
    try:
        with torch.cuda.device(torch.device(device)):
            torch.cuda.current_blas_handle()  # loads cuBLAS (and makes the handle the device's GEMMs use)
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            path = loaded_library(f.read(), "libcublas.so")
    except (OSError, RuntimeError):
        path = None
    if path is not None:
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            lib, parts = ctypes.CDLL(path), []
            for prop in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    raise OSError(f"cublasGetProperty({prop}) failed")
                parts.append(str(value.value))
            return ".".join(parts)
    for dist in ("nvidia-cublas-cu12", "nvidia-cublas-cu13", "nvidia-cublas", "nvidia-cublas-cu11"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{metadata.version(dist)} ({dist}; the loaded library did not say)"
    return "unavailable: no libcublas in the process and no nvidia-cublas package"


def loaded_library(maps: str, soname: str) -> str | None:
    """The path of the first mapped file named ``soname`` (or ``soname.N...``) in ``/proc/<pid>/maps``'s text."""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        path = fields[5].strip() if len(fields) == 6 else ""
        name = path.rsplit("/", 1)[-1]
        if name == soname or name.startswith(soname + "."):
            return path
    return None


def kernel_identity(device: str, engine: str, width: int, rows: int | None = None) -> dict[str, Any]:
    """``metadata.kernel``'s ``name`` and ``precision_class`` (and the cuda engine's ``config``) for a
    torch bake's engine on ``device``: equal precision classes give identical numeric columns."""
    if engine != "cuda":
        return {"name": f"philox-{engine}-{device}", "precision_class": engine_module("torch").kernel_name(device, engine)}
    cuda_engine = engine_module("cuda")
    rows = rows or cuda_engine.gemm_rows(width)
    workspace = cuda_engine.fix_cublas_workspace() if device.startswith("cuda") else None
    if workspace is None:
        workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG") or "cuBLAS default"
    config = cuda_engine.identity(device, rows, cublas_version(device) if device.startswith("cuda") else
                                  "unavailable: not a CUDA device", workspace)
    return {"name": f"philox-{cuda_engine.ENGINE}", "precision_class": json.dumps(config, sort_keys=True),
            "config": config}


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
        driver = driver_version()
        if driver:
            md["cudadriver_version"] = driver
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
