"""Command-line interface: ``whest`` / ``whestbench`` / ``python -m whestbench``.

Each verb is a small function that turns flags into a config and calls one library function.
``whestbench.cli.main(argv)`` runs the CLI in-process (resolved lazily, so the process entry point,
``cli/entry.py``, can install its signal handlers before click and rich are imported).

May import: ``compute``, ``work``, ``format``, ``hub``, ``bake``, ``verify``, ``assemble`` and the top-level helpers."""

from __future__ import annotations


__all__ = ["main"]


def __getattr__(name: str) -> object:  # no typing import: start-up stays short (a Ctrl-C then meets no handler)
    if name == "main":
        from whestbench.cli.app import main

        return main
    raise AttributeError(f"module 'whestbench.cli' has no attribute {name!r}")
