"""What produced a dataset: hardware fingerprint, library versions, BLAS kernel (metadata fields)."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata as importlib_metadata
from typing import Any

import numpy as np


def package_version(name: str) -> str:
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


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


def _ram_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cpu_brand() -> str:
    from whestbench.work.device_check import cpu_model

    return platform.processor() or cpu_model() or "unknown"


def hardware_fingerprint() -> dict[str, Any]:
    """The ``hardware`` block, with whestbench 0.16's keys in its order (values never raise)."""
    ram_available = None
    try:
        import psutil  # optional, as in the reference

        ram_available = int(psutil.virtual_memory().available)
    except Exception:
        pass
    return {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "os_release": platform.release(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "cpu_brand": _cpu_brand(),
        "cpu_count_logical": os.cpu_count() or 1,
        "cpu_count_physical": _physical_cores(),
        "ram_total_bytes": _ram_total(),
        "ram_available_bytes": ram_available,
        "numpy_version": np.__version__,
        "flopscope_version": package_version("flopscope"),
    }


def blas_info() -> dict[str, Any]:
    """numpy's BLAS as threadpoolctl sees it: library, version, kernel (core type)."""
    try:
        from threadpoolctl import threadpool_info

        for entry in threadpool_info():
            if entry.get("user_api") == "blas":
                return {
                    "library": entry.get("internal_api"),
                    "version": entry.get("version"),
                    "kernel": entry.get("architecture"),
                    "threading_layer": entry.get("threading_layer"),
                    "threads_per_worker": 1,
                }
    except Exception:
        pass
    return {"library": "unknown", "version": None, "kernel": None, "threads_per_worker": 1}
