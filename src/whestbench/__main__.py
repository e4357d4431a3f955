"""``python -m whestbench``: the same CLI as ``whest``."""

try:
    from whestbench.cli.entry import run
except KeyboardInterrupt:  # Ctrl-C while Python loads the entry point: one line, not a traceback
    import os
    import sys

    print("error: interrupted (Ctrl-C) while starting; nothing was done: re-run the same command.", file=sys.stderr, flush=True)
    os._exit(130)

run()
