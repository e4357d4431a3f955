"""``python -m whestbench``: the same CLI as ``whest``."""

from whestbench.cli.entry import run

run()
