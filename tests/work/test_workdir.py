"""The work directory: where it lies beside the output, and its lock (one bake at a time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from whestbench.work.workdir import WorkDirBusy, hold_lock, work_dir_for


def test_work_dir_sits_beside_the_output():
    assert work_dir_for(Path("/data/out/ds")) == Path("/data/out/ds.whest-work")


def test_a_second_holder_of_the_lock_is_refused_naming_the_first(tmp_path):
    import subprocess
    import sys

    code = ("import sys, time; from pathlib import Path; from whestbench.work.workdir import hold_lock\n"
            "with hold_lock(Path(sys.argv[1]), 'x'):\n    print('held', flush=True); time.sleep(600)")  # held until killed below, however slow the machine
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "w")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(WorkDirBusy) as info:
            with hold_lock(tmp_path / "w"):
                pass
        assert f"pid {proc.pid}" in str(info.value) and "remove" in str(info.value)
    finally:
        proc.kill()
        proc.wait()
    with hold_lock(tmp_path / "w"):  # a killed holder never blocks the next bake
        pass
