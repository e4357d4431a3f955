"""Where numba caches the kernels: its own places when writable, else a private temporary directory."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile

import pytest

from whestbench.compute import jit

# numba's locators without its in-tree and user-wide ones: what a read-only install run by a user
# without a writable home looks like to numba (it refuses to define cache=True kernels there).
NOTHING_WRITABLE = {"NUMBA_CACHE_LOCATOR_CLASSES": "UserProvidedCacheLocator,IPythonCacheLocator"}


def _run(code: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    full.update(TMPDIR=str(tmp_path), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)


def test_kernels_compile_and_cache_where_numba_finds_no_writable_place(tmp_path):
    code = "from whestbench.compute import fused; fused.load_kernels(); from numba.core import config; print(config.CACHE_DIR)"
    done = _run(code, tmp_path, **NOTHING_WRITABLE)
    assert done.returncode == 0, done.stderr
    cache = tmp_path / f"whestbench-numba-{os.getuid()}"
    assert done.stdout.strip() == str(cache)
    assert any(p.suffix == ".nbi" for p in cache.rglob("*")), "the kernels' index was not written there"


def test_an_explicit_numba_cache_dir_is_kept(tmp_path):
    mine = tmp_path / "mine"
    code = "from whestbench.compute import fused; from numba.core import config; print(config.CACHE_DIR)"
    done = _run(code, tmp_path, NUMBA_CACHE_DIR=str(mine), **NOTHING_WRITABLE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(mine)


def test_the_private_cache_dir_is_closed_to_other_users(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = jit.private_cache_dir()
    assert path == str(tmp_path / f"whestbench-numba-{os.getuid()}")
    mode = os.stat(path).st_mode
    assert stat.S_IMODE(mode) & 0o077 == 0


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_cache_dir_others_can_write_is_not_used(tmp_path, monkeypatch):
    """Cache files are pickles: a directory another user could have filled is never loaded from."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"whestbench-numba-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    path = jit.private_cache_dir()
    assert path != str(planted)
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith("whestbench-numba-")
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
