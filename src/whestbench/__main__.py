"""``python -m whestbench``: the same CLI as ``whest``."""

from whestbench.cli.app import run

run()
