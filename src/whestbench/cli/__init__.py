"""Command-line interface: ``whest`` / ``whestbench`` / ``python -m whestbench``.

Each verb is a small function that turns flags into a config and calls one library function.
"""

from whestbench.cli.app import main

__all__ = ["main"]
