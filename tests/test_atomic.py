"""atomic: a staged directory is marked while it is built and never published with its marker; only a
killed writer's marked staging is removed later, never a live writer's, another host's or a user's."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from whestbench.atomic import STAGING_MARK, remove_abandoned_staging, staged_dir, write_file_atomic


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _staging(parent: Path, target: str, suffix: str = "abc123", **mark) -> Path:
    d = parent / f".{target}.staging-{suffix}"
    d.mkdir()
    (d / "data.bin").write_bytes(b"x" * 100)
    if mark:
        (d / STAGING_MARK).write_text(json.dumps({"target": target, "host": socket.gethostname(), **mark}))
    return d


def test_a_staging_directory_is_marked_while_built_and_published_without_the_mark(tmp_path):
    target = tmp_path / "out"
    with staged_dir(target) as stage:
        mark = json.loads((stage / STAGING_MARK).read_text())
        assert mark == {"target": "out", "pid": os.getpid(), "host": socket.gethostname()}
        (stage / "file").write_text("content")
    assert sorted(p.name for p in target.iterdir()) == ["file"]


def test_a_killed_writers_staging_is_removed(tmp_path):
    left = _staging(tmp_path, "out", pid=_dead_pid())
    assert remove_abandoned_staging(tmp_path / "out") == [left]
    assert not left.exists()


@pytest.mark.parametrize(
    "case",
    ["no marker (a user's directory)", "a live writer", "another host", "another target", "garbage marker"],
)
def test_staging_that_may_not_be_abandoned_is_left_alone(tmp_path, case):
    if case == "no marker (a user's directory)":
        d = _staging(tmp_path, "out")
    elif case == "a live writer":
        d = _staging(tmp_path, "out", pid=os.getppid())
    elif case == "another host":
        d = _staging(tmp_path, "out", pid=_dead_pid())
        (d / STAGING_MARK).write_text(json.dumps({"target": "out", "host": "elsewhere", "pid": 1}))
    elif case == "another target":
        d = _staging(tmp_path, "out", pid=_dead_pid())
        (d / STAGING_MARK).write_text(json.dumps({"target": "out2", "host": socket.gethostname(), "pid": 999_999_999}))
    else:
        d = _staging(tmp_path, "out")
        (d / STAGING_MARK).write_text("{not json")
    assert remove_abandoned_staging(tmp_path / "out") == []
    assert (d / "data.bin").read_bytes() == b"x" * 100


def test_only_the_targets_own_staging_is_considered(tmp_path):
    other = _staging(tmp_path, "out-2", pid=_dead_pid())  # ".out-2.staging-*" is not ".out.staging-*"
    assert remove_abandoned_staging(tmp_path / "out") == []
    assert other.exists()


def test_a_target_name_with_glob_characters_matches_literally(tmp_path):
    mine = _staging(tmp_path, "o[u]t*", pid=_dead_pid())
    theirs = _staging(tmp_path, "out", pid=_dead_pid())
    assert remove_abandoned_staging(tmp_path / "o[u]t*") == [mine]
    assert theirs.exists()


# --- permissions without touching the process umask ---------------------------------------------


def test_atomic_writes_never_touch_the_process_umask(tmp_path, monkeypatch):
    # Reading the umask means setting it; two threads doing that at once left it at 0 (every file
    # created afterwards world-writable). So the atomic writers must never call os.umask at all.
    from whestbench.atomic import write_file_atomic

    def forbidden(*_a):
        raise AssertionError("os.umask was called")

    monkeypatch.setattr(os, "umask", forbidden)
    write_file_atomic(tmp_path / "f.bin", b"data")
    with staged_dir(tmp_path / "ds") as stage:
        (stage / "x").write_text("y")
    assert (tmp_path / "f.bin").read_bytes() == b"data" and (tmp_path / "ds" / "x").exists()


def test_written_files_and_directories_get_the_users_normal_permissions(tmp_path):
    code = (
        "import os, sys; from pathlib import Path; os.umask(0o027)\n"
        "from whestbench.atomic import staged_dir, write_file_atomic\n"
        "t = Path(sys.argv[1]); write_file_atomic(t / 'f', b'x')\n"
        "with staged_dir(t / 'ds') as s: (s / 'inner').write_text('y')\n"
        "print(oct(os.stat(t / 'f').st_mode & 0o777), oct(os.stat(t / 'ds').st_mode & 0o777), oct(os.umask(0)))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0o640", "0o750", "0o27"]  # 0666/0777 masked by the umask, umask intact


def test_concurrent_atomic_writes_leave_the_umask_as_it_was(tmp_path):
    import threading

    from whestbench.atomic import write_file_atomic

    before = os.umask(0o022)
    os.umask(before)
    threads = [threading.Thread(target=lambda i=i: [write_file_atomic(tmp_path / f"f{i}-{k}", b"x") for k in range(200)])
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = os.umask(before)
    assert after == before
    modes = {os.stat(p).st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {0o666 & ~before}


def test_write_file_atomic_never_replaces_a_non_regular_file(tmp_path):
    """The rename would replace a FIFO or device node put at the target after the flags were checked:
    it is refused just before the rename, and no temp file is left behind."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    os.symlink(fifo, link)
    for target in (fifo, link, tmp_path / "dir"):
        if target.name == "dir":
            target.mkdir()
        with pytest.raises(OSError, match="not a regular file"):
            write_file_atomic(target, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link"]
    write_file_atomic(tmp_path / "new", b"ok")
    write_file_atomic(tmp_path / "new", b"again")
    assert (tmp_path / "new").read_bytes() == b"again"
