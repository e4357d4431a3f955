"""The machine a run is on, in one place: the metadata's ``hardware`` and ``blas`` blocks and version
keys (whestbench 0.16's layout), and the device check's record of the device and its libraries."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
from importlib import metadata as importlib_metadata
from typing import Any

import numpy as np

from whestbench.optional import require


def package_version(name: str, missing: str | None = "unknown") -> str | None:
    """An installed package's version, or ``missing`` (the metadata's "unknown"; None in a device check)."""
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return missing


def whestbench_version() -> str:
    return package_version("whestbench")


def _physical_cores() -> int | None:
    try:
        ids = set()
        base = "/sys/devices/system/cpu"
        for entry in os.listdir(base):
            if entry.startswith("cpu") and entry[3:].isdigit():
                path = os.path.join(base, entry, "topology", "core_id")
                pkg = os.path.join(base, entry, "topology", "physical_package_id")
                if os.path.exists(path):
                    with open(path) as f, open(pkg) if os.path.exists(pkg) else open(path) as g:
                        ids.add((g.read().strip(), f.read().strip()))
        return len(ids) or None
    except OSError:
        return None


def _proc_line(path: str, prefix: str) -> str | None:
    """The first line of ``path`` (a Linux /proc file) that starts with ``prefix``; None when there is
    none or the file cannot be read."""
    try:
        with open(path) as f:
            return next((line for line in f if line.startswith(prefix)), None)
    except OSError:
        return None


def _ram_total() -> int | None:
    line = _proc_line("/proc/meminfo", "MemTotal:")
    return int(line.split()[1]) * 1024 if line else None


def machine_memory() -> tuple[int | None, int | None]:
    """``(total, available)`` RAM in bytes from /proc/meminfo (None where unknown; the total, else
    from the OS's page count)."""
    avail = _proc_line("/proc/meminfo", "MemAvailable:")
    total = _ram_total()
    if total is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total, int(avail.split()[1]) * 1024 if avail else None


def hardware_fingerprint() -> dict[str, Any]:
    """The ``hardware`` block, with whestbench 0.16's keys in its order (values never raise)."""
    ram_available = None
    with contextlib.suppress(Exception):
        import psutil  # optional, as in the reference

        ram_available = int(psutil.virtual_memory().available)
    return {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "os_release": platform.release(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "cpu_brand": platform.processor() or cpu_model() or "unknown",
        "cpu_count_logical": os.cpu_count() or 1,
        "cpu_count_physical": _physical_cores(),
        "ram_total_bytes": _ram_total(),
        "ram_available_bytes": ram_available,
        "numpy_version": np.__version__,
        "flopscope_version": package_version("flopscope"),
    }


def _blas_entry() -> dict[str, Any] | None:
    """numpy's BLAS as threadpoolctl sees it, or None."""
    try:
        from threadpoolctl import threadpool_info

        return next((e for e in threadpool_info() if e.get("user_api") == "blas"), None)
    except Exception:  # noqa: BLE001 - a version report never fails
        return None


def blas_info() -> dict[str, Any]:
    """The metadata's ``blas`` block: numpy's BLAS library, version, kernel (core type)."""
    e = _blas_entry()
    if e is None:
        return {"library": "unknown", "version": None, "kernel": None, "threads_per_worker": 1}
    return {"library": e.get("internal_api"), "version": e.get("version"), "kernel": e.get("architecture"),
            "threading_layer": e.get("threading_layer"), "threads_per_worker": 1}


# --- the device check's record of the machine ---------------------------------------------------------


def _blas() -> dict[str, Any]:
    e = _blas_entry()
    if e is None:
        return {"library": None}
    return {"library": e.get("internal_api"), "version": e.get("version"), "kernel": e.get("architecture"),
            "threads": e.get("num_threads")}


def versions() -> dict[str, Any]:
    """torch, CUDA, the driver, triton, numba, numpy and its BLAS (None where absent)."""
    out: dict[str, Any] = {"whestbench": package_version("whestbench", None), "python": platform.python_version(),
                           "numpy": np.__version__, "blas": _blas(), "numba": package_version("numba", None),
                           "torch": None, "cuda": None, "cuda_driver": None, "triton": package_version("triton", None)}
    try:
        torch = require("torch")
    except ImportError:  # TorchMissingError: a machine without torch
        return out
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["cuda_driver"] = driver_version()
    return out


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else None."""
    line = _proc_line("/proc/cpuinfo", "model name")
    return line.split(":", 1)[1].strip() if line else None


def device_facts(device: str) -> dict[str, Any]:
    """The device: its name, capability, memory, and the matmul settings that change the numbers."""
    facts: dict[str, Any] = {"type": device.split(":")[0], "name": None}
    if facts["type"] == "cpu":
        facts.update(name=cpu_model() or platform.processor() or platform.machine() or "cpu", cores=os.cpu_count(), machine=platform.machine())
    try:
        torch = require("torch")
    except ImportError:
        return facts
    facts.update(matmul_precision=torch.get_float32_matmul_precision(),
                 allow_tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
                 allow_tf32_cudnn=bool(torch.backends.cudnn.allow_tf32))
    if facts["type"] == "cuda":
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        facts.update(name=props.name, capability=list(torch.cuda.get_device_capability(dev)),
                     memory_bytes=int(props.total_memory), multiprocessors=int(props.multi_processor_count))
    elif facts["type"] == "cpu":
        facts["torch_threads"] = torch.get_num_threads()
    elif facts["type"] == "mps":
        facts["name"] = platform.processor() or "Apple Silicon"
    return facts


def process_seconds() -> float | None:
    """Wall seconds since this process started (the interpreter's own start-up included), from
    /proc (Linux); None where it cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, counted after the ")"
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi says it (None: no nvidia-smi, or it failed)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
