"""Ctrl-C (or SIGTERM) from the entry point's first line: one line and the exit code, never a traceback.

A Ctrl-C that lands while Python is still loading whestbench's entry point used to print a
``KeyboardInterrupt`` traceback from the import machinery. Here the signal is sent from an import
hook at the moment a given module is imported (so the timing is exact, not a race): the first
module ``python -m whestbench`` imports, the first ``run()`` imports, and the CLI itself.

Not covered, because no code of ours has run yet: a signal during the interpreter's own start-up
(``site``, ``runpy``: the first ~20 ms on a quiet machine), where Python itself prints the traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import os, runpy, signal, sys

target, signum = sys.argv[1], int(sys.argv[2])

class SignalOnImport:
    sent = False

    def find_spec(self, name, path=None, target_=None):
        if name == target and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["whestbench", *sys.argv[3:]]
runpy.run_module("whestbench", run_name="__main__", alter_sys=True)
"""


MODULES = ["whestbench.cli", "whestbench.cli.entry", "whestbench.cli.signals", "whestbench.errors", "whestbench.cli.app"]
CASES = [(m, ["dataset", "bake"], signal.SIGINT, 130) for m in MODULES]
CASES += [(m, ["dataset", "inspect"], signal.SIGINT, 130) for m in MODULES]
# SIGTERM before run() installs its handler takes the default action (documented: 143, silent)
CASES += [(m, ["dataset", "bake"], signal.SIGTERM, 75) for m in MODULES[3:]]


@pytest.mark.parametrize("module, verb, sig, code", CASES)
def test_a_stop_while_the_entry_point_loads_ends_with_one_line(tmp_path, module, verb, sig, code):
    argv = [*verb, "--n-mlps", "1", "--n-samples", "100", "--width", "4", "--depth", "2", "--output", str(tmp_path / "o")]
    if verb[1] == "inspect":
        argv = [*verb, str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, module, str(int(sig)), *argv], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "o").exists()
