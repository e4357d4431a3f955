"""Where numba keeps the compiled kernels of ``fused.py`` and ``philox/numba_kernels.py``.

numba caches a ``cache=True`` kernel beside its source (``compute/__pycache__``), else in the user's
cache directory (``~/.cache/numba``), or where ``NUMBA_CACHE_DIR`` says. When none of those can be
written (a read-only install run by a user without a writable home, as in some containers) numba
refuses to define the kernels at all; ``ensure_cache_dir`` then points it at a private directory
under the system's temporary directory, so the kernels still compile once per machine and load
from there on later runs.

Each of those modules also has ``load_kernels()``: compile (first run on a machine: seconds) or load
from the cache every specialisation its callers use, so a bake can do it before its units start and
say so when it takes long (``work.steps.kernel_module``, ``bake.pipeline``).
"""

from __future__ import annotations

import os
import stat
import tempfile


def _probe() -> None:  # pragma: no cover - never called: numba locates caches from a function's file
    pass


def private_cache_dir() -> str:
    """``<tmp>/whestbench-numba-<uid>``, created 0700 and owned by this user; a fresh private
    directory if that name is taken by someone else (cache files are pickles: never load others')."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"whestbench-numba-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return path
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="whestbench-numba-")


def ensure_cache_dir() -> None:
    """Make sure numba has somewhere to write this package's kernel cache (see the module doc).

    Runs numba's own search for a cache location (the one ``cache=True`` runs); only when it finds
    none is ``numba.config.CACHE_DIR`` set. An explicit ``NUMBA_CACHE_DIR`` is always kept.
    """
    from numba.core import config

    if config.CACHE_DIR:
        return
    try:
        from numba.core.caching import FunctionCache
    except ImportError:  # a numba whose internals moved: keep its default behaviour
        return
    try:
        FunctionCache(_probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        config.CACHE_DIR = private_cache_dir()



def cache_is_warm(module) -> bool | None:
    """Whether numba's cache holds every ``cache=True`` kernel of ``module`` compiled for this machine
    (so ``load_kernels`` only loads them: ~0.1 s); False when one is missing (a first run on this
    machine, an upgrade, another CPU sharing the cache); None when numba's cache cannot be read
    this way (its internals moved): then nobody knows.

    Reads the cache's index files, the way numba itself decides: an index whose source stamp no
    longer matches reads as empty; an entry counts only for this machine's code generator.
    """
    try:
        from numba.core.registry import CPUDispatcher

        kernels = [obj for obj in vars(module).values()
                   if isinstance(obj, CPUDispatcher) and getattr(obj, "_cache", None) is not None
                   and type(obj._cache).__name__ == "FunctionCache"]
        if not kernels:
            return None
        ensure_cache_dir()
        for kernel in kernels:
            index = kernel._cache._cache_file._load_index()  # {} when absent or stale
            machine = kernel.targetctx.codegen().magic_tuple()
            if not any(key[1] == machine for key in index):
                return False
        return True
    except Exception:  # noqa: BLE001 - numba internals: unknown, not an error
        return None
