"""The CLI in-process, as the tests of the verbs call it: ``(exit code, stdout, stderr)``."""

from __future__ import annotations

from whestbench.cli import main


def run(argv, capsys) -> tuple[int, str, str]:
    """``whest ARGV``: its exit code and what it printed."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # --help, version and usage errors raise SystemExit, as 0.16's argparse did
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def dataset(capsys, *args) -> tuple[int, str, str]:
    """``whest dataset ARGS`` (paths may be ``Path``s)."""
    return run(["dataset", *map(str, args)], capsys)
