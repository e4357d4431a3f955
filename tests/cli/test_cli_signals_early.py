"""Ctrl-C (or SIGTERM) from the entry point's first line: one line and the exit code, never a traceback.

A Ctrl-C that lands while Python is still loading whestbench's entry point used to print a
``KeyboardInterrupt`` traceback from the import machinery; a SIGTERM that landed inside the import
of ``whestbench.errors`` once run() had its handler died of an ImportError traceback (the handler
imported ``SignalStop`` from the half-initialized module). Here the signal is sent from an import
hook (``tests/helpers/signal_points.py``) at the moment a given module's import starts, or inside it, so the
timing is exact, not a race: the first module ``python -m whestbench`` imports, the modules
``run()`` imports before and after it installs the stop handlers, and the CLI itself.

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

from helpers.signal_points import ENV_MARK, SCRIPT


REPO = Path(__file__).resolve().parents[2]

MODULES = ["whestbench.cli", "whestbench.cli.entry", "whestbench.cli.signals", "whestbench.errors", "whestbench.cli.app",
           "whestbench.cli.common"]
HANDLED_FROM = MODULES.index("whestbench.cli.app")  # run() has installed the stop handlers before this import
# (where: "find", as the import starts; "exec", inside it, the module half-initialized)
CASES = [(w, m, ["dataset", "bake"], signal.SIGINT, 130) for w in ("find", "exec") for m in MODULES]
CASES += [(w, m, ["dataset", "inspect"], signal.SIGINT, 130) for w in ("find", "exec") for m in MODULES]
# a stop signal before run() installs its handler takes the default action (docs/cli.md: 143, silent);
# from then on it is the bake's one line and 75, wherever an import stands (the handler imported
# ``whestbench.errors`` when the signal landed in that import, and died of an ImportError traceback)
CASES += [(w, m, ["dataset", "bake"], s, -s if i < HANDLED_FROM else 75)
          for w in ("find", "exec") for i, m in enumerate(MODULES) for s in (signal.SIGTERM, signal.SIGUSR1)]


@pytest.mark.parametrize("where, module, verb, sig, code", CASES)
def test_a_stop_while_the_entry_point_loads_ends_with_one_line(tmp_path, where, module, verb, sig, code):
    argv = [*verb, "--n-mlps", "1", "--n-samples", "100", "--width", "4", "--depth", "2", "--output", str(tmp_path / "o")]
    if verb[1] == "inspect":
        argv = [*verb, str(tmp_path)]
    mark = tmp_path / "signal-sent"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), ENV_MARK: str(mark)}
    proc = subprocess.run([sys.executable, SCRIPT, f"{where}:{module}", str(int(sig)), *argv], env=env,
                          capture_output=True, text=True, timeout=300)  # a hang guard, not a verdict
    assert mark.exists(), f"the signal was never sent at {where}:{module}"
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    if code < 0:  # the default action: the process ends at once, silently
        assert proc.stderr == "", proc.stderr
    else:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "o").exists()
