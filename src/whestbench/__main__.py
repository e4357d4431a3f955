"""``python -m whestbench``: the same CLI as ``whest``."""

from whestbench.cli.main import run

run()
