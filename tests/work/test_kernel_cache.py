"""The "compiling the CPU kernels" note comes only when numba's cache really is cold.

On a loaded node loading cached kernels can take longer than a second; the note used to come from
a timer and so printed on every run there (and on every rank). Now the cache's own index decides.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_cache_reads_cold_in_an_empty_cache_and_warm_once_compiled(tmp_path):
    code = (
        "from whestbench.compute import fused, jit\n"
        "before = jit.cache_is_warm(fused)\n"
        "fused.load_kernels()\n"
        "print(before, jit.cache_is_warm(fused))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]


def _plan():
    from whestbench.bake.plan import BakeConfig, plan_bake

    cfg = BakeConfig(n_mlps=2, n_samples=10**6, width=64, depth=4, output=None, seed=1)
    return plan_bake(cfg, probe=False)


def test_a_slow_load_from_a_warm_cache_says_nothing(monkeypatch):
    from whestbench.compute import fused, jit
    from whestbench.bake import pipeline as bake
    from whestbench.work import steps

    monkeypatch.setattr(steps, "_pcg64_fused", lambda spec, compute=None: True)
    monkeypatch.setattr(jit, "cache_is_warm", lambda module: True)
    monkeypatch.setattr(fused, "load_kernels", lambda: time.sleep(bake.KERNELS_SLOW_S + 0.5))  # a loaded node
    events = []
    bake._load_kernels(_plan(), events.append)
    assert not [e for e in events if e.kind == "note"]


def test_a_cold_cache_says_so_at_once(monkeypatch):
    from whestbench.compute import fused, jit
    from whestbench.bake import pipeline as bake
    from whestbench.work import steps

    monkeypatch.setattr(steps, "_pcg64_fused", lambda spec, compute=None: True)
    monkeypatch.setattr(jit, "cache_is_warm", lambda module: False)
    monkeypatch.setattr(fused, "load_kernels", lambda: None)  # even a fast compile: the cache was cold
    events = []
    bake._load_kernels(_plan(), events.append)
    assert [e.message for e in events if e.kind == "note"] == [bake.KERNELS_NOTE]
