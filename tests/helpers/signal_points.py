"""Run ``python -m whestbench ARGS`` with a signal sent at one named point of its run: the moment is
exact, not a guessed delay, so a busy machine cannot move the signal to another phase.

    python tests/helpers/signal_points.py POINT SIGNUM ARGS...

POINT is one of

- ``find:MODULE``: as the import of MODULE starts (before the module object exists);
- ``exec:MODULE``: inside MODULE's import, the module in ``sys.modules`` and not yet executed (an
  import there of a name from it fails: "partially initialized module");
- ``call:MODULE:FUNC`` or ``call:MODULE:FUNC#N``: as the Nth call (default the first) of MODULE's
  FUNC starts, on whichever thread makes it (every later ``from MODULE import FUNC`` gets the hooked
  function: it is replaced as soon as MODULE has executed).

The process sends the signal to itself with ``os.kill`` (the kernel delivers it as it does one from
outside), then touches the file named by ``WHEST_TEST_SIGNAL_MARK`` (if set), so a test can tell
that the point was reached.
"""

from __future__ import annotations

import os
import sys

ENV_MARK = "WHEST_TEST_SIGNAL_MARK"
SCRIPT = os.path.abspath(__file__)


def _send(signum: int) -> None:
    mark = os.environ.get(ENV_MARK)
    if mark:
        with open(mark, "w") as f:
            f.write("sent\n")
    os.kill(os.getpid(), signum)
    for _ in range(10_000):  # a handler on this thread runs here, inside the hooked point
        pass


def install(point: str, signum: int) -> None:
    """Arm the one-shot signal at ``point`` (see the module docstring)."""
    import functools
    from importlib.machinery import PathFinder

    kind, _, rest = point.partition(":")
    module, _, func = rest.partition(":")
    func, _, nth = func.partition("#")
    calls_left = [int(nth or 1)]
    if kind not in ("find", "exec", "call") or not module or (kind == "call") != bool(func):
        raise SystemExit(f"signal_points: bad point {point!r}")

    def hooked(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            calls_left[0] -= 1
            if calls_left[0] == 0:
                _send(signum)
            return fn(*args, **kwargs)

        return wrapper

    class Finder:
        armed = True

        def find_spec(self, name, path=None, target=None):
            if name != module or not self.armed:
                return None
            self.armed = False
            if kind == "find":
                _send(signum)
                return None
            spec = PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(mod):
                if kind == "exec":
                    _send(signum)
                run(mod)
                if kind == "call":
                    setattr(mod, func, hooked(getattr(mod, func)))

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


if __name__ == "__main__":
    import runpy
    import signal

    # the dispositions a shell gives a command, whatever the test runner's process inherited (an
    # ignored SIGTERM would turn "the default action before the handlers" into a finished bake)
    for name in ("SIGTERM", "SIGUSR1", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    install(sys.argv[1], int(sys.argv[2]))
    sys.argv = ["whestbench", *sys.argv[3:]]
    runpy.run_module("whestbench", run_name="__main__", alter_sys=True)
